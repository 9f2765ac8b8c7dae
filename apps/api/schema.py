"""drf-spectacular extensions: the API key scheme and the error responses every operation can return."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, inline_serializer
from rest_framework import serializers

from .permissions import HasScope, view_scope


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>`; keys have the scopes read, trade and/or withdraw.",
        }


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "fields"],
            "properties": {
                "code": {"type": "string", "example": "insufficient_funds"},
                "message": {"type": "string"},
                "fields": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}
ERROR_STATUSES = {
    "400": "Invalid request (the fields say which input).",
    "401": "Not authenticated.",
    "403": "Permission denied (for example a missing scope).",
    "404": "Not found.",
    "405": "Method not allowed.",
    "406": "Not acceptable.",
    "409": "Conflict: invalid state, idempotency conflict, or the Idempotency-Key's first request still running.",
    "415": "Unsupported media type.",
    "429": "Rate limited.",
}


def add_error_responses(result, generator, request, public):
    """Postprocessing hook: every operation documents the API error shape for its 4xx answers."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path in result.get("paths", {}).values():
        for operation in path.values():
            responses = operation.setdefault("responses", {})
            for status, description in ERROR_STATUSES.items():
                responses.setdefault(
                    status,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                )
    return result


class ScopedAutoSchema(AutoSchema):
    """drf-spectacular's schema, with the scope an operation needs (or that it is public) in its description."""

    # drf-spectacular's get_description takes no arguments; the stubs know only DRF's own inspector's.
    def get_description(self) -> str:  # type: ignore[override]
        description = super().get_description() or ""
        if not any(isinstance(cls, type) and issubclass(cls, HasScope) for cls in self.view.permission_classes):
            note = "Public: no authentication needed."
        else:
            note = f"Scope: `{view_scope(self.view, self.method)}`."
        return f"{description}\n\n{note}".strip()


IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
    OpenApiParameter.HEADER,
    required=False,
    description="Up to 255 printable characters, unique per request you mean: the same key and body again "
    "returns the original response; the same key with another body is a 409 idempotency_conflict; the same key "
    "while its first request is still being processed is a 409 idempotency_key_in_use (retry later).",
)


# The paging and time parameters of every list (apps.api.pagination).
LIST_PARAMETERS = [
    OpenApiParameter(
        "cursor",
        str,
        required=False,
        description="The `next` of the previous page: continue the walk there (implies a paginated answer).",
    ),
    OpenApiParameter(
        "paginate",
        str,
        required=False,
        enum=["1", "0"],
        description='1: answer a page `{"results": [...], "next": <cursor or null>}` instead of the plain list.',
    ),
    OpenApiParameter(
        "start", OpenApiTypes.DATETIME, required=False, description="Only rows at or after this time (ISO 8601)."
    ),
    OpenApiParameter("end", OpenApiTypes.DATETIME, required=False, description="Only rows before this time."),
    OpenApiParameter("limit", int, required=False, description="1 to 1000; 100 by default."),
]


def list_of(item: type[serializers.Serializer], name: str) -> PolymorphicProxySerializer:
    """The answer of a list: the plain array of ``item``, or (with ``cursor`` or ``paginate=1``) a page of them."""
    page = inline_serializer(
        name=f"{name}Page",
        fields={
            "results": item(many=True),
            "next": serializers.CharField(allow_null=True, help_text="Cursor of the next page; null after the last."),
        },
    )
    return PolymorphicProxySerializer(
        component_name=f"{name}List", serializers=[item(many=True), page], resource_type_field_name=None, many=False
    )
