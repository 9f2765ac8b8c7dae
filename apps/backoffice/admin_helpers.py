"""Small helpers shared by the back-office admin screens."""

import re

from django import forms
from django.http import Http404

from apps.core.errors import DomainError
from exchange.converters import ObjectIdConverter


def numeric_id(object_id: str) -> int:
    """An admin URL's object id as an int; anything else is a 404 (never a 500)."""
    converter = ObjectIdConverter()
    if not re.fullmatch(converter.regex, str(object_id)):
        raise Http404
    try:
        return converter.to_python(str(object_id))
    except ValueError:
        raise Http404 from None


def add_domain_error(form: forms.Form, error: DomainError, field_names: dict[str, str] | None = None) -> None:
    """Show a service's refusal on ``form``: each named field's message on that field (renamed through
    ``field_names``), the rest and the message itself above the form."""
    shown = False
    for field, message in error.fields.items():
        name = (field_names or {}).get(field, field)
        if name in form.fields:
            form.add_error(name, message)
            shown = True
    if not shown:
        form.add_error(None, error.message)


def about(subject: str, message: str) -> str:
    """``message`` about ``subject`` ("Withdrawal #18"), prefixed ``"<subject>: "`` unless it names the subject first
    already ("Withdrawal #18 is already cancelled.", not "Withdrawal #18: Withdrawal #18 is ...")."""
    return message if message.startswith(subject) else f"{subject}: {message}"
