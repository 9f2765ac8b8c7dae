"""E-mail to traders: notifications and confirmation links, sent once the transaction that caused them commits.

A message is rendered from ``templates/emails/<name>.txt`` (first line the subject, the rest
the body) inside the caller's transaction, so it tells what that transaction wrote, and is
handed to the Celery task :func:`apps.accounts.tasks.email_send` on commit: a rolled-back
change sends nothing, and a mail server that does not answer is retried by the task without
holding any database lock. Delivery goes through Django's e-mail framework (``EMAIL_URL``).
"""

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.template.loader import render_to_string
from django.utils import timezone

from apps.core.commit import on_commit_robust
from exchange.client_ip import client_ip

log = logging.getLogger(__name__)


def site_url(path: str) -> str:
    """An absolute link to ``path`` (which starts with ``/``) on the exchange's site (``SITE_URL``)."""
    return f"{settings.SITE_URL}{path}"


def _queue(to: str, subject: str, body: str) -> None:
    from .tasks import email_send

    email_send.delay(to, subject, body)


def email_user_on_commit(*, user_id: int, template: str, context: dict) -> bool:
    """Render ``emails/<template>.txt`` with ``context`` (plus ``user``) and queue it to the user's e-mail
    address when the current transaction commits (at once outside one).

    Returns False, and sends nothing, when the user has no e-mail address (logged).
    """
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None or not user.email:
        log.debug("no e-mail address for user %s: %s not sent", user_id, template)
        return False
    email_address_on_commit(to=user.email, template=template, context={**context, "user": user})
    return True


def email_address_on_commit(*, to: str, template: str, context: dict) -> None:
    """Render ``emails/<template>.txt`` with ``context`` and queue it to the address ``to`` (not, or not yet, a
    user's: a link confirming it) when the current transaction commits (at once outside one)."""
    subject, _, body = render_to_string(f"emails/{template}.txt", context).partition("\n")
    on_commit_robust(_queue, to, subject.strip(), body.strip() + "\n")


def login_details(request) -> dict[str, str]:
    """A log-in's ``{"ip_address", "user_agent"}`` (the user agent cut to 200 characters), for its notices.

    The address is the client's as the rate limits and log-in lockouts see it (:func:`exchange.client_ip.client_ip`:
    behind ``TRUSTED_PROXY_COUNT`` proxies, the one they report, not the proxy's own ``REMOTE_ADDR``, nor what the
    client wrote in ``X-Forwarded-For``); both empty without a request.
    """
    if getattr(request, "META", None) is None:
        return {"ip_address": "", "user_agent": ""}
    return {"ip_address": client_ip(request), "user_agent": request.META.get("HTTP_USER_AGENT", "")[:200]}


def login_notify(sender, request, user, **kwargs) -> None:
    """``user_logged_in`` receiver: e-mail the user about a new log-in (time, IP address, browser:
    :func:`login_details`)."""
    email_user_on_commit(
        user_id=user.pk, template="new_login", context={"time": timezone.now(), **login_details(request)}
    )
