"""REST API of the proof of liabilities (PROOFS.md section 2): the published snapshots and a user's proof."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from apps.api.views import ScopedApiView, limit_param

from .documents import snapshot_served
from .selectors import liabilities_proof, snapshots_published


class LiabilitySnapshotListApi(ScopedApiView):
    """Every published snapshot, newest first: ``[{"snapshot": S, "snapshot_hash", "signature", "key_id"}]``;
    public."""

    permission_classes = [AllowAny]

    @extend_schema(parameters=[OpenApiParameter("limit", int, required=False)], responses=OpenApiTypes.OBJECT, auth=[])
    def get(self, request):
        return Response([snapshot_served(snapshot) for snapshot in snapshots_published(limit=limit_param(request))])


class LiabilityProofApi(ScopedApiView):
    """The authenticated user's proof of inclusion in the latest snapshot (404 when they had no balance in it)."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        return Response(liabilities_proof(request.user.id))
