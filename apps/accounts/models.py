"""Accounts: API keys (scoped, stored hashed, shown once, revocable), the restrictions operators set and the
requests to set an e-mail address."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

# The unique index on ``lower(email)`` of ``auth_user`` for non-empty addresses (migration 0004): no two users
# share an e-mail address whatever its case.
EMAIL_UNIQUE_INDEX = "auth_user_email_lower_unique"


class Scope(models.TextChoices):
    """What an API key may do (API.md): read everything of its user, trade, withdraw."""

    READ = "read", "Read"
    TRADE = "trade", "Trade"
    WITHDRAW = "withdraw", "Withdraw"


class ApiKeyQuerySet(models.QuerySet):
    def active(self) -> "ApiKeyQuerySet":
        """The keys neither revoked nor expired (:attr:`ApiKey.is_active`, in SQL)."""
        return self.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()), revoked_at__isnull=True)


class ApiKey(models.Model):
    """A user's API key ``ex_<prefix>_<secret>``: only ``prefix`` and the SHA-256 of the whole key are stored.

    ``withdrawal_addresses``, when not empty, is the only list of addresses this key
    may withdraw to; ``allowed_ips``, when not empty, the only client addresses or networks
    (``203.0.113.7``, ``2001:db8::/48``) it is accepted from. A revoked key (``revoked_at`` set)
    or an expired one (``expires_at`` passed) authenticates nothing. ``signing_secret_sealed``
    is the HMAC secret that signs ``/api/v3/`` requests, encrypted (``apps.accounts.secret_box``;
    empty for keys made before there were secrets).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices))
    withdrawal_addresses = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    allowed_ips = ArrayField(models.CharField(max_length=43), default=list, blank=True)
    signing_secret_sealed = models.TextField(blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        permissions = [("revoke_apikey", "Can revoke a customer's API key")]
        constraints = [
            models.CheckConstraint(
                condition=Q(scopes__contained_by=Scope.values) & ~Q(scopes=[]), name="api_key_known_scopes"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (ex_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        """Neither revoked nor expired."""
        return self.revoked_at is None and not self.is_expired

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()


class AccountRestriction(models.Model):
    """What operators have restricted on one user's account, and why (read through :mod:`apps.accounts.selectors`).

    ``trading_frozen``: no new order is accepted (open orders stay cancellable).
    ``withdrawals_blocked``: no new withdrawal is accepted (pending ones stay with operators).
    Each flag keeps the reason, the operator and the time of its last change (no operator: the system set it,
    :func:`apps.accounts.restrictions.account_withdrawals_block_by_system`); a user without a row has no restriction.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="restriction")
    trading_frozen = models.BooleanField(default=False)
    trading_reason = models.TextField(blank=True)
    withdrawals_blocked = models.BooleanField(default=False)
    withdrawals_reason = models.TextField(blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(trading_frozen=False) | ~Q(trading_reason=""))
                & (Q(withdrawals_blocked=False) | ~Q(withdrawals_reason="")),
                name="account_restriction_has_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"restrictions of {self.user}"


class HoldReason(models.TextChoices):
    """What changed in how an account is secured, pausing its withdrawals (:class:`WithdrawalHold`)."""

    PASSWORD_CHANGED = "password_changed", "password changed"
    PASSWORD_RESET = "password_reset", "password reset"
    SECOND_FACTOR_REPLACED = "second_factor_replaced", "second factor replaced"
    SECOND_FACTOR_REMOVED = "second_factor_removed", "second factor removed"
    EMAIL_CHANGED = "email_changed", "e-mail address changed"


class WithdrawalHold(models.Model):
    """The user's withdrawals are paused until ``until``, after the latest change of how the account is secured
    (``reason``): whoever took an account over by changing its password, second factor or e-mail address cannot
    withdraw at once, and the owner, told by e-mail, has that long to react (as Binance pauses withdrawals for 24
    hours after such changes). One row per user, moved forward by each change (:mod:`apps.accounts.holds`)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="withdrawal_hold"
    )
    until = models.DateTimeField()
    reason = models.CharField(max_length=32, choices=HoldReason.choices)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"withdrawals of {self.user_id} paused until {self.until:%Y-%m-%d %H:%M} ({self.reason})"


class EmailRequestQuerySet(models.QuerySet):
    def open(self) -> "EmailRequestQuerySet":
        """The requests whose link may still work: neither used nor retired (their age is the token's to judge)."""
        return self.filter(confirmed_at__isnull=True, superseded_at__isnull=True)


class EmailRequest(models.Model):
    """One request to make ``email`` a user's address (sign-up, the security page): the row the e-mailed link names.

    A change of an address the user has already (``approval_needed``) waits for the link sent to that address:
    ``approved_at`` is set when it is opened, and only then does the new address get its message (the database
    refuses a link sent before). ``link_sent`` is False when another account had the address, so its owner was
    told instead and there is no link, or while the change awaits approval. ``message_sent`` is False when the
    address had its day's messages already, so nothing went out (the asker is answered alike), or while the change
    awaits approval. A link sets the address once: ``confirmed_at`` is set then, and a newer request of
    the user sets ``superseded_at`` on the older ones still open, so no older link works after it. The rows also
    count the requests a user and an address may have per day (``EMAIL_REQUESTS_PER_DAY``).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="email_requests")
    email = models.CharField(max_length=254)
    link_sent = models.BooleanField()
    message_sent = models.BooleanField()
    approval_needed = models.BooleanField(default=False)
    approved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)

    objects = EmailRequestQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["user", "created_at"], name="email_request_user_time"),
            models.Index(Lower("email"), "created_at", name="email_request_address_time"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(confirmed_at__isnull=True) | (Q(link_sent=True) & Q(superseded_at__isnull=True)),
                name="email_request_confirmed_only_with_a_link",
            ),
            models.CheckConstraint(
                condition=Q(approval_needed=False, approved_at__isnull=True)
                | Q(approval_needed=True, approved_at__isnull=True, link_sent=False, message_sent=False)
                | Q(approval_needed=True, approved_at__isnull=False),
                name="email_request_new_address_told_after_approval",
            ),
        ]

    def __str__(self) -> str:
        return f"e-mail request {self.pk} of user {self.user_id}"


class SecondFactorEpoch(models.Model):
    """How many times the user's second factor changed (enrolled, replaced, removed), by any path: bumped by
    :mod:`apps.accounts.session_second_factor` on :data:`~apps.accounts.events.second_factor_changed`. A browser
    session is bound to it, so a change ends the other sessions even when the authenticators end as they were (turned
    on, then off, before the other session's next request: break-it review). A user without a row has 0."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="second_factor_epoch"
    )
    number = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"second factor of {self.user_id}: change {self.number}"
