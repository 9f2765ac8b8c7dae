"""Every write of the streams app: the outbox rows of committed changes, and user stream tokens.

The outbox writers run inside the caller's transaction (they never open one): a book
change is recorded by :func:`book_event_record` when the orders app announces it under the
market's row lock, a deposit or withdrawal change by :func:`user_event_record` when the wallets app
does (:mod:`apps.streams.receivers`). Nothing is published from here: the relay
(:mod:`apps.streams.relay`) publishes committed rows in order; each writer rings it when its transaction
commits (:func:`apps.core.doorbell.ring_at_commit`).

``settings.STREAMS_PUBLISH`` (default on) switches the recording off; the benchmark
compares a placement's cost with and without it. With it off there are no streams.
"""

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta

import orjson
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from apps.accounts.models import ApiKey
from apps.core.doorbell import ring_at_commit
from apps.core.errors import NotFound
from apps.ledger.db import PreparedCursor
from apps.orders.models import TRADE_NUMBER_BASE

from .models import RELAY_CHANNEL, StreamEvent, StreamEventKind, StreamToken
from .selectors import stream_tokens_live

# The levels a book change touched (every limit order it wrote: the taker's and the makers' prices),
# each with the quantity resting there after the change (0: the level is gone); the best bid and ask;
# the trades of the taker order; the orders written. Read in the statement that inserts the row, so
# inside the transaction that made the change and after all its writes. Amounts are text (exact).
_OPEN = "status IN ('open', 'partially_filled')"
_INSERT_BOOK_EVENT = f"""
    INSERT INTO streams_streamevent (kind, market_id, update_id, payload, created_at)
    SELECT 'book', %(market)s, %(update_id)s, jsonb_build_object(
        'taker', %(taker)s::bigint,
        'cancel_client_order_id', %(cancel_client_order_id)s::text,
        'levels', COALESCE((
            SELECT jsonb_agg(jsonb_build_array(t.side, t.price::text, COALESCE((
                SELECT sum(o.qty - o.filled_qty) FROM orders_order o
                WHERE o.market_id = %(market)s AND o.side = t.side AND o.price = t.price AND o.{_OPEN}
            ), 0)::text) ORDER BY t.side, t.price)
            FROM (SELECT DISTINCT side, price FROM orders_order WHERE id = ANY(%(orders)s::bigint[]) AND price IS NOT NULL) t
        ), '[]'::jsonb),
        'bid', (
            SELECT jsonb_build_array(price::text, sum(qty - filled_qty)::text) FROM orders_order
            WHERE market_id = %(market)s AND side = 'buy' AND {_OPEN} GROUP BY price ORDER BY price DESC LIMIT 1
        ),
        'ask', (
            SELECT jsonb_build_array(price::text, sum(qty - filled_qty)::text) FROM orders_order
            WHERE market_id = %(market)s AND side = 'sell' AND {_OPEN} GROUP BY price ORDER BY price LIMIT 1
        ),
        'trades', COALESCE((
            SELECT jsonb_agg(jsonb_build_object(
                'id', id, 'number', taker_order_id * %(trade_number_base)s::bigint + seq, 'price', price::text, 'qty', qty::text, 'quote_qty', quote_qty::text,
                'taker_side', taker_side, 'taker_order_id', taker_order_id, 'maker_order_id', maker_order_id,
                'taker_user_id', taker_user_id, 'maker_user_id', maker_user_id,
                'taker_fee', taker_fee::text, 'maker_fee', maker_fee::text,
                'time', (extract(epoch FROM created_at) * 1000)::bigint) ORDER BY seq)
            FROM orders_trade WHERE taker_order_id = %(taker)s
        ), '[]'::jsonb),
        'orders', COALESCE((
            SELECT jsonb_agg(jsonb_build_object(
                'id', id, 'user_id', user_id, 'client_order_id', client_order_id, 'side', side, 'type', type,
                'time_in_force', time_in_force, 'price', price::text, 'qty', qty::text,
                'quote_qty', quote_qty::text, 'post_only', post_only, 'stp', stp, 'filled_qty', filled_qty::text,
                'filled_quote_qty', filled_quote_qty::text, 'fee_total', fee_total::text, 'status', status,
                'reject_reason', reject_reason, 'created_at', (extract(epoch FROM created_at) * 1000)::bigint,
                'updated_at', (extract(epoch FROM updated_at) * 1000)::bigint) ORDER BY id)
            FROM orders_order WHERE id = ANY(%(orders)s::bigint[])
        ), '[]'::jsonb)
    ), now()
"""


def book_event_record(
    *,
    market_id: int,
    update_id: int,
    order_ids: list[int],
    taker_order_id: int | None,
    cancel_client_order_id: str = "",
) -> None:
    """Record the book change ``update_id`` of the market (one statement, in the caller's transaction).

    Call it under the market's row lock, after every write of the change: ``update_id`` is
    the market's sequence as the change left it (every sequence bump records exactly one
    event, so a market's update ids have no gaps); ``order_ids`` the orders the change
    wrote (their price levels are published with the quantity resting there now);
    ``taker_order_id`` the placed order whose trades are published (``None`` for a cancel,
    a halt or a resume); ``cancel_client_order_id`` a cancel's own client id (Binance's ``newClientOrderId`` of the
    cancel request: its execution report's ``c``), empty for none.
    """
    if not settings.STREAMS_PUBLISH:
        return
    with PreparedCursor() as cursor:  # planned once per connection: it runs in every placement
        cursor.execute(
            _INSERT_BOOK_EVENT,
            {
                "market": market_id,
                "update_id": update_id,
                "orders": order_ids,
                "taker": taker_order_id,
                "cancel_client_order_id": cancel_client_order_id,
                "trade_number_base": TRADE_NUMBER_BASE,
            },
        )
    ring_at_commit(RELAY_CHANNEL)


_INSERT_BOOK_EVENTS = """
    INSERT INTO streams_streamevent (kind, market_id, update_id, payload, created_at)
    SELECT 'book', %s, e.update_id, e.payload, now()
    FROM ROWS FROM (unnest(%s::bigint[]), jsonb_array_elements(%s::jsonb)) AS e(update_id, payload)
"""
# The payloads travel as one JSON array, not as a jsonb[]: an array literal escapes every quote of every payload
# again (psycopg's array dumper; it was the sequencer's largest cost in Python after the database waits).


def book_events_statement(*, market_id: int, events: Sequence[tuple[int, dict]]) -> tuple[str, list] | None:
    """The statement recording several book changes of the market at once, as ``(sql, parameters)`` for the
    caller to run in its transaction (with others in one round trip: :meth:`apps.ledger.db.PreparedCursor.pipeline`);
    ``None`` when there is nothing to record (no events, or streams off).

    ``events`` are ``(update id, payload)`` pairs. For a writer that knows each change's state itself (the
    sequencer, whose batch makes many changes in one transaction, so the tables hold only the last one's
    state). Each payload has the shape :func:`book_event_record` reads from the tables (``taker``,
    ``levels``, ``bid``, ``ask``, ``trades``, ``orders``; amounts as text with the columns' 18 places);
    the update ids follow the same rule (the market's sequence after each change, without gaps). Run it
    under the market's row lock (the relay is rung when the caller's transaction commits).
    """
    if not settings.STREAMS_PUBLISH or not events:
        return None
    ring_at_commit(RELAY_CHANNEL)
    return (
        _INSERT_BOOK_EVENTS,
        [market_id, [update_id for update_id, _ in events], orjson.dumps([payload for _, payload in events]).decode()],
    )


def user_event_record(*, kind: str, user_id: int, object_id: int) -> None:
    """Record that the user's deposit or withdrawal ``object_id`` changed (in the caller's transaction).

    ``kind`` is ``deposit`` or ``withdrawal``; the relay publishes the object as it then is,
    with the user's balance in its asset.
    """
    if not settings.STREAMS_PUBLISH:
        return
    StreamEvent.objects.create(
        kind=StreamEventKind(kind), user_id=user_id, object_id=object_id, created_at=timezone.now()
    )
    ring_at_commit(RELAY_CHANNEL)


def user_notice_record(*, user_id: int, notice: str, details: dict[str, str]) -> None:
    """Record an account notice for the user's stream (in the caller's transaction): ``notice`` is ``login``
    or ``api_key_created``, ``details`` plain strings (the log-in's IP address and browser, the key's name
    and scopes). Published as ``{"e": "accountNotice", "E": <ms>, "notice": ..., **details}``."""
    if not settings.STREAMS_PUBLISH:
        return
    StreamEvent.objects.create(
        kind=StreamEventKind.NOTICE,
        user_id=user_id,
        object_id=user_id,
        payload={"notice": notice, **details},
        created_at=timezone.now(),
    )
    ring_at_commit(RELAY_CHANNEL)


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def stream_key_of(nonce: str) -> str:
    """The stream key of a token with ``nonce``: HMAC-SHA256 of it under ``SECRET_KEY`` (64 hex characters), so
    the key can be given again while the token lives but is not in the database."""
    return salted_hmac("apps.streams.stream-key", nonce, algorithm="sha256").hexdigest()


def stream_token_create(*, user_id: int, api_key_id: int | None = None) -> tuple[StreamToken, str]:
    """A new user stream key for ``user_id``, valid ``settings.STREAMS_TOKEN_TTL`` seconds (made in a browser session,
    at most ``SESSION_IDLE_SECONDS``: :func:`_expiry`).

    ``api_key_id`` is the API key the request was authenticated with (None for a browser session): the stream
    key then opens nothing once that key is revoked or expires, and open streams are closed
    (:func:`~apps.streams.selectors.stream_tokens_live`); its ``expires_at`` is never later than that key's.
    Returns the row and the key (64 hex characters), which is shown only here; the user's keys that open nothing
    any more are deleted on the way.
    """
    StreamToken.objects.filter(user_id=user_id).exclude(pk__in=stream_tokens_live().values("pk")).delete()
    nonce = secrets.token_hex(32)
    key = stream_key_of(nonce)
    token = StreamToken.objects.create(
        user_id=user_id,
        api_key_id=api_key_id,
        key_hash=_key_hash(key),
        nonce=nonce,
        expires_at=_expiry(
            ApiKey.objects.filter(pk=api_key_id).values_list("expires_at", flat=True).first() if api_key_id else None,
            browser=api_key_id is None,
        ),
    )
    return token, key


def _expiry(key_expiry: datetime | None, *, browser: bool) -> datetime:
    """``STREAMS_TOKEN_TTL`` seconds from now, or ``key_expiry`` (the API key's, if it has one) when that is sooner.
    A key made in a browser session (``browser``) lives at most ``SESSION_IDLE_SECONDS`` (when on): its stream then
    ends by the session's idle end, and the page's next key (taken as it reconnects) is refused once the session is
    logged out (break-it review: a market page's stream ran on for half an hour after its session's idle end)."""
    seconds = settings.STREAMS_TOKEN_TTL
    if browser and settings.SESSION_IDLE_SECONDS > 0:
        seconds = min(seconds, settings.SESSION_IDLE_SECONDS)
    expires_at = timezone.now() + timedelta(seconds=seconds)
    return min(expires_at, key_expiry) if key_expiry is not None else expires_at


@transaction.atomic
def stream_token_of_api_key(*, user_id: int, api_key_id: int) -> tuple[StreamToken, str]:
    """The API key's live stream key, kept alive another ``STREAMS_TOKEN_TTL`` seconds (:func:`stream_token_extend`),
    or a new one (:func:`stream_token_create`) when it has none: Binance's ``POST /api/v3/userDataStream``, "If the
    account has an active listenKey, that listenKey will be returned and its validity extended" (break-it review:
    every call made a new key, 120 calls 120 live keys). Calls for one API key are taken in turn (its row is locked).
    Returns the row and the key."""
    ApiKey.objects.select_for_update().filter(pk=api_key_id).first()
    live = stream_tokens_live().filter(user_id=user_id, api_key_id=api_key_id).exclude(nonce="")
    token = live.order_by("-expires_at", "-pk").first()
    if token is not None:
        key = stream_key_of(token.nonce)
        if _key_hash(key) == token.key_hash:  # else made under another SECRET_KEY
            return stream_token_extend(user_id=user_id, key=key), key
    return stream_token_create(user_id=user_id, api_key_id=api_key_id)


def stream_token_extend(*, user_id: int, key: str) -> StreamToken:
    """Keep the user's stream key alive for another ``STREAMS_TOKEN_TTL`` seconds from now (never later than the
    expiry of the API key that created it).

    Raises :class:`NotFound` for a key that is unknown, expired, another user's, or made with an API key that
    is revoked or expired.
    """
    live = stream_tokens_live().filter(user_id=user_id, key_hash=_key_hash(key))
    token = live.select_related("api_key").first()
    if token is not None:
        token.expires_at = _expiry(token.api_key.expires_at if token.api_key else None, browser=token.api_key is None)
        # Still live as it is moved (not revoked, nor its API key, in between): one statement.
        if StreamToken.objects.filter(pk__in=live.values("pk")).update(expires_at=token.expires_at):
            return token
    raise NotFound("No such stream key.", fields={"key": "Unknown or expired."})


def stream_tokens_of_sessions_revoke(*, user_id: int) -> int:
    """Delete the user's stream keys made in browser sessions (not with an API key), in the caller's transaction; return
    how many. A password change or reset and a change of the second factor call it (they end the account's other
    sessions; a stream key made in one of them must not outlive it): open streams get ``listenKeyExpired`` within
    ``STREAMS_TOKEN_CHECK_SECONDS``. Keys made with an API key live as long as that key (a reset revokes every key)."""
    return StreamToken.objects.filter(user_id=user_id, api_key__isnull=True).delete()[0]


def stream_token_revoke(*, user_id: int, key: str) -> None:
    """Delete the user's stream key; streams opened with it get ``listenKeyExpired`` and are closed within
    ``STREAMS_TOKEN_CHECK_SECONDS`` (:mod:`apps.streams.consumers`).

    Raises :class:`NotFound` for a key that is unknown or another user's.
    """
    if not StreamToken.objects.filter(user_id=user_id, key_hash=_key_hash(key)).delete()[0]:
        raise NotFound("No such stream key.", fields={"key": "Unknown or expired."})
