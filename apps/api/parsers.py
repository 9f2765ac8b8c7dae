import json
from decimal import Decimal

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant

from apps.core.errors import object_without_duplicates

from .exceptions import PayloadTooLarge


class DecimalJSONParser(JSONParser):
    """JSON with numbers parsed as ``Decimal`` (never float); ``NaN`` and ``Infinity`` are refused.

    A body longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes is refused with :class:`PayloadTooLarge`
    (413) before it is parsed, and one nested deeper than Python's recursion limit is a
    :class:`ParseError` (400) like any other malformed JSON. A key given twice in one object (at any
    depth) is :class:`DuplicateField` (400 ``duplicate_field`` naming it), never "the last one wins".
    """

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", "utf-8")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise PayloadTooLarge()
        try:
            return json.loads(
                raw.decode(encoding),
                parse_float=Decimal,
                parse_constant=strict_constant,
                object_pairs_hook=object_without_duplicates,
            )
        except ValueError as exc:
            raise ParseError(f"JSON parse error: {exc}") from None
        except RecursionError:
            raise ParseError("JSON parse error: the body is nested too deeply.") from None
