"""The streams app's receivers of what the apps below it announce: each records an outbox row in the
sender's transaction (:mod:`apps.streams.services`), so the relay publishes exactly what committed, but for a
password change, which ends the stream keys made in browser sessions, in its transaction too.

Connected in :meth:`apps.streams.apps.StreamsConfig.ready`. The signals: :data:`apps.orders.events.book_changed`,
:data:`apps.wallets.events.transfer_changed`, :data:`apps.accounts.events.api_key_created` and
:data:`~apps.accounts.events.password_changed`, and Django's ``user_logged_in``.
"""

from django.conf import settings

from apps.accounts.notifications import login_details

from .services import (
    book_event_record,
    book_events_statement,
    stream_tokens_of_sessions_revoke,
    user_event_record,
    user_notice_record,
)


def book_changed(sender, signal, **change) -> None:
    """A market's book changed: its event (:func:`book_event_record`, which takes the signal's keyword arguments:
    the update id, the orders written, the taker, a cancel's own client id)."""
    book_event_record(**change)


def batch_written(sender, *, market_id: int, events, **kwargs) -> list[tuple[str, list]]:
    """A sequencer's batch changed a market's book: the statement recording one event per change (its payloads
    are built only when streams publish, ``settings.STREAMS_PUBLISH``)."""
    if not settings.STREAMS_PUBLISH:
        return []
    statement = book_events_statement(market_id=market_id, events=events())
    return [] if statement is None else [statement]


def transfer_changed(sender, *, kind: str, user_id: int, object_id: int, **kwargs) -> None:
    """A deposit or withdrawal changed: the relay publishes it as committed, with the user's balance."""
    user_event_record(kind=kind, user_id=user_id, object_id=object_id)


def api_key_created(sender, *, user_id: int, name: str, scopes: list[str], **kwargs) -> None:
    """An ``accountNotice`` of the new key on the user's stream (its name and scopes, never the key)."""
    user_notice_record(user_id=user_id, notice="api_key_created", details={"name": name, "scopes": ",".join(scopes)})


def user_logged_in(sender, request, user, **kwargs) -> None:
    """An ``accountNotice`` of the log-in on the user's stream: its IP address and browser
    (:func:`apps.accounts.notifications.login_details`, as the e-mail gives them)."""
    user_notice_record(user_id=user.pk, notice="login", details=login_details(request))


def user_logged_out(sender, request, user, **kwargs) -> None:
    """A log-out: the stream keys made in the user's browser sessions end (break-it review: one made before a log-out
    went on delivering the user's orders, balances and log-in notices, on a shared computer too). The user's other
    open pages lose their stream and take a new key as they reconnect (``static/js/market.js``); keys made with an
    API key are the bots' and stay."""
    if user is not None:  # Django sends it for an anonymous session too
        stream_tokens_of_sessions_revoke(user_id=user.pk)


def password_changed(sender, *, user_id: int, **kwargs) -> None:
    """A password changed or reset: the stream keys made in the account's browser sessions end with them (break-it
    review: one made before a reset kept delivering balances and deposits, and opened new streams, after it)."""
    stream_tokens_of_sessions_revoke(user_id=user_id)


def second_factor_changed(sender, *, user_id: int, **kwargs) -> None:
    """The user's second factor was turned on, replaced or removed: the stream keys made in the user's browser
    sessions end, as those sessions do (:mod:`apps.accounts.session_second_factor`; break-it review: a page left
    open in a session logged out that way kept its stream until the key's end, an hour later). Keys made with an API
    key stay, as the API keys do."""
    stream_tokens_of_sessions_revoke(user_id=user_id)
