"""The custody adapter interface (DESIGN.md section 8) and the errors it raises.

A custody provider holds the exchange's coins on chain. The exchange asks it for deposit
addresses and to send withdrawals; it reports deposits and withdrawal outcomes by signed
callbacks to ``POST /custody/callbacks/``. An adapter wraps one provider's API.

Adapters are called outside any database transaction that holds locks: a call may be slow,
time out, or be retried.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal


class CustodyError(Exception):
    """A call to the custody provider did not succeed."""


class CustodyUnavailable(CustodyError):
    """The provider did not answer (timeout, connection error, 5xx): the outcome is unknown.

    The caller retries the same request with the same idempotency key; it never assumes
    the request was refused (a withdrawal's hold is kept).
    """


class CustodyRejected(CustodyError):
    """The provider answered and refused the request for good (bad address, not enough coins, ...)."""


class CallbackUnauthenticated(Exception):
    """A callback whose signature is missing or wrong, or whose timestamp is outside the allowed skew."""


@dataclass(frozen=True)
class SubmitReceipt:
    """The provider's answer to an accepted withdrawal: its own ``reference`` and its ``status``."""

    reference: str
    status: str


@dataclass(frozen=True)
class CustodyWithdrawal:
    """A withdrawal as the provider sees it.

    ``status`` is ``accepted``, ``completed`` or ``failed``; ``amount`` and ``network_fee``
    are in units of ``asset_code``; ``requests`` counts the submissions received for it.
    """

    withdrawal_id: str
    reference: str
    asset_code: str
    amount: Decimal
    address: str
    status: str
    txid: str
    network_fee: Decimal
    requests: int


class CustodyAdapter(ABC):
    """What the exchange needs from a custody provider."""

    @abstractmethod
    def new_deposit_address(self, *, network: str, asset_code: str, label: str) -> str:
        """A new deposit address on ``network`` for ``asset_code``; ``label`` names its owner for the provider.

        Raises :class:`CustodyUnavailable` or :class:`CustodyRejected`.
        """

    @abstractmethod
    def submit_withdrawal(
        self, *, withdrawal_id: str, network: str, asset_code: str, amount: Decimal, address: str
    ) -> SubmitReceipt:
        """Ask the provider to send ``amount`` (units of ``asset_code``) to ``address``.

        Idempotent on ``withdrawal_id``: submitting the same id again returns the first
        submission's receipt and sends nothing more. The outcome arrives later by callback.
        Raises :class:`CustodyUnavailable` (outcome unknown: retry with the same id) or
        :class:`CustodyRejected` (refused for good).
        """

    @abstractmethod
    def withdrawal_status(self, *, withdrawal_id: str) -> CustodyWithdrawal | None:
        """The provider's view of a withdrawal, ``None`` if it never received it.

        Raises :class:`CustodyUnavailable`.
        """

    @abstractmethod
    def holdings(self) -> dict[str, Decimal]:
        """What the provider holds for the exchange: ``{asset code: amount}`` (invariant 5).

        Raises :class:`CustodyUnavailable`.
        """

    @abstractmethod
    def verify_callback(self, *, headers: Mapping[str, str], body: bytes) -> None:
        """Check a callback's authenticity from its HTTP ``headers`` and raw ``body``.

        Raises :class:`CallbackUnauthenticated` when it is not signed by the provider or is stale.
        """
