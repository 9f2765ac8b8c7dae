"""REST API of a trader's second factor (API.md "Second factor for traders"): enrol an authenticator, confirm it.

Both need the ``withdraw`` scope (a browser session has it), so a read-only or trading key
cannot turn a second factor on or replace it. Their answers show a secret (the authenticator's, the recovery
codes) and carry ``Cache-Control: no-store`` (``never_cache``): no browser or proxy cache keeps them.
"""

from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.accounts.enrolment import second_factor_confirm, second_factor_enrol
from apps.accounts.passwords import MAX_PASSWORD_LENGTH
from apps.accounts.reauthentication import password_confirm
from apps.accounts.session_second_factor import session_second_factor_keep

from .base import ScopedApiView
from .fields import InputSerializer, Text
from .idempotency import secret_shown_once


class OtpIn(InputSerializer):
    otp = Text(max_length=32, required=False, help_text="A current code from the authenticator app (second factor on).")
    password = Text(
        max_length=MAX_PASSWORD_LENGTH,
        required=False,
        help_text="The account's password (second factor off: a session alone cannot enrol one).",
    )


class EnrolmentOut(serializers.Serializer):
    """An authenticator secret to enrol, and the otpauth URI that carries it."""

    secret = serializers.CharField(help_text="The authenticator's key, base32 (RFC 4648).")
    otpauth_url = serializers.CharField(help_text="otpauth://totp/... URI, what a QR code for the app carries.")


class ConfirmIn(InputSerializer):
    otp = Text(max_length=32, help_text="A code from the authenticator being enrolled.")


class ConfirmOut(serializers.Serializer):
    """The second factor is on; the recovery codes are shown only here."""

    enabled = serializers.BooleanField()
    recovery_codes = serializers.ListField(
        child=serializers.CharField(), help_text="Ten codes, each usable once in place of a code; shown only here."
    )


@method_decorator(never_cache, name="dispatch")
class OtpEnrolApi(ScopedApiView):
    """``POST /account/otp/``: a new authenticator secret to enrol; with a second factor on, ``otp`` is required."""

    required_scope = "withdraw"

    @extend_schema(request=OtpIn, responses={200: EnrolmentOut})
    def post(self, request):
        """Start enrolling: the base32 secret and its ``otpauth://`` URI. The second factor is on only after
        ``POST /account/otp/confirm/``. 400 ``invalid_otp`` when it is on already and ``otp`` is wrong, 400
        ``invalid_password`` when it is off and ``password`` is missing or wrong."""
        secret_shown_once(request)
        body = OtpIn(data=request.data)
        body.is_valid(raise_exception=True)
        password_confirm(request._request, password=body.validated_data.get("password"))
        enrolment = second_factor_enrol(user_id=request.user.id, otp=body.validated_data.get("otp"))
        return Response(EnrolmentOut(enrolment).data)


@method_decorator(never_cache, name="dispatch")
class OtpConfirmApi(ScopedApiView):
    """``POST /account/otp/confirm/`` with ``otp`` from the new authenticator turns the second factor on."""

    required_scope = "withdraw"

    @extend_schema(request=ConfirmIn, responses={200: ConfirmOut})
    def post(self, request):
        """Turn the second factor on; returns ten recovery codes, shown only here. 400 ``invalid_otp``. Every browser
        session of the user but the caller's is logged out (:mod:`apps.accounts.session_second_factor`)."""
        secret_shown_once(request)
        body = ConfirmIn(data=request.data)
        body.is_valid(raise_exception=True)
        codes = second_factor_confirm(user_id=request.user.id, otp=body.validated_data["otp"])
        session_second_factor_keep(request._request, user_id=request.user.id)  # a browser session's call stays in
        return Response(ConfirmOut({"enabled": True, "recovery_codes": codes}).data)
