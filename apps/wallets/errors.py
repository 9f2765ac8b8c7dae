"""The wallets' domain errors, with API.md's error codes; each names the offending input field."""

from apps.core.errors import DomainError

UNKNOWN_ASSET = "Unknown asset."


def unknown_asset_message(code: object) -> str:
    """The one wording of an unknown asset code, wherever it comes from: ``"Unknown asset BTX."`` (the code as
    given, when it is short printable text), with the field message :data:`UNKNOWN_ASSET`. In the URL path
    (``/deposit-address/{asset}/``) it is a 404 ``not_found``; in a body field a 400 ``invalid_request``."""
    if isinstance(code, str) and 0 < len(code) <= 16 and code.isprintable():
        return f"Unknown asset {code}."
    return UNKNOWN_ASSET


class WithdrawalLimit(DomainError):
    """A withdrawal below the asset's minimum or above the user's daily limit."""

    code = "withdrawal_limit"

    def __init__(self, message: str, *, field: str = "amount"):
        super().__init__(message, fields={field: message})


class CallbackRefused(DomainError):
    """A custody callback that is not signed by the provider, or is stale: HTTP 401."""

    code = "not_authenticated"
    status = 401


class PayloadTooLarge(DomainError):
    """A custody callback body above ``settings.CUSTODY_WEBHOOK_MAX_BODY``: HTTP 413 ``payload_too_large`` (API.md's
    code for it, as the API's bodies over their limit)."""

    code = "payload_too_large"
    status = 413


class EventNotReady(Exception):
    """A custody event that cannot be applied yet (a withdrawal's outcome before its submission was
    recorded); the processing task retries it later. Never shown to a client."""


class EventRejected(Exception):
    """A custody event that can never be applied as it stands (unknown deposit address, a report
    contradicting what was already recorded); it is kept, marked ``rejected`` with the reason,
    and needs an operator."""


class CreditedDepositFailed(EventRejected):
    """Custody reports failed (a chain reorganisation, say) a deposit the ledger has already credited: the event is
    rejected, the credit stays until an operator reverses it by hand (an adjustment), and meanwhile the owner's
    withdrawals are blocked (:func:`apps.accounts.restrictions.account_withdrawals_block_by_system`), so the coins
    that never arrived cannot leave."""

    def __init__(self, *, deposit_id: int, user_id: int):
        self.deposit_id, self.user_id = deposit_id, user_id
        super().__init__(
            f"Deposit #{deposit_id} was credited and is now reported failed: its owner's withdrawals are blocked; "
            "reverse the credit by hand, then lift the block."
        )
