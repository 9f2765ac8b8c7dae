"""The free text an operator (or a trader) gives for an action: a halt, a freeze, a rejection, an adjustment.

It goes to the audit log and, for some actions (a withdrawal's rejection), to the customer, so it is required
and bounded.
"""

import unicodedata

from .errors import DomainError

MAX_REASON_LENGTH = 500
# Unicode categories: control, format (bidi overrides, zero widths), surrogate, line and paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Letters and symbols that render as nothing (break-it review: a reason of U+3164 alone was accepted and audited as
# blank): the Hangul fillers and the blank Braille pattern.
BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def reason_checked(reason, *, field: str = "reason") -> str:
    """``reason`` without its surrounding whitespace. Raises :class:`DomainError` naming ``field`` when it is not a
    string, blank, longer than :data:`MAX_REASON_LENGTH` characters, or holds a hidden character
    (:func:`hidden_characters_refuse`: PostgreSQL text cannot store NUL, and the others, such as a right-to-left
    override, a zero-width space or a Hangul filler, hide or disguise what the customer or auditor reads)."""
    if not isinstance(reason, str) or not reason.strip():
        raise DomainError("A reason is required.", fields={field: "A reason is required."})
    reason = reason.strip()
    if len(reason) > MAX_REASON_LENGTH:
        message = f"At most {MAX_REASON_LENGTH} characters."
        raise DomainError(message, fields={field: message})
    hidden_characters_refuse(reason, field=field)
    return reason


def hidden_characters_refuse(text: str, *, field: str) -> None:
    """Raise :class:`DomainError` naming ``field`` when ``text`` holds a control or format character other than a
    line break or tab, a line or paragraph separator (Unicode categories Cc, Cf, Cs, Zl, Zp; see :func:`reason_checked`)
    or a character that renders as nothing (:data:`BLANK_LOOKING`)."""
    if any(_hidden(character) for character in text):
        message = "Control and invisible formatting characters are not allowed."
        raise DomainError(message, fields={field: message})


def hidden_characters_shown(text: str) -> str:
    """``text`` with each hidden character :func:`hidden_characters_refuse` refuses (tabs and line breaks stay) written
    as its escape (``\\u001b``), for screens that show what was recorded as it was: an operator reads a failed log-in
    as ``op\\u001berator``, not as ``operator`` (break-it review)."""
    return "".join(f"\\u{ord(character):04x}" if _hidden(character) else character for character in text)


def _hidden(character: str) -> bool:
    """A control, format or separator character (:data:`HIDDEN`) other than a line break or tab, or one of
    :data:`BLANK_LOOKING`."""
    return (unicodedata.category(character) in HIDDEN or character in BLANK_LOOKING) and character not in "\n\r\t"
