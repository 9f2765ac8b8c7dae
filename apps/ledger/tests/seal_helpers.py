"""Helpers of the sealed-journal tests: run the management commands, tamper as a superuser, rewrite the chain."""

import json
from io import StringIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from apps.ledger.merkle import tree_hash
from apps.ledger.models import BlockEntry, JournalBlock, Posting, SigningKey
from apps.ledger.seal.documents import GENESIS_PREVIOUS_HASH, block_hash, entry_digest, entry_documents
from apps.ledger.signing import key_id_for, public_key_hex, sign


def run_command(name: str, *args: str) -> tuple[int, str]:
    """``(exit code, stdout)`` of ``manage.py name args``."""
    out = StringIO()
    try:
        call_command(name, *args, stdout=out)
    except SystemExit as exit_:
        code = exit_.code  # an int from Django's CommandError; None is a clean exit
        return (code if isinstance(code, int) else 0 if code is None else 1), out.getvalue()
    return 0, out.getvalue()


def verify_json(*args: str) -> tuple[int, dict]:
    code, out = run_command("journal_verify", "--json", *args)
    return code, json.loads(out)


def as_superuser_without_triggers(*statements: tuple[str, list]) -> None:
    """Run raw SQL with every trigger of the journal's tables off (what someone with database rights can
    do), then turn them back on, so only the rows are changed. The test's transaction undoes it all."""
    tables = ["ledger_journalentry", "ledger_posting", "ledger_blockentry", "ledger_journalblock"]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run pending checks so the tables can be altered
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
        for sql, params in statements:
            cursor.execute(sql, params)
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER ALL")


def entry_amounts_shifted(entry_id: int) -> None:
    """Move one unit from the entry's second posting to its first (the entry still balances), past the triggers:
    what someone with database rights does to an entry's amounts. The test's transaction undoes it."""
    first, second = Posting.objects.filter(entry_id=entry_id).order_by("id").values_list("id", flat=True)[:2]
    as_superuser_without_triggers(
        ("UPDATE ledger_posting SET amount = amount + 1 WHERE id = %s", [first]),
        ("UPDATE ledger_posting SET amount = amount - 1 WHERE id = %s", [second]),
    )


def chain_rewrite(private_key: Ed25519PrivateKey) -> str:
    """Recompute every block from the rows as they are now (entry digests, entries roots, chain links, block
    hashes) and sign each with ``private_key``, registering its public key in the key table first: what someone
    with database rights does after changing history. Returns the key's ``key_id``."""
    public_key = public_key_hex(private_key)
    key_id = key_id_for(public_key)
    SigningKey.objects.get_or_create(key_id=key_id, defaults={"public_key": public_key, "created_at": timezone.now()})
    statements: list[tuple[str, list]] = []
    previous_hash = GENESIS_PREVIOUS_HASH
    for block in JournalBlock.objects.order_by("height"):
        members = list(BlockEntry.objects.filter(block=block).order_by("position"))
        documents = entry_documents([member.entry_id for member in members])
        digests = [entry_digest(documents[member.entry_id]) for member in members]
        statements += [
            ("UPDATE ledger_blockentry SET digest = %s WHERE entry_id = %s", [digest.hex(), member.entry_id])
            for member, digest in zip(members, digests, strict=True)
        ]
        block.previous_hash, block.entries_root = previous_hash, tree_hash(digests).hex()
        digest = block_hash(block)
        previous_hash = digest.hex()
        statements.append(
            (
                "UPDATE ledger_journalblock SET previous_hash = %s, entries_root = %s, block_hash = %s, "
                "signature = %s, key_id = %s WHERE height = %s",
                [
                    block.previous_hash,
                    block.entries_root,
                    previous_hash,
                    sign(private_key, digest),
                    key_id,
                    block.height,
                ],
            )
        )
    as_superuser_without_triggers(*statements)
    return key_id
