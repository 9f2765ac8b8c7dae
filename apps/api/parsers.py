import codecs
import json
from decimal import Decimal

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant


class DecimalJSONParser(JSONParser):
    """JSON with numbers parsed as ``Decimal`` (never float); ``NaN`` and ``Infinity`` are refused."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            return json.load(codecs.getreader(encoding)(stream), parse_float=Decimal, parse_constant=strict_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error: {exc}") from None
