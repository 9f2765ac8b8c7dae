"""REST API of the sealed journal (PROOFS.md section 1): keys, block headers, an entry's proof.

Keys and block headers are public (they reveal hashes and counts only); an entry's proof
is served to its owner (a user with a posting in it) and to staff who may (:func:`~apps.ledger.seal.selectors.sees_every_entry`), else a 404.
"""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.base import ScopedApiView, path_id, whole_number
from apps.api.fields import ApiTime
from apps.core.errors import NotFound
from apps.ledger.seal.keys import public_keys
from apps.ledger.seal.selectors import (
    block_served,
    entry_proof,
    journal_block,
    journal_head,
)
from exchange.converters import MAX_ID


class KeyOut(serializers.Serializer):
    """A public key that signs sealed blocks and liabilities snapshots."""

    key_id = serializers.CharField()
    public_key = serializers.CharField(help_text="Ed25519 public key, 32 bytes in hex.")
    created_at = ApiTime()


class KeysOut(serializers.Serializer):
    """Every signing key, oldest first."""

    keys = KeyOut(many=True)


class BlockHeaderOut(serializers.Serializer):
    version = serializers.IntegerField()
    height = serializers.IntegerField()
    previous_hash = serializers.CharField()
    entries_root = serializers.CharField()
    entry_count = serializers.IntegerField()
    sealed_at = serializers.CharField()


class BlockOut(serializers.Serializer):
    block = BlockHeaderOut()
    block_hash = serializers.CharField()
    signature = serializers.CharField()
    key_id = serializers.CharField()


class PostingDocumentOut(serializers.Serializer):
    id = serializers.IntegerField()
    account_id = serializers.IntegerField()
    asset = serializers.CharField()
    amount = serializers.CharField(help_text="Signed, debit positive.")
    balance_after = serializers.CharField()


class EntryDocumentOut(serializers.Serializer):
    version = serializers.IntegerField()
    id = serializers.IntegerField()
    idempotency_key = serializers.CharField()
    reason = serializers.CharField()
    reference_type = serializers.CharField(allow_blank=True)
    reference_id = serializers.CharField(allow_blank=True)
    created_at = serializers.CharField()
    postings = PostingDocumentOut(many=True)


class EntryProofOut(BlockOut):
    entry = EntryDocumentOut()
    leaf_index = serializers.IntegerField()
    tree_size = serializers.IntegerField()
    audit_path = serializers.ListField(child=serializers.CharField())


class KeyListApi(ScopedApiView):
    """Every public key that has signed blocks or liabilities snapshots and is pinned by the settings (the
    signing key's, ``LEDGER_TRUSTED_PUBLIC_KEYS``), oldest first; public."""

    permission_classes = [AllowAny]

    @extend_schema(responses=KeysOut, auth=[])
    def get(self, request):
        return Response(KeysOut({"keys": public_keys()}).data)


class JournalHeadApi(ScopedApiView):
    """The latest sealed block: ``{"block": B, "block_hash", "signature", "key_id"}``; public."""

    permission_classes = [AllowAny]

    @extend_schema(responses=BlockOut, auth=[])
    def get(self, request):
        return Response(block_served(journal_head()))


class JournalBlockApi(ScopedApiView):
    """One sealed block by height: ``{"block": B, "block_hash", "signature", "key_id"}``; public."""

    permission_classes = [AllowAny]

    @extend_schema(responses=BlockOut, auth=[])
    def get(self, request, height: str):
        number = whole_number(height)
        if number is None or number > MAX_ID:
            raise NotFound("No such block.", fields={"height": "No such block."})
        return Response(block_served(journal_block(number)))


class EntryProofApi(ScopedApiView):
    """An entry's inclusion proof in its block (PROOFS.md section 1): to its owner, and to staff who may read every entry (``sees_every_entry``)."""

    @extend_schema(responses=EntryProofOut)
    def get(self, request, id: str):
        entry_id = path_id(id, what="entry")
        return Response(entry_proof(entry_id, user=request.user))
