"""Streamed CSV downloads (the traders' history exports, the accountants' journal export)."""

import csv
from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse

# A spreadsheet treats a cell starting with one of these as a formula (CSV injection).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    """A file-like object whose ``write`` returns what it is given: csv.writer then yields each line."""

    def write(self, value: str) -> str:
        return value


def text_cell(value: str) -> str:
    """Free text someone typed, as a cell no spreadsheet runs as a formula (prefixed with ``'`` when needed)."""
    return f"'{value}" if value.startswith(_FORMULA_STARTS) else value


def csv_response(filename: str, header: list[str], rows: Iterable[list]) -> StreamingHttpResponse:
    """A streamed ``text/csv`` attachment named ``filename``: ``header``, then each row as it is produced."""
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow(row)

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
