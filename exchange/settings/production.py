"""Production settings: the deployed settings (``deployed``) with a real custody provider, named explicitly.

Production refuses to start when ``CUSTODY_ADAPTER`` is unset or names the simulated provider
(hole 2): the simulator mints coins on request (``seed_demo``, ``simulate_deposit``) and is also
the provider ``reconcile`` compares the ledger with, so nothing would notice.
"""

from django.core.exceptions import ImproperlyConfigured

from .deployed import *  # noqa: F403
from .deployed import env
from .environment import SIMULATED_CUSTODY_ADAPTER, admin_url_checked, amounts_by_asset

CUSTODY_ADAPTER = env("CUSTODY_ADAPTER")  # no default: "Set the CUSTODY_ADAPTER environment variable"
if CUSTODY_ADAPTER.strip() in ("your_provider.custody.ProviderCustody", "apps.wallets.custody.base.CustodyAdapter"):
    raise ImproperlyConfigured(  # each started, and reconcile then failed with a traceback (break-it review)
        "CUSTODY_ADAPTER names .env.example's placeholder or the abstract adapter: set your provider's adapter."
    )
if CUSTODY_ADAPTER.strip().startswith(SIMULATED_CUSTODY_ADAPTER.rsplit(".", 2)[0]):  # the simulator's package
    raise ImproperlyConfigured(
        "CUSTODY_ADAPTER names the simulated custody, which is for development and tests only: "
        "set the dotted path of your custody provider's adapter."
    )

# The back office at a path of the deployment's own (the soak's deployed settings keep admin/): not .env.example's
# placeholder, nor empty, which mounted the admin at / ahead of the traders' pages (break-it review).
ADMIN_URL = admin_url_checked(env("DJANGO_ADMIN_URL"))

# E-mail carries password reset, withdrawal and address confirmation links: printed on the console (base's default)
# they went to the log collector, where anyone reading the logs could take accounts over, and no customer got them
# (break-it review). Production sends them through an SMTP server, with links to its own https address.
_email_url = env("EMAIL_URL")  # no default: "Set the EMAIL_URL environment variable"
if not _email_url.startswith(("smtp://", "smtps://", "smtp+tls://", "smtp+ssl://")) or "smtp.example.com" in _email_url:
    raise ImproperlyConfigured("EMAIL_URL must name your SMTP server (smtp+tls://user:password@host:587).")
SITE_URL = env("SITE_URL").rstrip("/")  # no default: "Set the SITE_URL environment variable"
if not SITE_URL.startswith("https://") or SITE_URL.lower() == "https://exchange.example.com":  # .env.example's
    raise ImproperlyConfigured("SITE_URL must be this exchange's https:// address (the e-mailed links start with it).")

# Every operator confirms a second factor in the back office, not only approvers.
STAFF_SECOND_FACTOR_REQUIRED = env.bool("STAFF_SECOND_FACTOR_REQUIRED", default=True)

# Withdrawals above these amounts wait for an e-mailed link before anyone approves or sends them (README): a stolen
# session or withdraw key alone then moves at most that much. Base's default (none) is for development; a live
# exchange names its own thresholds, or starts no more ("Set the WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE ...").
WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE = amounts_by_asset(
    env.dict("WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE"), name="WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE"
)
if not WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE:
    raise ImproperlyConfigured(
        "Set the WITHDRAWAL_EMAIL_CONFIRMATION_ABOVE environment variable to at least one asset's threshold "
        "(BTC=0.5,USDT=10000): withdrawals above it wait for an e-mailed link."
    )
