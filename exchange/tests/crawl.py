"""Crawl server-rendered pages with the Django test client: every page reachable by links, every POST form.

Used by the security tests (CSRF on every form, the admin closed to non-staff users) so that
a form or page added later is covered without anyone listing it.
"""

import re
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

CSRF_FIELD = "csrfmiddlewaretoken"


@dataclass
class Form:
    """A ``<form method="post">``: the page it is on, where it posts, and its fields (name -> value)."""

    page: str
    action: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def has_csrf_token(self) -> bool:
        """The form carries Django's CSRF token (``{% csrf_token %}``)."""
        return bool(self.fields.get(CSRF_FIELD))


class _PageParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.forms: list[tuple[str, str, dict[str, str]]] = []
        self._form: tuple[str, str, dict[str, str]] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        elif tag == "form":
            self._form = ((attrs.get("method") or "get").lower(), attrs.get("action") or "", {})
        elif tag in ("input", "select", "textarea", "button") and self._form is not None and attrs.get("name"):
            if attrs.get("type") in ("checkbox", "radio") and "checked" not in attrs:
                return
            self._form[2].setdefault(attrs["name"], attrs.get("value") or "")

    def handle_endtag(self, tag):
        if tag == "form" and self._form is not None:
            self.forms.append(self._form)
            self._form = None


def pattern(path: str) -> str:
    """A page's kind: its path with every number replaced (``/admin/ledger/account/<n>/change/``)."""
    return re.sub(r"/\d+(?=/|$)", "/<n>", path)


@dataclass
class Crawl:
    """What a crawl found: the pages (one per kind) that answered 200, and their POST forms (one per action kind)."""

    pages: list[str] = field(default_factory=list)
    forms: dict[str, Form] = field(default_factory=dict)


def crawl(client, start: list[str], *, inside: str, skip: tuple[str, ...] = (), limit: int = 300) -> Crawl:
    """GET ``start`` and every page linked from them whose path starts with ``inside`` (not with ``skip``),
    one page per kind, at most ``limit`` pages; collect every POST form, one per kind of action."""
    found = Crawl()
    seen: set[str] = set()
    queue = deque(start)
    while queue and len(seen) < limit:
        url = queue.popleft()
        kind = pattern(urlsplit(url).path)
        if kind in seen:
            continue
        seen.add(kind)
        response = client.get(url)
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        found.pages.append(url)
        parser = _PageParser()
        parser.feed(response.content.decode())
        for method, action, fields in parser.forms:
            if method != "post":
                continue
            target = urlsplit(urljoin(url, action or url))
            target_url = target.path + (f"?{target.query}" if target.query else "")
            found.forms.setdefault(pattern(target.path), Form(url, target_url, fields))
        for href in parser.links:
            target = urlsplit(urljoin(url, href))
            if target.netloc not in ("", "testserver") or not target.path.startswith(inside):
                continue
            if target.path.startswith(skip) or pattern(target.path) in seen:
                continue
            queue.append(target.path)
    return found


def is_csrf_failure(response) -> bool:
    """Django refused the POST for its missing CSRF token (its 403 page, not a permission check)."""
    return response.status_code == 403 and b"CSRF verification failed" in response.content
