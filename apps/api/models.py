"""Idempotency of API POSTs: the first response to a key is stored and replayed."""

from django.conf import settings
from django.db import models


class IdempotencyRecord(models.Model):
    """The response to a user's POST made with an ``Idempotency-Key``.

    ``request_hash`` fingerprints method, path and body: the same key with another
    request is a conflict. Written in the same transaction as the POST's effect, so a
    stored response always describes something that happened.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_per_user")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.key}"
