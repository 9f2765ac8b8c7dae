"""The sealed journal: blocks, chain, signatures, the proof endpoints, and tampering caught by
``journal_verify`` and ``reconcile`` (invariant 9)."""

import hashlib
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError
from django.db import connection
from django.utils import timezone

from apps.ledger.canonical import canon
from apps.ledger.errors import SealRefused
from apps.ledger.merkle import root_from_audit_path, tree_hash
from apps.ledger.models import DEBIT_NORMAL_KINDS, BlockEntry, EntryReason, JournalBlock, Posting, SigningKey
from apps.ledger.reconciliation import reconcile
from apps.ledger.seal.documents import block_hash, entry_documents
from apps.ledger.seal.services import journal_seal
from apps.ledger.seal.verification import NOT_PINNED
from apps.ledger.signing import (
    key_id_for,
    private_key_generate_hex,
    private_key_load,
    public_key_hex,
    sign,
    signature_valid,
)
from apps.ledger.tests.factories import UserFactory, fund
from apps.ledger.tests.seal_helpers import (
    as_superuser_without_triggers,
    chain_rewrite,
    entry_amounts_shifted,
    run_command,
    verify_json,
)


def _verify_proof(proof: dict, keys: dict) -> bool:
    """What an outside verifier of PROOFS.md section 1 does with an entry's proof."""
    digest = hashlib.sha256(canon(proof["entry"])).digest()
    path = [bytes.fromhex(h) for h in proof["audit_path"]]
    root = root_from_audit_path(digest, proof["leaf_index"], proof["tree_size"], path)
    block_hash = hashlib.sha256(canon(proof["block"])).digest()
    public_key = {key["key_id"]: key["public_key"] for key in keys["keys"]}[proof["key_id"]]
    return (
        root is not None
        and root.hex() == proof["block"]["entries_root"]
        and block_hash.hex() == proof["block_hash"]
        and signature_valid(public_key, block_hash, proof["signature"])
    )


def test_sealing_puts_every_entry_in_one_signed_block_in_id_order(db, usdt, user):
    fund(user, usdt, "100")
    fund(user, usdt, "0.5")

    blocks = journal_seal()

    assert [b.height for b in blocks] == [0]
    block = blocks[0]
    members = list(BlockEntry.objects.filter(block=block).order_by("position"))
    assert [m.entry_id for m in members] == sorted(m.entry_id for m in members)
    assert block.entry_count == 2 and block.previous_hash == "0" * 64
    assert block.entries_root == tree_hash([bytes.fromhex(m.digest) for m in members]).hex()
    header = {
        "version": 1,
        "height": 0,
        "previous_hash": "0" * 64,
        "entries_root": block.entries_root,
        "entry_count": 2,
        "sealed_at": block.sealed_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    assert block.block_hash == hashlib.sha256(canon(header)).hexdigest()
    assert signature_valid(block.key.public_key, bytes.fromhex(block.block_hash), block.signature)
    assert journal_seal() == []  # nothing left: no empty block


def test_the_entry_digest_is_the_hash_of_the_documented_entry(db, usdt, user):
    fund(user, usdt, "100")
    journal_seal()
    member = BlockEntry.objects.get()
    entry = member.entry
    postings = list(Posting.objects.filter(entry=entry).order_by("id"))
    document = {
        "version": 1,
        "id": entry.id,
        "idempotency_key": entry.idempotency_key,
        "reason": EntryReason.ADJUSTMENT,
        "reference_type": "adjustment",  # fund() posts an approved adjustment
        "reference_id": entry.reference_id,
        "created_at": entry.created_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "postings": [
            {"id": postings[0].id, "account_id": postings[0].account_id, "asset": "USDT",
             "amount": "100.000000", "balance_after": "-100.000000"},
            {"id": postings[1].id, "account_id": postings[1].account_id, "asset": "USDT",
             "amount": "-100.000000", "balance_after": "100.000000"},
        ],
    }  # fmt: skip
    assert member.digest == hashlib.sha256(canon(document)).hexdigest()


def test_blocks_chain_to_each_other_and_verify(db, usdt, user):
    fund(user, usdt, "1")
    first = journal_seal()[0]
    fund(user, usdt, "2")
    second = journal_seal()[0]

    assert second.height == 1 and second.previous_hash == first.block_hash
    code, result = verify_json()
    assert code == 0
    assert result == {  # the fields of the first version, unchanged, and what was added after
        "ok": True,
        "blocks": 2,
        "entries": 2,
        "head_height": 1,
        "discrepancy": None,
        "pinned_keys": [first.key_id],
        "key_problems": [],
        "references": 0,
        "reference_problems": [],
        "head_problem": None,
        "head_witness": "off",  # the test settings' (the witness has its own tests)
    }
    assert verify_json("--from-height", "1")[1]["blocks"] == 1
    assert run_command("journal_verify")[1].startswith("ok: 2 blocks, 2 entries, head 1")


def test_verifying_from_past_the_head_is_a_usage_error_not_a_missing_block(db, usdt, user):
    """Break-it review: with the head at 1, ``--from-height 2`` said "ok: 0 blocks ... head None" and
    ``--from-height 3`` "FAIL block 2: block 2 is missing", on an intact chain."""
    with pytest.raises(CommandError, match="nothing is sealed yet") as empty:
        run_command("journal_verify", "--from-height", "1")
    fund(user, usdt, "1")
    journal_seal()
    fund(user, usdt, "2")
    journal_seal()
    refusals = []
    for height in ("2", "3", "99999999"):
        with pytest.raises(CommandError) as refused:
            run_command("journal_verify", "--from-height", height)
        refusals.append((refused.value.returncode, str(refused.value)))

    with pytest.raises(CommandError, match="--from-height must be 0 or more") as negative:
        run_command("journal_verify", "--from-height", "-1")

    assert empty.value.returncode == 2
    assert negative.value.returncode == 2  # break-it review: it exited 1, "a block does not verify"
    assert refusals == [
        (2, f"No block at height {height}: the chain's head is block 1.") for height in ("2", "3", "99999999")
    ]
    assert verify_json("--from-height", "1")[0] == 0


def test_a_block_holds_at_most_the_batch_and_the_rest_follows(db, usdt, user, settings):
    settings.LEDGER_SEAL_BATCH = 2
    for amount in ("1", "2", "3"):
        fund(user, usdt, amount)

    assert [b.entry_count for b in journal_seal()] == [2, 1]


def test_old_blocks_stay_verifiable_after_a_key_rotation_when_the_old_key_is_listed(db, usdt, user, settings, api):
    fund(user, usdt, "1")
    old = journal_seal()[0]
    settings.LEDGER_SIGNING_KEY = private_key_generate_hex()
    settings.LEDGER_TRUSTED_PUBLIC_KEYS = [old.key.public_key.upper()]  # hex in either case
    fund(user, usdt, "2")
    new = journal_seal()[0]

    keys = api.get("/api/v1/proofs/keys/").json()["keys"]
    assert old.key_id != new.key_id
    assert {k["key_id"] for k in keys} == {old.key_id, new.key_id}
    assert verify_json()[0] == 0


def test_a_rotated_out_key_that_is_not_listed_fails_verification_and_is_not_published(db, usdt, user, settings, api):
    fund(user, usdt, "1")
    old = journal_seal()[0]
    settings.LEDGER_SIGNING_KEY = private_key_generate_hex()
    fund(user, usdt, "2")

    # The new key does not sign on top of a block it cannot verify (the old key must be listed first) ...
    with pytest.raises(SealRefused, match=f"Refusing to seal on block 0: the block is signed by key {old.key_id}"):
        journal_seal()
    settings.LEDGER_TRUSTED_PUBLIC_KEYS = [old.key.public_key]
    new = journal_seal()[0]
    settings.LEDGER_TRUSTED_PUBLIC_KEYS = []  # ... and un-listing it afterwards fails verification

    code, result = verify_json()

    assert code == 1
    assert result["discrepancy"]["height"] == 0
    assert result["discrepancy"]["problem"].startswith(f"the block is signed by key {old.key_id}, which is not pinned")
    assert result["key_problems"] == [
        {"key_id": old.key_id, "public_key": old.key.public_key, "problem": f"public key {NOT_PINNED}"}
    ]
    assert [k["key_id"] for k in api.get("/api/v1/proofs/keys/").json()["keys"]] == [new.key_id]


def test_a_verifier_without_the_private_key_pins_the_public_keys(db, usdt, user, settings):
    fund(user, usdt, "1")
    block = journal_seal()[0]
    settings.LEDGER_SIGNING_KEY = ""
    settings.LEDGER_TRUSTED_PUBLIC_KEYS = [block.key.public_key]

    assert verify_json()[0] == 0
    settings.LEDGER_TRUSTED_PUBLIC_KEYS = []
    assert verify_json()[0] == 1
    settings.LEDGER_TRUSTED_PUBLIC_KEYS = ["not-a-key"]
    with pytest.raises(
        CommandError, match="LEDGER_TRUSTED_PUBLIC_KEYS: 'not-a-key' is not an Ed25519 public key"
    ) as misconfigured:
        run_command("journal_verify")
    assert misconfigured.value.returncode == 2  # a usage error, not "a block does not verify" (1)


def test_a_chain_re_signed_with_a_key_added_to_the_database_fails_verification(db, usdt, user, api):
    blocks = _sealed_ledger(usdt, user)
    victim = BlockEntry.objects.get(block_id=0, position=1).entry_id
    entry_amounts_shifted(victim)
    forger = private_key_load(private_key_generate_hex())
    forged_key_id = chain_rewrite(forger)

    code, result = verify_json()

    assert code == 1 and not result["ok"]
    assert result["discrepancy"] == {
        "height": 0,
        "entry": None,
        "problem": f"the block is signed by key {forged_key_id}, which is {NOT_PINNED}",
    }
    assert result["pinned_keys"] == [blocks[0].key_id]
    assert result["key_problems"] == [
        {"key_id": forged_key_id, "public_key": public_key_hex(forger), "problem": f"public key {NOT_PINNED}"}
    ]
    assert run_command("journal_verify")[1].splitlines() == [
        f"FAIL block 0: the block is signed by key {forged_key_id}, which is {NOT_PINNED}",
        f"FAIL key {forged_key_id} ({public_key_hex(forger)}): public key {NOT_PINNED}",
    ]
    assert [row["problem"] for row in _journal_sealed_details()] == [
        result["discrepancy"]["problem"],
        f"public key {NOT_PINNED}",
    ]
    assert [k["key_id"] for k in api.get("/api/v1/proofs/keys/").json()["keys"]] == [blocks[0].key_id]


def test_the_sealer_does_not_build_on_a_block_forged_into_the_database(db, usdt, user):
    """Found by a break-it review: a block signed by a key someone added to the database was detected by
    journal_verify, but the sealer went on signing blocks on top of it, the real key vouching for the forgery."""
    blocks = _sealed_ledger(usdt, user)
    forger = private_key_load(private_key_generate_hex())
    key = SigningKey.objects.create(
        key_id=key_id_for(public_key_hex(forger)), public_key=public_key_hex(forger), created_at=timezone.now()
    )
    forged = JournalBlock(
        height=2,
        previous_hash=blocks[-1].block_hash,
        entries_root=tree_hash([]).hex(),
        entry_count=0,
        sealed_at=timezone.now(),
        key=key,
    )
    forged.block_hash = block_hash(forged).hex()
    forged.signature = sign(forger, block_hash(forged))
    forged.save(force_insert=True)
    fund(user, usdt, "40")

    with pytest.raises(SealRefused, match=f"Refusing to seal on block 2: the block is signed by key {key.key_id}"):
        journal_seal()
    assert JournalBlock.objects.order_by("-height").first().height == 2


def test_a_key_row_added_to_the_database_fails_verification_even_unused(db, usdt, user):
    _sealed_ledger(usdt, user)
    intruder = public_key_hex(private_key_load(private_key_generate_hex()))
    SigningKey.objects.create(key_id=key_id_for(intruder), public_key=intruder, created_at=timezone.now())
    SigningKey.objects.create(key_id="0123456789abcdef", public_key="ab" * 32, created_at=timezone.now())

    code, result = verify_json()

    assert code == 1 and result["discrepancy"] is None
    assert result["key_problems"] == [
        {"key_id": key_id_for(intruder), "public_key": intruder, "problem": f"public key {NOT_PINNED}"},
        {
            "key_id": "0123456789abcdef",
            "public_key": "ab" * 32,
            "problem": "key_id is not the first 16 hex characters of SHA256(public key)",
        },
    ]


# Tampering ---------------------------------------------------------------------------------------


def _sealed_ledger(usdt, user) -> list[JournalBlock]:
    fund(user, usdt, "10")
    fund(user, usdt, "20")
    blocks = journal_seal()
    fund(user, usdt, "30")
    return blocks + journal_seal()


def _journal_sealed_details() -> list[dict]:
    check = next(c for c in reconcile().checks if c.name == "journal_sealed")
    assert not check.ok
    return check.details


def test_a_changed_posting_amount_is_caught_and_named(db, usdt, user):
    _sealed_ledger(usdt, user)
    victim = BlockEntry.objects.get(block_id=0, position=1).entry_id
    entry_amounts_shifted(victim)

    code, result = verify_json()

    assert code == 1
    assert result["discrepancy"] == {
        "height": 0,
        "entry": victim,
        "problem": f"entry {victim} differs from the digest it was sealed with",
    }
    assert run_command("journal_verify")[1].startswith(f"FAIL block 0, entry {victim}:")
    assert _journal_sealed_details() == [{"block": 0, "entry": victim, "problem": result["discrepancy"]["problem"]}]


def test_a_change_below_the_assets_smallest_unit_is_caught_and_named(db, usdt, user):
    """Found by a break-it review: the entry document rounded each amount to the asset's decimals, so 0.0000004
    USDT moved between two postings of a sealed entry (balances after and the accounts' balances kept in step)
    left its digest as sealed, and journal_verify, reconcile and both verifiers passed."""
    _sealed_ledger(usdt, user)
    victim = BlockEntry.objects.get(block_id=0, position=1).entry_id
    postings = list(Posting.objects.filter(entry_id=victim).order_by("id"))
    shift = Decimal("0.0000004")
    as_superuser_without_triggers(
        *[
            (
                "UPDATE ledger_posting SET amount = amount + %s, balance_after = balance_after + %s WHERE id = %s",
                [delta, delta if posting.account.kind in DEBIT_NORMAL_KINDS else -delta, posting.id],
            )
            for posting, delta in zip(postings, [shift, -shift], strict=False)
        ]
    )

    code, result = verify_json()

    assert code == 1
    assert result["discrepancy"]["entry"] == victim
    assert entry_documents([victim])[victim]["postings"][0]["amount"].endswith("0000004")
    details = next(c for c in reconcile().checks if c.name == "postings_referenced").details
    assert [(row["posting"], row["problem"]) for row in details] == [
        (posting.id, "finer than the asset's precision") for posting in postings[:2]
    ]


def test_a_deleted_entry_is_caught_and_named(db, usdt, user):
    _sealed_ledger(usdt, user)
    victim = BlockEntry.objects.get(block_id=1, position=0).entry_id
    as_superuser_without_triggers(
        ("DELETE FROM ledger_posting WHERE entry_id = %s", [victim]),
        ("DELETE FROM ledger_journalentry WHERE id = %s", [victim]),
    )

    code, result = verify_json()

    assert code == 1
    assert result["discrepancy"] == {"height": 1, "entry": victim, "problem": f"entry {victim} is missing"}
    assert _journal_sealed_details()[-1]["entry"] == victim


def test_an_entry_inserted_into_an_old_block_is_caught_and_named(db, usdt, user):
    _sealed_ledger(usdt, user)
    fund(user, usdt, "40")  # a real, balanced entry, then slipped into block 0 with its true digest
    from apps.ledger.seal.documents import entry_digest, entry_documents

    intruder = Posting.objects.order_by("-id").first().entry_id
    digest = entry_digest(entry_documents([intruder])[intruder]).hex()
    as_superuser_without_triggers(
        (
            "INSERT INTO ledger_blockentry (block_id, entry_id, position, digest) VALUES (0, %s, 2, %s)",
            [intruder, digest],
        ),
    )

    code, result = verify_json()

    assert code == 1
    assert result["discrepancy"] == {
        "height": 0,
        "entry": intruder,
        "problem": f"entry {intruder} sits at position 2 of a block sealed with 2 entries",
    }
    assert _journal_sealed_details()[-1]["entry"] == intruder


def test_a_rewritten_block_header_is_caught(db, usdt, user):
    _sealed_ledger(usdt, user)
    as_superuser_without_triggers(("UPDATE ledger_journalblock SET entry_count = 3 WHERE height = 0", []))

    assert verify_json()[1]["discrepancy"] == {
        "height": 0,
        "entry": None,
        "problem": "the block holds 2 entries, its header says 3",
    }


def test_an_entry_left_unsealed_past_the_grace_period_fails_reconcile(db, usdt, user, settings):
    fund(user, usdt, "1")
    assert next(c for c in reconcile().checks if c.name == "journal_sealed").ok  # just posted: not late yet
    settings.LEDGER_SEAL_GRACE = 0

    details = _journal_sealed_details()

    assert [row["problem"] for row in details] == ["not sealed"]
    journal_seal()
    assert next(c for c in reconcile().checks if c.name == "journal_sealed").ok


def test_blocks_and_membership_are_append_only(db, usdt, user):
    from django.db import DatabaseError, transaction

    _sealed_ledger(usdt, user)
    for sql in (
        "UPDATE ledger_journalblock SET entry_count = 9 WHERE height = 0",
        "DELETE FROM ledger_blockentry WHERE block_id = 0",
        "DELETE FROM ledger_journalblock WHERE height = 1",
    ):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    assert verify_json()[0] == 0


# Endpoints ---------------------------------------------------------------------------------------


def test_head_and_blocks_are_served_with_their_signature(db, usdt, user, api):
    fund(user, usdt, "1")
    block = journal_seal()[0]

    head = api.get("/api/v1/proofs/journal/head/")
    by_height = api.get("/api/v1/proofs/journal/blocks/0/")

    assert head.status_code == 200 and head.json() == by_height.json()
    assert head.json()["block_hash"] == block.block_hash
    assert head.json()["block"]["entries_root"] == block.entries_root
    assert head.json()["key_id"] == block.key_id
    assert api.get("/api/v1/proofs/journal/blocks/1/").status_code == 404
    assert api.get("/api/v1/proofs/journal/blocks/-1/").json()["error"]["code"] == "not_found"


def test_head_is_404_before_anything_is_sealed(db, api):
    assert api.get("/api/v1/proofs/journal/head/").status_code == 404


def test_an_entry_proof_verifies_for_its_owner_only_over_an_api_key(db, usdt, user, api, api_as, admin_user):
    other = UserFactory()
    fund(other, usdt, "5")
    fund(user, usdt, "1")
    fund(user, usdt, "2")
    journal_seal()
    entry_id = Posting.objects.filter(account__owner=user).order_by("-id").first().entry_id
    url = f"/api/v1/ledger/entries/{entry_id}/proof/"

    mine = api_as(user).get(url)
    keys = api.get("/api/v1/proofs/keys/").json()

    assert mine.status_code == 200
    proof = mine.json()
    assert proof["entry"]["id"] == entry_id and proof["tree_size"] == 3
    assert _verify_proof(proof, keys)
    forged = json.loads(json.dumps(proof))
    forged["entry"]["postings"][1]["amount"] = "-3.000000"
    assert not _verify_proof(forged, keys)
    assert api_as(other).get(url).status_code == 404
    assert api.get(url).status_code in (401, 403)
    api.force_authenticate(admin_user)  # staff without a session confirmed by the second factor (apps/proofs tests)
    assert api.get(url).status_code == 403  # told so, not "no such entry" (break-it review)


def test_an_unsealed_entry_has_no_proof_yet(db, usdt, user, api_as):
    fund(user, usdt, "1")
    entry_id = Posting.objects.filter(account__owner=user).get().entry_id

    response = api_as(user).get(f"/api/v1/ledger/entries/{entry_id}/proof/")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_state"


def test_a_proof_for_a_missing_entry_is_404(db, user, api_as):
    assert api_as(user).get("/api/v1/ledger/entries/99999999/proof/").status_code == 404
    assert api_as(user).get("/api/v1/ledger/entries/abc/proof/").status_code == 404


def test_journal_seal_command_reports_what_it_sealed(db, usdt, user):
    assert run_command("journal_seal") == (0, "nothing to seal\n")
    fund(user, usdt, Decimal("1"))
    code, out = run_command("journal_seal")
    assert code == 0 and out.startswith("sealed block 0: 1 entries, hash ")


def test_the_statement_names_each_posting_and_account_as_the_entry_proof_does(db, usdt, user, api_as):
    """Break-it review: the statement showed a posting from the customer's side (+1, ``available``) and the proof
    as the journal keeps it (-1 on a numeric account id), with nothing to match them by but ``balance_after``."""
    fund(user, usdt, "1.5")
    journal_seal()
    (row,) = api_as(user).get("/api/v1/ledger/entries/").json()

    proof = api_as(user).get(f"/api/v1/ledger/entries/{row['entry_id']}/proof/").json()

    (posting,) = [p for p in proof["entry"]["postings"] if p["id"] == row["posting_id"]]
    assert posting["account_id"] == row["account_id"]
    assert (posting["amount"], posting["balance_after"]) == ("-1.500000", row["balance_after"])
    assert row["amount"] == "1.500000"
