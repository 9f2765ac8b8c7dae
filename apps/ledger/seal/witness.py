"""The chain head's witness outside the database: the sealer never builds on a chain shorter than one it signed.

Someone with rights over the database could delete the newest blocks (their triggers switched off), rewrite the
entries they held, and let the sealer seal those again with the real key: every block in the database would then
verify, and only a head an auditor had saved would show it (break-it review). So after each block commits, its
height and hash go to Redis (:func:`witness_record`: only ever forward); before sealing, and in reconcile, the block
at the witnessed height must be in the database with that hash (:func:`witness_problem`). A regression stops the
sealer (:class:`~apps.ledger.errors.SealRefused`) and fails reconcile's ``journal_sealed`` until an operator who restored the
database on purpose accepts its head (``manage.py journal_head_accept``).

The key names the PostgreSQL cluster and database (``pg_control_system()``'s system identifier and the database's
oid), so a new or recreated database starts with no witness. A witness that is missing (Redis emptied or
restarted without persistence: keep Redis persistent where this matters) or unreachable checks nothing and stops
nothing (logged): the witness can only ever stop a regression, never raise a false one. ``LEDGER_SEAL_HEAD_WITNESS``
(default on) turns it off.
"""

import logging

import redis
from django.conf import settings
from django.db import connection, transaction

from ..errors import SealRefused
from ..models import JournalBlock

log = logging.getLogger(__name__)

_FORWARD_ONLY = """
local stored = redis.call('HGET', KEYS[1], 'height')
if stored == false or tonumber(stored) < tonumber(ARGV[1]) then
    redis.call('HSET', KEYS[1], 'height', ARGV[1], 'block_hash', ARGV[2])
end
"""
"""Record ``(height, block hash)`` unless the witness already holds a greater height (sealers commit in height
order, but their post-commit calls may arrive out of it)."""


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def _key() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (pg_control_system()).system_identifier, oid FROM pg_database WHERE datname = current_database()"
        )
        system, database = cursor.fetchone()
    return f"ledger:journal_head:{system}:{database}"


def witness_read() -> tuple[int, str] | None:
    """The witnessed ``(height, block hash)``; ``None`` when off, never recorded, or Redis cannot be reached."""
    if not settings.LEDGER_SEAL_HEAD_WITNESS:
        return None
    try:
        stored: dict[bytes, bytes] = _client().hgetall(_key())  # type: ignore[assignment]  # a bytes client's
    except redis.RedisError:
        log.warning("ledger.head_witness_unavailable", exc_info=True)
        return None
    if not stored:
        return None
    return int(stored[b"height"]), stored[b"block_hash"].decode()


def witness_record_on_commit(block: JournalBlock) -> None:
    """Record ``block`` as the witnessed head once the caller's transaction commits (forward only)."""
    if not settings.LEDGER_SEAL_HEAD_WITNESS:
        return
    key = _key()

    def record() -> None:
        try:
            _client().eval(_FORWARD_ONLY, 1, key, block.height, block.block_hash)
        except redis.RedisError:
            log.warning("ledger.head_witness_unavailable", exc_info=True)

    transaction.on_commit(record)


def witness_problem() -> str | None:
    """Why the database's chain contradicts the witness (a message naming the height), or ``None``."""
    witnessed = witness_read()
    if witnessed is None:
        return None
    height, block_hash = witnessed
    stored = JournalBlock.objects.filter(height=height).values_list("block_hash", flat=True).first()
    if stored is None:
        return f"the chain has no block {height}, which was sealed with hash {block_hash}: blocks were deleted"
    if stored != block_hash:
        return f"block {height} is not the block sealed there (hash {block_hash}, now {stored}): it was rewritten"
    return None


def witness_check() -> None:
    """Raise :class:`~apps.ledger.errors.SealRefused` when :func:`witness_problem` finds one (logged as an error)."""
    problem = witness_problem()
    if problem is not None:
        log.error("ledger.journal_head_regressed", extra={"problem": problem})
        raise SealRefused(f"Refusing to seal: {problem}.")


def witness_accept() -> tuple[int, str] | None:
    """Make the database's current head the witnessed one (after a deliberate restore); returns it, ``None`` when
    the chain is empty (the witness is then cleared). Raises ``redis.RedisError`` when Redis cannot be reached."""
    head = JournalBlock.objects.order_by("-height").values_list("height", "block_hash").first()
    client, key = _client(), _key()
    client.delete(key)
    if head is not None:
        client.hset(key, mapping={"height": head[0], "block_hash": head[1]})
    return head
