"""The streams' outbox and the tokens that open a user stream.

:class:`StreamEvent` is a transactional outbox: the services that change the book or a
user's orders, deposits or withdrawals write one row in their own transaction, so an
event exists exactly when its change was committed. The relay
(:mod:`apps.streams.relay`) publishes the rows in id order and deletes them.

A market's rows carry ``update_id``: the market's book sequence after the change,
drawn under the market's row lock (:mod:`apps.orders.services`), so a market's update
ids follow its commit order without gaps. The writers ring the relay's doorbell :data:`RELAY_CHANNEL`
when their transaction commits (:mod:`apps.core.doorbell`).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

RELAY_CHANNEL = "streams_outbox"


class StreamEventKind(models.TextChoices):
    BOOK = "book", "Book change (placement, cancel, halt, resume)"
    DEPOSIT = "deposit", "Deposit changed"
    WITHDRAWAL = "withdrawal", "Withdrawal changed"
    NOTICE = "notice", "Account notice (a new log-in, an API key created)"


class StreamEvent(models.Model):
    """One committed change waiting to be published.

    ``book`` rows: ``market`` and ``update_id`` set; ``payload`` holds the changed price
    levels (``levels``: ``[side, price, qty]``, qty 0 when the level is gone), the best
    bid and ask after the change, the trades and the orders the change touched.
    ``deposit``/``withdrawal`` rows: ``user`` and ``object_id`` set; the relay reads the
    object as it is when it publishes. ``notice`` rows: ``user`` set, ``object_id`` the
    user's id, ``payload`` the notice as published (``{"notice": "login" | "api_key_created", ...}``).
    """

    kind = models.CharField(max_length=16, choices=StreamEventKind.choices)
    market = models.ForeignKey("orders.Market", null=True, on_delete=models.CASCADE, related_name="+")
    update_id = models.PositiveBigIntegerField(null=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.CASCADE, related_name="+")
    object_id = models.BigIntegerField(null=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(kind="book", market__isnull=False, update_id__isnull=False))
                | (~Q(kind="book") & Q(user__isnull=False, object_id__isnull=False)),
                name="stream_event_shape",
            ),
        ]

    def __str__(self) -> str:
        if self.kind == StreamEventKind.BOOK:
            return f"book market {self.market_id} update {self.update_id}"
        return f"{self.kind} {self.object_id} of user {self.user_id}"


class StreamToken(models.Model):
    """A key that opens the user stream of ``user`` at ``/ws/<key>`` until ``expires_at``.

    Created from an authenticated API call (session or API key); extending it moves
    ``expires_at`` (Binance's listenKey keep-alive), revoking deletes it. Only the
    SHA-256 of the key is stored. ``api_key`` is the API key that created it (empty for a browser
    session): the stream key lives no longer than that API key (revoked or expired, it opens nothing).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="stream_tokens")
    api_key = models.ForeignKey(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="stream_tokens"
    )
    key_hash = models.CharField(max_length=64, unique=True)
    # The key is HMAC(SECRET_KEY, nonce): the server can hand the same key out again (Binance's listenKey), and
    # the table alone does not give it (apps.streams.services.stream_key_of). Empty for keys made before it was.
    nonce = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["expires_at"])]

    def __str__(self) -> str:
        return f"stream key of user {self.user_id} until {self.expires_at:%Y-%m-%d %H:%M}"
