"""The text log format escapes control characters (break-it review: a NUL from a URL path made the log binary)."""

import logging
import sys

from apps.core.log_text import TextFormatter


def _line(message: str, *args, exc_info=None) -> str:
    record = logging.LogRecord("apps.test", logging.WARNING, __file__, 1, message, args, exc_info)
    return TextFormatter("level=%(levelname)s %(message)s").format(record)


def test_control_characters_of_a_message_and_its_arguments_are_escaped():
    assert _line("admin.bad_parameters path=%s", "/admin/x/\x00/\nforged level=INFO\x7f\u2028") == (
        "level=WARNING admin.bad_parameters path=/admin/x/\\x00/\\x0aforged level=INFO\\x7f\\u2028"
    )


def test_a_traceback_after_the_message_keeps_its_lines():
    try:
        raise ValueError("boom")
    except ValueError:
        line = _line("failed\tonce", exc_info=sys.exc_info())
    first, *rest = line.split("\n")
    assert first == "level=WARNING failed\\x09once" and rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ValueError: boom"
