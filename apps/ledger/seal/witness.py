"""The chain head's witness outside the database: the sealer never builds on a chain shorter than one it signed.

Someone with rights over the database could delete the newest blocks (their triggers switched off), rewrite the
entries they held, and let the sealer seal those again with the real key: every block in the database would then
verify, and only a head an auditor had saved would show it (break-it review). So after each block commits, its
height, hash and ``sealed_at`` go to Redis (:func:`witness_record_on_commit`: only ever forward); before sealing,
and in reconcile, the block at the witnessed height must be in the database with that hash
(:func:`witness_problem`; reconcile, whose snapshot predates its read of the witness, counts a missing block only
when it was sealed more than ``LEDGER_SEAL_GRACE`` seconds before). A regression stops the
sealer (:class:`~apps.ledger.errors.SealRefused`) and fails reconcile's ``journal_sealed`` until an operator who restored the
database on purpose accepts its head (``manage.py journal_head_accept``).

The key names the PostgreSQL cluster and database (``pg_control_system()``'s system identifier and the database's
oid, read with schema-qualified names), so a new or recreated database starts with no witness: a copy of the
database swapped in under the same name is the one rewrite this does not see (the liabilities snapshots' block
hashes and the heads auditors keep still do). A witness that is missing (Redis emptied or
restarted without persistence: keep Redis persistent where this matters) or unreachable checks nothing and stops
nothing (logged): the witness can only ever stop a regression, never raise a false one. ``LEDGER_SEAL_HEAD_WITNESS``
(default on) turns it off.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import connection, transaction

from ..errors import SealRefused
from ..models import JournalBlock

log = logging.getLogger(__name__)

_FORWARD_ONLY = """
local stored = redis.call('HGET', KEYS[1], 'height')
if stored == false or tonumber(stored) < tonumber(ARGV[1]) then
    redis.call('HSET', KEYS[1], 'height', ARGV[1], 'block_hash', ARGV[2], 'sealed_at', ARGV[3])
end
"""
"""Record ``(height, block hash, sealed_at as epoch seconds)`` unless the witness already holds a greater height (sealers commit in height
order, but their post-commit calls may arrive out of it)."""


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _key() -> str:
    # Every catalog name schema-qualified: a superuser's search_path with a schema before pg_catalog shadowed
    # pg_control_system() with a function of theirs, moved the witness to a key with nothing recorded and so
    # checked nothing while blocks were deleted and sealed again (break-it review).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (pg_catalog.pg_control_system()).system_identifier, d.oid FROM pg_catalog.pg_database d"
            " WHERE d.datname = pg_catalog.current_database()"
        )
        system, database = cursor.fetchone()
    return f"ledger:journal_head:{system}:{database}"


@dataclass(frozen=True)
class Witnessed:
    """The head last recorded: its height, block hash and ``sealed_at``."""

    height: int
    block_hash: str
    sealed_at: datetime


def witness_read(*, strict: bool = False) -> Witnessed | None:
    """The witnessed head; ``None`` when off, never recorded, or Redis cannot be reached (with ``strict``, that
    raises ``redis.RedisError`` instead: the health check says it could not look)."""
    if not settings.LEDGER_SEAL_HEAD_WITNESS:
        return None
    try:
        stored: dict[bytes, bytes] = _client().hgetall(_key())  # type: ignore[assignment]  # a bytes client's
    except redis.RedisError:
        if strict:
            raise
        log.warning("ledger.head_witness_unavailable", exc_info=True)
        return None
    if not stored:
        return None
    return Witnessed(
        int(stored[b"height"]),
        stored[b"block_hash"].decode(),
        datetime.fromtimestamp(float(stored.get(b"sealed_at", 0)), tz=UTC),
    )


def witness_record_on_commit(block: JournalBlock) -> None:
    """Record ``block`` as the witnessed head once the caller's transaction commits (forward only)."""
    if not settings.LEDGER_SEAL_HEAD_WITNESS:
        return
    key = _key()

    def record() -> None:
        try:
            _client().eval(_FORWARD_ONLY, 1, key, block.height, block.block_hash, block.sealed_at.timestamp())
        except redis.RedisError:
            log.warning("ledger.head_witness_unavailable", exc_info=True)

    transaction.on_commit(record)


def witness_problem(*, sealed_before: datetime | None = None, strict: bool = False) -> str | None:
    """Why the database's chain contradicts the witness (a message naming the height), or ``None``; ``strict`` as
    :func:`witness_read`'s.

    ``sealed_before``: a reader whose snapshot was taken earlier than the witness was read (reconcile's) cannot see
    a block committed since; a witnessed block missing from it counts only when it was sealed before that time.
    A block that is there with another hash always counts (heights are unique and blocks never change)."""
    witnessed = witness_read(strict=strict)
    if witnessed is None:
        return None
    stored = JournalBlock.objects.filter(height=witnessed.height).values_list("block_hash", flat=True).first()
    if stored is None and (sealed_before is None or witnessed.sealed_at < sealed_before):
        return (
            f"the chain has no block {witnessed.height}, which was sealed with hash {witnessed.block_hash}: "
            "blocks were deleted"
        )
    if stored is not None and stored != witnessed.block_hash:
        return (
            f"block {witnessed.height} is not the block sealed there (hash {witnessed.block_hash}, now {stored}): "
            "it was rewritten"
        )
    return None


def witness_check() -> None:
    """Raise :class:`~apps.ledger.errors.SealRefused` when :func:`witness_problem` finds one (logged as an error)."""
    problem = witness_problem()
    if problem is not None:
        log.error("ledger.journal_head_regressed", extra={"problem": problem})
        raise SealRefused(f"Refusing to seal: {problem}.")


def witness_accept() -> tuple[int, str] | None:
    """Make the database's current head the witnessed one (after a deliberate restore); returns its ``(height,
    block hash)``, ``None`` when the chain is empty (the witness is then cleared). Raises ``redis.RedisError`` when
    Redis cannot be reached."""
    head = JournalBlock.objects.order_by("-height").first()
    client, key = _client(), _key()
    client.delete(key)
    if head is None:
        return None
    client.hset(
        key, mapping={"height": head.height, "block_hash": head.block_hash, "sealed_at": head.sealed_at.timestamp()}
    )
    return head.height, head.block_hash
