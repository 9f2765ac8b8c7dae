"""Celery tasks of the accounts app: sending e-mail (a thin caller of Django's e-mail framework)."""

import smtplib

from celery import shared_task
from django.core.mail import send_mail


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(smtplib.SMTPException, OSError),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=10,
)
def email_send(to: str, subject: str, body: str) -> None:
    """Send one plain-text message to ``to`` from ``DEFAULT_FROM_EMAIL``; a mail server that refuses or does not
    answer is retried with back-off (a retry may, rarely, send a message twice; never none while retries last)."""
    send_mail(subject, body, None, [to])
