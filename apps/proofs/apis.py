"""REST API of the proof of liabilities (PROOFS.md section 2): the published snapshots and a user's proof."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.base import ScopedApiView, limit_param, path_id

from .documents import snapshot_served
from .selectors import liabilities_proof, snapshots_published


class SnapshotAssetOut(serializers.Serializer):
    code = serializers.CharField()
    decimals = serializers.IntegerField()


class SnapshotHeaderOut(serializers.Serializer):
    version = serializers.IntegerField()
    snapshot_id = serializers.IntegerField()
    block_height = serializers.IntegerField()
    block_hash = serializers.CharField()
    taken_at = serializers.CharField()
    assets = SnapshotAssetOut(many=True)
    leaf_count = serializers.IntegerField()
    root_hash = serializers.CharField()
    root_sums = serializers.ListField(child=serializers.CharField())


class SnapshotOut(serializers.Serializer):
    snapshot = SnapshotHeaderOut()
    snapshot_hash = serializers.CharField()
    signature = serializers.CharField()
    key_id = serializers.CharField()


class PathStepOut(serializers.Serializer):
    side = serializers.CharField(help_text='Where the sibling sits: "left" or "right".')
    hash = serializers.CharField()
    sums = serializers.ListField(child=serializers.CharField())


class LiabilityProofOut(SnapshotOut):
    user_id = serializers.IntegerField()
    nonce = serializers.CharField()
    balances = serializers.ListField(child=serializers.CharField())
    path = PathStepOut(many=True)


class LiabilitySnapshotListApi(ScopedApiView):
    """Every published snapshot, newest first: ``[{"snapshot": S, "snapshot_hash", "signature", "key_id"}]``;
    public."""

    permission_classes = [AllowAny]
    query_params = ("limit",)

    @extend_schema(
        parameters=[OpenApiParameter("limit", int, required=False)], responses=SnapshotOut(many=True), auth=[]
    )
    def get(self, request):
        return Response([snapshot_served(snapshot) for snapshot in snapshots_published(limit=limit_param(request))])


class LiabilityProofApi(ScopedApiView):
    """The authenticated user's proof of inclusion in the latest snapshot (404 when they had no balance in it)."""

    @extend_schema(responses=LiabilityProofOut)
    def get(self, request):
        return Response(liabilities_proof(request.user.id))


class LiabilitySnapshotProofApi(ScopedApiView):
    """The authenticated user's proof of inclusion in one snapshot, by its ``snapshot_id`` (404 for no such snapshot,
    or when they had no balance in it): what ``latest/`` gives for the newest, for any published one."""

    @extend_schema(responses=LiabilityProofOut)
    def get(self, request, snapshot_id: str):
        return Response(liabilities_proof(request.user.id, snapshot_id=path_id(snapshot_id, what="snapshot_id")))
