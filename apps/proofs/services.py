"""Taking a liabilities snapshot (PROOFS.md section 2): one consistent read, the tree, its rows, the signature."""

import secrets
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from apps.core.errors import InvalidState
from apps.ledger.amounts import format_amount
from apps.ledger.merkle import EMPTY_ROOT
from apps.ledger.models import Asset, JournalBlock
from apps.ledger.reconciliation import ROW_LIMIT, Scope
from apps.ledger.seal.keys import signing_key_active
from apps.ledger.selectors import customer_balances_not_matching_postings
from apps.ledger.signing import sign
from apps.wallets.checks import custody_view
from apps.wallets.custody.base import CustodyError

from .balances import custody_since_latest_block, user_balances_at_latest_block
from .documents import snapshot_hash, snapshot_header
from .models import LiabilitySnapshot
from .sumtree import Leaf, Level, format_units, leaf_level, leaves_ordered, levels

_COPY_LEAVES = "COPY proofs_liabilityleaf (snapshot_id, user_id, position, nonce) FROM STDIN"
_COPY_NODES = "COPY proofs_liabilitynode (snapshot_id, level, position, hash, sums) FROM STDIN"
# Rows per write to COPY: text lines built here (bytea as \\x hex), sent in chunks.
_COPY_CHUNK = 20000


def liabilities_snapshot_take() -> LiabilitySnapshot:
    """Build, store and sign a snapshot of every user's ``user_available + user_held`` per asset at the latest
    sealed block (see :mod:`apps.proofs.balances` for what "as of the block" means and how it is read).

    One transaction, ``REPEATABLE READ`` when it is the outermost: the read, the custody
    provider's holdings (reported for the solvency screen), the leaves (a fresh 32-byte nonce
    per user), every node of every level (PostgreSQL ``COPY``) and the signed header commit
    together or not at all. Users with nothing are left out.

    Before anything is built it checks, in the same read, that every customer account's stored balance
    is the sum of its postings (reconciliation's invariant 2): the leaves are read from the stored balances.

    Raises :class:`InvalidState` while no block is sealed or when a customer's stored balance differs from
    its postings (naming the accounts; nothing is written), :class:`~apps.proofs.sumtree.TreeError`
    (two leaves for one user, a sum of 2**128 or more) and
    :class:`~apps.proofs.balances.BalanceError` (a stored balance no leaf can hold).
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        block = JournalBlock.objects.order_by("-height").first()
        if block is None:
            raise InvalidState("Nothing is sealed yet: a snapshot is taken at a sealed block.")
        # The leaves come from the stored balances: refuse to sign any that their postings do not account for.
        _balances_match_postings()
        assets = list(Asset.objects.order_by("code"))
        taken_at = timezone.now()
        ordered = leaves_ordered(
            [
                Leaf(user_id, secrets.token_bytes(32), balances)
                for user_id, balances in user_balances_at_latest_block(assets)
            ]
        )
        custody, custody_in_flight, custody_error = _custody_holdings(assets)
        with connection.cursor() as cursor:
            cursor.execute("SELECT nextval(pg_get_serial_sequence('proofs_liabilitysnapshot', 'id'))")
            snapshot_id = cursor.fetchone()[0]
        leaf_count = len(ordered.leaves)
        _leaves_write(snapshot_id, ordered.leaves)
        root = _levels_write(snapshot_id, leaf_level(ordered))

        root_sums = root.sums[0] if root else (0,) * len(assets)
        header = snapshot_header(
            snapshot_id=snapshot_id,
            block_height=block.height,
            block_hash=block.block_hash,
            taken_at=taken_at,
            assets=[{"code": asset.code, "decimals": asset.decimals} for asset in assets],
            leaf_count=leaf_count,
            root_hash=(root.hashes[0] if root else EMPTY_ROOT).hex(),
            root_sums=[format_units(units, asset.decimals) for units, asset in zip(root_sums, assets, strict=True)],
        )
        digest = snapshot_hash(header)
        key = signing_key_active()
        return LiabilitySnapshot.objects.create(
            id=snapshot_id,
            block=block,
            block_hash=block.block_hash,
            taken_at=taken_at,
            assets=header["assets"],
            leaf_count=header["leaf_count"],
            root_hash=header["root_hash"],
            root_sums=header["root_sums"],
            snapshot_hash=digest.hex(),
            signature=sign(key.private_key, digest),
            key=key.row,
            custody_holdings=custody,
            custody_in_flight=custody_in_flight,
            custody_error=custody_error,
        )


_MISMATCHES_NAMED = 5
"""How many mismatched accounts a refused snapshot's message names."""


def _balances_match_postings() -> None:
    """Raise :class:`InvalidState` when a customer account's stored balance is not the sum of its postings, as
    seen by the snapshot's own read, naming the first :data:`_MISMATCHES_NAMED` of them (reconcile lists them
    all)."""
    mismatched = customer_balances_not_matching_postings()
    if mismatched:
        accounts = "; ".join(
            f"account {row['account']} (user {row['owner']}, {row['asset']} {row['kind']}): stored "
            f"{row['stored_balance']}, postings {row['postings_balance']}"
            for row in mismatched[:_MISMATCHES_NAMED]
        )
        more = len(mismatched) - _MISMATCHES_NAMED
        count = f"{len(mismatched)} or more" if len(mismatched) == ROW_LIMIT else str(len(mismatched))
        raise InvalidState(
            f"No snapshot taken: {count} customer account(s) have a stored balance that is not the sum "
            f"of their postings (run manage.py reconcile): {accounts}{f'; and {more} more' if more > 0 else ''}."
        )


def _custody_holdings(assets: list[Asset]) -> tuple[dict[str, str] | None, dict[str, str] | None, str]:
    """What the custody provider reports holding and what to add to it to stand at the latest block, as the
    liabilities do: invariant 5's in flight (in this read) less what the ledger's custody balance moved by since the
    block; each ``{code: amount}``, or ``None``, ``None`` and why not (break-it review: a withdrawal custody had sent
    but the ledger not yet completed showed as "liabilities exceed custody" on healthy books)."""
    try:
        view = custody_view(Scope(assets=tuple(assets), filtered=False))
    except CustodyError as exc:
        return None, None, str(exc)
    decimals = {asset.code: asset.decimals for asset in assets}
    holdings = {code: format_amount(amount, decimals.get(code, 18)) for code, amount in sorted(view.reported.items())}
    # The liabilities are the balances at the latest block, custody's report is of now (break-it review: a withdrawal
    # completed seconds before the snapshot, not sealed yet, was a shortfall): what the ledger's custody balance moved
    # by since the block is taken off, so that both sides stand at the block.
    moved = custody_since_latest_block()
    in_flight = {
        asset.code: format_amount(
            view.in_flight.get(asset.id, Decimal(0)) - moved.get(asset.id, Decimal(0)), asset.decimals
        )
        for asset in assets
    }
    return holdings, in_flight, ""


def _leaves_write(snapshot_id: int, ordered: list[Leaf]) -> None:
    """Store each leaf's position and nonce, in user id order (the primary key's, so the index grows at its end)."""
    by_user = sorted(range(len(ordered)), key=lambda position: ordered[position].user_id)
    with connection.connection.cursor() as cursor, cursor.copy(_COPY_LEAVES) as copy:
        for start in range(0, len(by_user), _COPY_CHUNK):
            copy.write(
                "".join(
                    f"{snapshot_id}\t{ordered[position].user_id}\t{position}\t\\\\x{ordered[position].nonce.hex()}\n"
                    for position in by_user[start : start + _COPY_CHUNK]
                )
            )


def _levels_write(snapshot_id: int, first: Level) -> Level | None:
    """Store every node of every level; return the root level (``None`` for an empty tree).

    Each level is written before the next is built, and let go once it is."""
    root = None
    with connection.connection.cursor() as cursor, cursor.copy(_COPY_NODES) as copy:
        for number, level in enumerate(levels(first)):
            for start in range(0, len(level), _COPY_CHUNK):
                stop = min(start + _COPY_CHUNK, len(level))
                copy.write(
                    "".join(
                        f"{snapshot_id}\t{number}\t{position}\t\\\\x{level.hashes[position].hex()}"
                        f"\t\\\\x{level.encoded[position].hex()}\n"
                        for position in range(start, stop)
                    )
                )
            root = level
    return root
