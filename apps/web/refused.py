"""Post/redirect/get for refused forms: a refused form is kept in the session and shown by the page it came from.

Without it, a refused order or withdrawal leaves the browser on the form's POST URL, and a reload
sends the form again. Instead the view stores what was sent and why it was refused, redirects to
the page (GET), and the page shows the form once more, bound and with its errors; the entry is
removed as it is read, so a second reload shows a fresh form.
"""

from collections.abc import Collection
from typing import TypeVar, cast

from django import forms
from django.http import QueryDict

_PREFIX = "refused-form:"
F = TypeVar("F", bound=forms.Form)
# Never carried over to the page: the page's own form renders a fresh token, and a password is never stored (the
# session is a database row; a review found the password asked again before a security change kept there).
_DROPPED = ("csrfmiddlewaretoken", "password", "old_password", "new_password1", "new_password2")
# Longer values are not kept (no field of these forms takes one): a crafted POST does not grow the session.
KEPT_VALUE_MAX = 1000


def refused_form_keep(request, *, key: str, form: forms.Form) -> None:
    """Keep the refused bound ``form`` (its data and errors) for the next GET of the page named ``key``."""
    sent = cast(QueryDict, form.data)  # a refused form is bound to request.POST
    data = {
        name: [value for value in sent.getlist(name) if len(value) <= KEPT_VALUE_MAX]
        for name in sent
        if name not in _DROPPED
    }
    request.session[_PREFIX + key] = {"data": data, "errors": form.errors.get_json_data()}


def refused_form_pop(request, *, key: str, form_class: type[F], **kwargs) -> F | None:
    """The form kept under ``key``, bound to what was sent and with the errors it was refused with (removed
    from the session); ``None`` when there is none. ``kwargs`` go to ``form_class``."""
    kept = request.session.pop(_PREFIX + key, None)
    if kept is None:
        return None
    data = QueryDict(mutable=True)
    for name, values in kept["data"].items():
        data.setlist(name, values)
    form = form_class(data, **kwargs)
    form.is_valid()  # the form's own checks again (cheap, deterministic); the service's refusals are added below
    for field, errors in kept["errors"].items():
        name = None if field == "__all__" or field not in form.fields else field
        shown: Collection[object] = form.errors.get(field if name else "__all__", [])
        for error in errors:
            if error["message"] not in shown:
                form.add_error(name, error["message"])
    return form
