"""Attacks on proofs of liabilities: each forged proof is refused by the standalone verifier, even when the
exchange signs it with its own key (the exchange is the party a customer checks)."""

import copy

import pytest

from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import fund
from apps.proofs.services import liabilities_snapshot_take
from apps.proofs.sumtree import Leaf, TreeError, format_units, leaves_ordered

from .forgery import forge, maxwell_node, path_units, resign


@pytest.fixture
def keys(api):
    return api.get("/api/v1/proofs/keys/").json()


@pytest.fixture
def proof(snapshot, funded, api_as):
    """Ann's real proof (BTC 0.5, USDT 12) in a tree of three users."""
    return api_as(funded[0]).get("/api/v1/proofs/liabilities/latest/").json()


def refusal(verifier, proof, keys) -> str:
    with pytest.raises(verifier.Refused) as refused:
        verifier.verify(proof, keys)
    return str(refused.value)


def test_the_real_proof_verifies(verifier, proof, keys):
    assert verifier.verify(proof, keys) == ["0.50000000", "12.000000"]
    assert proof["snapshot"]["root_sums"] == ["1.75000000", "12.000001"]


def test_a_path_that_only_recomputes_itself_is_accepted_only_when_sound(verifier, proof, keys):
    """The forging helper is honest when asked to be: the same path, re-signed, still verifies."""
    assert verifier.verify(forge(proof, path_units(proof)), keys) == ["0.50000000", "12.000000"]


def test_a_maxwell_tree_that_hashes_only_the_parent_sum_is_refused(verifier, proof, keys):
    forged = forge(proof, path_units(proof), node=maxwell_node)
    assert "does not lead to the snapshot's root_hash" in refusal(verifier, forged, keys)


def test_a_negative_balance_is_refused(verifier, proof, keys):
    path = path_units(proof)
    side, sibling, sums = path[0]
    path[0] = (side, sibling, [-sums[0] - 1, sums[1]])  # a sibling that "owes" BTC, hiding Ann's 0.5
    assert "is not a non-negative amount" in refusal(verifier, forge(proof, path), keys)


def test_value_shifted_between_siblings_is_refused(verifier, funded, btc, api_as, keys):
    from apps.ledger.tests.factories import UserFactory

    for n in range(5):  # eight users: every path has three steps
        fund(UserFactory(username=f"extra{n}"), btc, "0.1")
    journal_seal()
    liabilities_snapshot_take()
    proof = api_as(funded[0]).get("/api/v1/proofs/liabilities/latest/").json()
    path = path_units(proof)
    donor, receiver = (0, 1) if path[0][2][0] else (1, 0)
    # Lower one sibling's BTC and raise the other's by as much: every total, and the root sums, stay the same.
    forged = copy.deepcopy(proof)
    for step, change in ((donor, -1), (receiver, +1)):
        units = path[step][2][0] + change
        forged["path"][step]["sums"][0] = format_units(units, 8)

    assert len(path) == 3 and forged["snapshot"] == proof["snapshot"]
    assert "does not lead to the snapshot's root_hash" in refusal(verifier, forged, keys)


def test_a_truncated_hash_is_refused(verifier, proof, keys):
    forged = copy.deepcopy(proof)
    forged["path"][0]["hash"] = forged["path"][0]["hash"][:16]  # 64 bits, as some published trees used
    assert "is not a SHA-256 hash of 64 lower-case hex characters" in refusal(verifier, forged, keys)


def test_an_amount_with_too_many_decimals_is_refused(verifier, proof, keys):
    forged = copy.deepcopy(proof)
    forged["balances"][0] = "0.500000000"
    assert "is not a non-negative amount with exactly 8 decimals" in refusal(verifier, resign(forged), keys)


def test_an_amount_without_its_decimals_is_refused(verifier, proof, keys):
    forged = copy.deepcopy(proof)
    forged["balances"][1] = "12"
    assert "exactly 6 decimals" in refusal(verifier, forged, keys)


def test_a_sum_that_overflows_2_128_is_refused(verifier, proof, keys):
    path = path_units(proof)
    side, sibling, sums = path[-1]
    # A sibling of 2**128 - 1 units wraps the total round to just below Ann's own balance.
    path[-1] = (side, sibling, [2**128 - 1, sums[1]])
    forged = forge(proof, path, wrap=True)
    assert "reaches 2**128" in refusal(verifier, forged, keys)


def test_a_proof_against_another_snapshots_signature_is_refused(verifier, proof, keys, funded, usdt):
    fund(funded[3], usdt, "7")
    journal_seal()
    newer = liabilities_snapshot_take()

    forged = copy.deepcopy(proof)
    forged["signature"] = newer.signature
    assert "the signature does not verify" in refusal(verifier, forged, keys)
    forged["snapshot_hash"] = newer.snapshot_hash
    assert "snapshot_hash is not the SHA-256 of the snapshot" in refusal(verifier, forged, keys)


def test_an_unpublished_key_is_refused(verifier, proof, keys):
    forged = copy.deepcopy(proof)
    forged["key_id"] = "0" * 16
    assert "is not among the exchange's published keys" in refusal(verifier, forged, keys)


def resigned(proof: dict, **snapshot) -> dict:
    """``proof`` with these snapshot fields changed, signed by the exchange's own key."""
    forged = copy.deepcopy(proof)
    forged["snapshot"].update(snapshot)
    return resign(forged)


def test_a_snapshot_claiming_another_number_of_customers_is_refused(verifier, proof, keys):
    """A break-it review: a tree of three leaves signed with leaf_count 100 was accepted ("of 100 users")."""
    assert proof["snapshot"]["leaf_count"] == 3  # Ann's path has 1 or 2 steps, by where her random leaf id falls
    for claimed in (100, 8, 1):
        assert "leaf's path" in refusal(verifier, resigned(proof, leaf_count=claimed), keys), claimed
    assert "is not an integer" in refusal(verifier, resigned(proof, leaf_count="3"), keys)
    assert "is not an integer" in refusal(verifier, resigned(proof, leaf_count=0), keys)


@pytest.mark.parametrize(
    "field, value, reason",
    [
        ("taken_at", "2026-12-04T23:46:54Z", "with microseconds and a Z"),
        ("taken_at", "2026-12-04T23:46:54.394414+00:00", "with microseconds and a Z"),
        ("taken_at", "2026-13-04T23:46:54.394414Z", "is not a real time"),
        ("snapshot_id", "7", "is not an integer"),
        ("snapshot_id", True, "is not an integer"),
        ("block_height", -1, "is not an integer of at least 0"),
        ("block_height", 1.0, "is not an integer"),
        ("block_hash", "AB" * 32, "64 lower-case hex"),
        ("block_hash", "ab" * 16, "64 lower-case hex"),
        ("version", True, "not one this verifier knows"),
    ],
)
def test_a_snapshot_field_not_as_proofs_md_writes_it_is_refused(verifier, proof, keys, field, value, reason):
    assert reason in refusal(verifier, resigned(proof, **{field: value}), keys)


def test_unknown_or_missing_fields_are_refused(verifier, proof, keys):
    assert "unknown ['note']" in refusal(verifier, resigned(proof, note="x"), keys)
    trimmed = copy.deepcopy(proof)
    del trimmed["snapshot"]["block_hash"]
    assert "missing ['block_hash']" in refusal(verifier, resign(trimmed), keys)
    extra = copy.deepcopy(proof)
    extra["balances_shown"] = ["9.00000000", "0.000000"]
    assert "unknown ['balances_shown']" in refusal(verifier, extra, keys)


def test_a_leaf_of_nothing_is_refused(verifier, proof, keys):
    """Users with nothing are left out: a zero leaf can only pad the tree."""
    empty = copy.deepcopy(proof)
    empty["balances"] = ["0.00000000", "0.000000"]
    assert "every balance of the leaf is zero" in refusal(verifier, forge(empty, path_units(empty)), keys)


def test_the_builder_refuses_two_leaves_for_one_user():
    with pytest.raises(TreeError, match="user 7 has two leaves"):
        leaves_ordered([Leaf(7, b"\x01" * 32, (1,)), Leaf(7, b"\x02" * 32, (0,))])


def test_the_database_refuses_two_leaves_for_one_user(snapshot, funded):
    from django.db import IntegrityError, transaction

    from apps.proofs.models import LiabilityLeaf

    with pytest.raises(IntegrityError), transaction.atomic():
        LiabilityLeaf.objects.create(snapshot=snapshot, user=funded[0], position=99, nonce=b"\x00" * 32)


def test_malformed_input_is_refused_never_a_traceback(verifier, proof, keys, tmp_path, capsys):
    import json

    good_keys = tmp_path / "keys.json"
    good_keys.write_text(json.dumps(keys))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert verifier.main([str(deep), "--keys", str(good_keys)]) == 1
    assert capsys.readouterr().out.startswith("REFUSED: cannot read the proof or the keys: maximum recursion depth")

    for malformed in ([], {"keys": "x"}, {"keys": [{"key_id": [1], "public_key": "ab" * 32}]}, {"keys": [7]}):
        assert "published key" in refusal(verifier, proof, malformed) or "are not" in refusal(
            verifier, proof, malformed
        )
    assert "not among the exchange's published keys" in refusal(verifier, {**proof, "key_id": [1]}, keys)
    huge = copy.deepcopy(proof)
    huge["balances"][0] = "9" * 5000 + ".00000000"  # int() of it would raise ValueError (4,300 digits at most)
    assert "below 2**128" in refusal(verifier, huge, keys)


def test_a_published_key_whose_key_id_is_not_its_own_is_refused(verifier, proof, keys):
    """PROOFS.md: a verifier recomputes each ``key_id`` from its public key and refuses a mismatch (found by a break-it
    review: the tool took any ``key_id`` the keys document paired with a real key)."""
    real = keys["keys"][0]
    renamed = {"keys": [{**real, "key_id": "deadbeefdeadbeef"}]}

    assert "is not the key_id of its public key" in refusal(verifier, {**proof, "key_id": "deadbeefdeadbeef"}, renamed)
    assert verifier.key_id_of(real["public_key"]) == real["key_id"]


def test_a_key_published_twice_is_refused(verifier, proof, keys, tmp_path, capsys):
    import json

    assert "published twice" in refusal(verifier, proof, {"keys": keys["keys"] * 2})
    repeated = tmp_path / "keys.json"  # a keys document naming a field twice: read as strictly as a proof
    real = keys["keys"][0]
    twice = f'"key_id": "{"0" * 16}", "key_id": "{real["key_id"]}", "public_key": "{real["public_key"]}"'
    repeated.write_text('{"keys": [{' + twice + "}]}")
    saved = tmp_path / "proof.json"
    saved.write_text(json.dumps(proof))

    assert verifier.main([str(saved), "--keys", str(repeated)]) == 1
    assert "names a key twice" in capsys.readouterr().out


def test_output_piped_to_a_reader_that_stopped_ends_without_a_traceback(verifier, tmp_path):
    """``verify_liabilities.py ... | head`` printed a ``BrokenPipeError`` traceback (break-it review)."""
    import subprocess
    import sys

    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": []}')
    run = subprocess.Popen(
        [sys.executable, verifier.__file__, str(keys), "--keys", str(keys)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    run.stdout.close()  # the reader stops before the verifier writes its verdict
    errors = run.stderr.read().decode()

    assert run.wait() == 1
    assert errors == ""  # no traceback, nothing else


@pytest.mark.parametrize(
    "public_key",
    [
        "01" + "00" * 31,  # the identity
        "ec" + "ff" * 30 + "7f",  # order 2
        "00" * 32,  # order 4
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
        "ed" + "ff" * 30 + "7f",  # y = p: not canonical
    ],
)
def test_a_published_key_of_small_order_is_refused(verifier, proof, keys, public_key):
    """Found by a break-it review: with the identity point listed as a key (its key_id right), the signature
    ``01 00...00`` verified for any snapshot, so anyone could forge a proof without a private key."""
    forged_keys = {"keys": [{"key_id": verifier.key_id_of(public_key), "public_key": public_key}]}
    forged = {**proof, "key_id": verifier.key_id_of(public_key), "signature": "01" + "00" * 63}

    assert "is not a usable Ed25519 public key" in refusal(verifier, forged, forged_keys)
    assert verifier.verify(proof, keys)  # the exchange's own key is one


def test_a_keys_url_with_a_broken_answer_is_refused_without_a_traceback(verifier, proof, tmp_path, capsys):
    import json
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer_short():  # promises 100 bytes, sends 2, hangs up
        connection, _ = server.accept()
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}")
        connection.close()

    threading.Thread(target=answer_short, daemon=True).start()
    saved = tmp_path / "proof.json"
    saved.write_text(json.dumps(proof))

    assert verifier.main([str(saved), "--keys", f"http://127.0.0.1:{server.getsockname()[1]}/keys"]) == 1
    assert capsys.readouterr().out.startswith("REFUSED: cannot read the proof or the keys: IncompleteRead")
    server.close()
