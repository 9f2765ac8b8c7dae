import re
import uuid
from datetime import UTC, datetime, time, timedelta
from typing import TypeVar

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.validators import ASCIIUsernameValidator

from apps.accounts.email_address import INVALID as EMAIL_INVALID
from apps.accounts.models import Scope
from apps.accounts.passwords import MAX_PASSWORD_LENGTH
from apps.core.days import last_day_validator
from apps.core.single_valued import SingleValuedForm
from apps.ledger.models import EntryReason
from apps.orders.models import OrderType, Side, TimeInForce
from exchange.converters import MAX_ID

USERNAME_TAKEN = "This username is taken."


class SignUpForm(SingleValuedForm, UserCreationForm):
    """A trader's sign-up: username, optional e-mail, password twice (Django's password validators, with the
    128-character cap of :mod:`apps.accounts.passwords`).

    Usernames are ASCII and unique whatever their case, so no one can pose as "alice" as "Alice" or
    with a look-alike letter. The e-mail address is not saved with the user: the view sends it a link that sets
    it (:mod:`apps.accounts.email_address`), and the form never says whether another account has it.
    """

    email = forms.EmailField(
        required=False,
        max_length=254,
        label="E-mail address",
        help_text="We send it a link to confirm it is yours.",
        error_messages={"invalid": EMAIL_INVALID},
    )

    class Meta(UserCreationForm.Meta):
        fields = ("username",)

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        ASCIIUsernameValidator()(username)
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError(USERNAME_TAKEN)
        return username


def password_again_field() -> forms.CharField:
    """The account's password, asked again before a security change when the second factor is off
    (:func:`apps.accounts.reauthentication.password_confirm`)."""
    return forms.CharField(
        required=False,
        max_length=MAX_PASSWORD_LENGTH,
        strip=False,
        label="Your password",
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


class ApiKeyForm(SingleValuedForm, forms.Form):
    """A new API key: the service (``api_key_create``) judges every value and names the field at fault."""

    EXPIRY_CHOICES = [("", "Never"), ("86400", "1 day"), ("2592000", "30 days"), ("7776000", "90 days")]

    name = forms.CharField(max_length=100)
    scopes = forms.MultipleChoiceField(choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=["read"])
    expires_in = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False, label="Expires"
    )
    allowed_ips = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="IP allow-list",
        help_text="Optional: one IP address or network per line (203.0.113.7, 2001:db8::/48); requests from "
        "anywhere else are refused.",
    )
    withdrawal_addresses = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional: one address per line; withdrawals with this key may go only there.",
    )
    otp = forms.CharField(
        required=False,
        max_length=16,
        label="One-time password",
        help_text="From your authenticator: required for any key once you have a second factor (and the withdraw "
        "scope needs one).",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric"}),
    )

    password = password_again_field()

    def clean_allowed_ips(self) -> list[str]:
        return _lines(self.cleaned_data["allowed_ips"])

    def clean_withdrawal_addresses(self) -> list[str]:
        return _lines(self.cleaned_data["withdrawal_addresses"])


OTP_INPUT = forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric"})


def _new_request_key() -> str:
    return uuid.uuid4().hex


# The order API's field names as they may appear in a service's message ("takes either qty or quote_qty").
_API_NAMES = re.compile(r"\b(quote_qty|qty|time_in_force|post_only|client_order_id)\b")


class OrderForm(SingleValuedForm, forms.Form):
    """The buy/sell form of a market page. Amounts stay strings: the order service parses them against the
    market (tick, step, precisions) and names the field at fault. ``client_order_id`` is a fresh key per form
    shown, so a double submit places one order."""

    side = forms.ChoiceField(choices=Side.choices, initial=Side.BUY, widget=forms.RadioSelect)
    type = forms.ChoiceField(choices=OrderType.choices, initial=OrderType.LIMIT)
    price = forms.CharField(required=False, max_length=40)
    qty = forms.CharField(required=False, max_length=40)
    quote_qty = forms.CharField(required=False, max_length=40)
    time_in_force = forms.ChoiceField(
        choices=[("", "Default (GTC for limit, IOC for market)"), *TimeInForce.choices], required=False
    )
    post_only = forms.BooleanField(required=False, label="Post only (never take)")
    client_order_id = forms.CharField(widget=forms.HiddenInput, max_length=64, initial=_new_request_key)

    def __init__(self, *args, market, **kwargs):
        super().__init__(*args, **kwargs)
        base, quote = market.base.code, market.quote.code
        self.fields["price"].label = f"Price ({quote})"
        self.fields["qty"].label = f"Amount ({base})"
        self.fields["quote_qty"].label = f"Spend ({quote}, market buys instead of an amount)"
        for name in ("price", "qty", "quote_qty"):
            self.fields[name].widget.attrs.update({"inputmode": "decimal", "autocomplete": "off"})

    def page_words(self, message: str) -> str:
        """A service message in this form's words: the API's field names (``qty``, ``quote_qty``, ...) become the
        labels the page shows ("Amount (BTC)", ...)."""
        return _API_NAMES.sub(lambda match: f'"{self._label_of(match.group(0))}"', message)

    def _label_of(self, name: str) -> str:
        field = self.fields.get(name)
        return str(field.label) if field is not None and field.label else name.replace("_", " ").capitalize()

    def order_arguments(self) -> dict:
        """The cleaned form as :func:`apps.orders.services.order_place` arguments (blank fields left out)."""
        data = self.cleaned_data
        return {
            "side": data["side"],
            "type": data["type"],
            "price": data["price"] or None,
            "qty": data["qty"] or None,
            "quote_qty": data["quote_qty"] or None,
            "time_in_force": data["time_in_force"] or None,
            "post_only": data["post_only"],
            "client_order_id": data["client_order_id"],
        }


class WithdrawForm(SingleValuedForm, forms.Form):
    """The withdraw form of the wallet page; ``request_key`` makes a double submit one withdrawal."""

    asset = forms.ChoiceField()
    amount = forms.CharField(
        max_length=40, widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off"})
    )
    address = forms.CharField(max_length=128, strip=False, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    otp = forms.CharField(max_length=32, required=False, label="Code from your authenticator app", widget=OTP_INPUT)
    request_key = forms.CharField(widget=forms.HiddenInput, max_length=64, initial=_new_request_key)

    def __init__(self, *args, assets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["asset"].choices = [(asset.code, f"{asset.code} · {asset.name}") for asset in assets]


class WithdrawalAddressForm(SingleValuedForm, forms.Form):
    """Add an address to the withdrawal address book; ``otp`` is required once a second factor is on. Its fields
    are prefixed ``book-`` (the wallet page also has the withdraw form)."""

    prefix = "book"
    asset = forms.ChoiceField()
    address = forms.CharField(max_length=128, strip=False, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    label = forms.CharField(max_length=100, required=False)
    otp = forms.CharField(max_length=32, required=False, label="Code from your authenticator app", widget=OTP_INPUT)

    def __init__(self, *args, assets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["asset"].choices = [(asset.code, f"{asset.code} · {asset.name}") for asset in assets]


class OtpForm(SingleValuedForm, forms.Form):
    """One code from the authenticator app (or a recovery code)."""

    otp = forms.CharField(max_length=32, label="Code from your authenticator app", widget=OTP_INPUT)


class EmailForm(SingleValuedForm, forms.Form):
    """A new e-mail address for the account, and a current code when the second factor is on."""

    email = forms.EmailField(max_length=254, label="New e-mail address", error_messages={"invalid": EMAIL_INVALID})
    otp = forms.CharField(max_length=32, required=False, label="Code from your authenticator app", widget=OTP_INPUT)
    password = password_again_field()

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("auto_id", "email-form-%s")  # the page's other forms have an otp field too
        super().__init__(*args, **kwargs)


class SecondFactorStartForm(SingleValuedForm, forms.Form):
    """Setting up an authenticator: a current code when one is on already (replacing it), the account's password
    when none is."""

    otp = forms.CharField(max_length=32, required=False, label="Current code", widget=OTP_INPUT)
    password = password_again_field()

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("auto_id", "start-form-%s")
        super().__init__(*args, **kwargs)


def add_domain_error(form: forms.Form, error) -> None:
    """Show a service's :class:`~apps.core.errors.DomainError` next to the fields it names (at the top of the
    form for fields the form does not have, or when it names none), in the form's words when it has
    ``page_words``."""
    words = getattr(form, "page_words", str)
    if not error.fields:
        form.add_error(None, words(error.message))
    for field, message in error.fields.items():
        form.add_error(field if field in form.fields else None, words(message))


AnyForm = TypeVar("AnyForm", bound=forms.Form)


def with_new_key(form: AnyForm, key_field: str, message: str, **kwargs) -> AnyForm:
    """The submitted ``form`` again, with a fresh one-time key in ``key_field`` and ``message`` on top.

    For a form whose key was already used by another request (sent, then changed and sent again):
    nothing was done this time, and sending the form once more makes a new request."""
    data = form.data.copy()  # type: ignore[attr-defined]  # a bound form's data is the request's QueryDict
    data[key_field] = _new_request_key()
    renewed = type(form)(data, **kwargs)
    renewed.is_valid()
    renewed.add_error(None, message)
    return renewed


class HistoryFilterForm(SingleValuedForm, forms.Form):
    """A date range of a history (GET): ``start`` and ``end`` are days, UTC, both included; ``end`` is at most
    :data:`~apps.core.days.LAST_DAY` (9999-12-30)."""

    start = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}), validators=[last_day_validator]
    )

    def clean(self):
        cleaned = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end and end < start:
            self.add_error("end", "Must be on or after the start date.")
        return cleaned

    def bounds(self) -> dict[str, datetime | None]:
        """``{"start", "end"}`` as aware UTC datetimes, ``end`` exclusive (the day after the last day); call after
        validation."""
        start, end = self.cleaned_data.get("start"), self.cleaned_data.get("end")
        return {
            "start": datetime.combine(start, time.min, tzinfo=UTC) if start else None,
            "end": datetime.combine(end + timedelta(days=1), time.min, tzinfo=UTC) if end else None,
        }


class ActivityFilterForm(HistoryFilterForm):
    """The activity page's filters: asset, type (the entry's reason), dates, and the page's cursor."""

    asset = forms.ChoiceField(required=False, error_messages={"invalid_choice": "Not a valid asset code."})
    type = forms.ChoiceField(required=False, choices=[("", "All types"), *EntryReason.choices])
    cursor = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID, widget=forms.HiddenInput)

    field_order = ["asset", "type", "start", "end", "cursor"]

    def __init__(self, *args, assets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["asset"].choices = [("", "All assets"), *((asset.code, asset.code) for asset in assets)]
