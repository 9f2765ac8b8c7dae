"""The standalone verifier (``tools/verify_liabilities.py``) on journal entries' proofs (PROOFS.md section 1):
the real proofs verify, and every forgery is refused, even one the exchange signs with its own key."""

import copy
import hashlib

import pytest

from apps.ledger.canonical import canon
from apps.ledger.models import Posting
from apps.ledger.seal.services import journal_seal
from apps.ledger.tests.factories import fund

from .forgery import resign


@pytest.fixture
def keys(api):
    return api.get("/api/v1/proofs/keys/").json()


@pytest.fixture
def proofs(funded, btc, api_as):
    """Ann's entry proofs: her two funding entries and two more, sealed in blocks of several entries."""
    ann = funded[0]
    fund(ann, btc, "0.1")
    fund(ann, btc, "0.2")
    journal_seal()
    client = api_as(ann)
    entry_ids = sorted(set(Posting.objects.filter(account__owner=ann).values_list("entry_id", flat=True)))
    return [client.get(f"/api/v1/ledger/entries/{entry_id}/proof/").json() for entry_id in entry_ids]


def refusal(verifier, proof, keys) -> str:
    with pytest.raises(verifier.Refused) as refused:
        verifier.verify_entry(proof, keys)
    return str(refused.value)


def one_entry_block(proof: dict) -> dict:
    """``proof`` with its entry alone in a block the exchange signs (a dishonest prover's own tree)."""
    forged = copy.deepcopy(proof)
    digest = hashlib.sha256(canon(forged["entry"])).digest()
    forged["block"]["entries_root"] = hashlib.sha256(b"\x00" + digest).hexdigest()
    forged["block"]["entry_count"] = forged["tree_size"] = 1
    forged["leaf_index"], forged["audit_path"] = 0, []
    return resign(forged, document="block")


def test_every_real_entry_proof_verifies(verifier, proofs, keys):
    assert len(proofs) == 4 and any(proof["tree_size"] > 2 for proof in proofs)
    for proof in proofs:
        assert verifier.verify_entry(proof, keys) == proof["entry"]
        assert verifier.verify_entry(one_entry_block(proof), keys) == proof["entry"]  # the forging helper is sound


def test_an_altered_entry_or_path_is_refused(verifier, proofs, keys):
    proof = max(proofs, key=lambda p: p["tree_size"])
    changed = copy.deepcopy(proof)
    changed["entry"]["idempotency_key"] += "-again"
    assert "does not lead to the block's entries_root" in refusal(verifier, changed, keys)
    moved = copy.deepcopy(proof)
    moved["leaf_index"] = (proof["leaf_index"] + 1) % proof["tree_size"]
    assert "entries_root" in refusal(verifier, moved, keys) or "audit path" in refusal(verifier, moved, keys)
    for path in (proof["audit_path"][:-1], [*proof["audit_path"], "00" * 32]):
        assert "audit path is" in refusal(verifier, {**proof, "audit_path": path}, keys)
    assert "outside a tree" in refusal(verifier, {**proof, "leaf_index": proof["tree_size"]}, keys)
    assert "is not the block's entry_count" in refusal(verifier, {**proof, "tree_size": proof["tree_size"] + 1}, keys)
    header = copy.deepcopy(proof)
    header["block"]["sealed_at"] = header["block"]["sealed_at"].replace(".", ".9", 1)[:-2] + "Z"
    assert "the block was altered" in refusal(verifier, header, keys)
    assert "not among the exchange's published keys" in refusal(verifier, {**proof, "key_id": "elsewhere"}, keys)


def test_an_entry_that_creates_money_is_refused_though_signed(verifier, proofs, keys):
    forged = copy.deepcopy(proofs[0])
    posting = forged["entry"]["postings"][0]
    whole, _, fraction = posting["amount"].lstrip("-").partition(".")
    posting["amount"] = ("-" if posting["amount"].startswith("-") else "") + str(int(whole) + 1) + "." + fraction
    assert "do not sum to zero in" in refusal(verifier, one_entry_block(forged), keys)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda e: e["postings"].reverse(), "not in posting id order"),
        (lambda e: e["postings"].pop(), "two or more postings"),
        (lambda e: e["postings"][0].update(amount="0.00000000"), "moves nothing"),
        (lambda e: e["postings"][0].update(balance_after="-0.00000000"), "plain notation"),
        (lambda e: e["postings"][0].update(amount="1E-8"), "plain notation"),
        (lambda e: e["postings"][0].update(balance_after=e["postings"][0]["balance_after"] + "0"), "same number"),
        (lambda e: e["postings"][0].update(id=str(e["postings"][0]["id"])), "is not an integer"),
        (lambda e: e["postings"][0].update(memo="x"), "unknown ['memo']"),
        (lambda e: e.update(created_at=e["created_at"].replace("Z", "+00:00")), "with microseconds and a Z"),
        (lambda e: e.update(version=2), "not one this verifier knows"),
        (lambda e: e.update(reference_id=7), "is not a string"),
    ],
)
def test_an_entry_not_as_proofs_md_writes_it_is_refused_though_signed(verifier, proofs, keys, change, reason):
    forged = copy.deepcopy(proofs[0])
    change(forged["entry"])
    assert reason in refusal(verifier, one_entry_block(forged), keys)


def test_the_program_reports_an_entry_proof(verifier, proofs, keys, tmp_path, capsys):
    import json

    proof = proofs[-1]
    (tmp_path / "entry.json").write_text(json.dumps(proof))
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    arguments = [str(tmp_path / "entry.json"), "--keys", str(tmp_path / "keys.json")]

    assert verifier.main(arguments) == 0
    shown = capsys.readouterr().out
    block = proof["block"]["height"]
    assert shown.startswith(f"OK: entry {proof['entry']['id']} ({proof['entry']['idempotency_key']}) is entry ")
    assert f"Keep the block hash {proof['block_hash']}: GET /api/v1/proofs/journal/blocks/{block}/" in shown
    refusal = "REFUSED: --expect and --user-id check a proof of liabilities; this is a journal entry's proof\n"
    assert verifier.main([*arguments, "--expect", "BTC=1"]) == 1
    assert capsys.readouterr().out == refusal
    assert verifier.main([*arguments, "--user-id", "7"]) == 1
    assert capsys.readouterr().out == refusal


def test_the_audit_path_fold_agrees_with_the_sealer_for_every_leaf_of_trees_up_to_33(verifier):
    """RFC 9162's fold in the standalone verifier, against the sealer's own tree (apps.ledger.merkle), every place."""
    from apps.ledger.merkle import audit_path, tree_hash

    for size in range(1, 34):
        digests = [hashlib.sha256(bytes([size, n])).digest() for n in range(size)]
        root = tree_hash(digests)
        for index in range(size):
            path = audit_path(digests, index)
            assert verifier.root_from_audit_path(digests[index], index, size, path) == root, (size, index)
            if path:
                with pytest.raises(verifier.Refused):
                    verifier.root_from_audit_path(digests[index], index, size, path[:-1])


def test_an_entry_off_by_one_unit_in_its_18th_decimal_is_refused(verifier, proofs, keys):
    """A break-it review: amounts summed as 28-digit Decimals made 1e-18 vanish beside 10^10 (an entry creating one
    wei verified)."""
    forged = copy.deepcopy(proofs[0])
    first, second = forged["entry"]["postings"][:2]
    first.update(amount="10000000000.000000000000000001", balance_after="10000000000.000000000000000001")
    second.update(amount="-10000000000.000000000000000000", balance_after="10000000000.000000000000000000")
    del forged["entry"]["postings"][2:]
    assert first["asset"] == second["asset"]
    assert "do not sum to zero" in refusal(verifier, one_entry_block(forged), keys)
    second["amount"] = "-10000000000.000000000000000001"
    assert verifier.verify_entry(one_entry_block(forged), keys) == forged["entry"]


def test_a_first_block_naming_a_previous_one_is_refused(verifier, proofs, keys):
    forged = one_entry_block(proofs[0])
    forged["block"].update(height=0, previous_hash="11" * 32)
    assert "previous_hash must be 64 zeros" in refusal(verifier, resign(forged, document="block"), keys)
    forged["block"]["previous_hash"] = "0" * 64
    assert verifier.verify_entry(resign(forged, document="block"), keys) == forged["entry"]


def test_text_utf_8_cannot_hold_or_an_amount_of_a_million_digits_is_refused(verifier, proofs, keys):
    surrogate = copy.deepcopy(proofs[0])
    surrogate["entry"]["reason"] = "\ud800"
    assert "not valid Unicode" in refusal(verifier, surrogate, keys)
    huge = copy.deepcopy(proofs[0])
    huge["entry"]["postings"][0]["amount"] = "1" * 1_000_000
    assert "is not an amount in plain notation" in refusal(verifier, huge, keys)
