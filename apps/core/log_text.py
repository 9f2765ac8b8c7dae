"""The text log format (``LOG_FORMAT=text``, the development default): one line per record, whatever the record says.

A message quotes what clients send (a URL path, a username), and a control character in it went into the log as it
was: a NUL made ``grep`` take the whole log for binary, and a newline could forge a log line (break-it review). The
JSON format escapes them already (deployed settings use it by default).
"""

import logging

_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))} | {
    0x2028: "\\u2028",  # line and paragraph separators end a line for some readers too
    0x2029: "\\u2029",
}


def escaped(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1, U+2028, U+2029) written as its escape (``\\x00``)."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """:class:`logging.Formatter` whose message (the record's text, its arguments filled in) has its control
    characters escaped (:func:`escaped`); a traceback after it keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escaped(record.message)
        return super().formatMessage(record)
