"""A real SMTP server (aiosmtpd) in the test process, collecting what Django's SMTP backend sends it."""

import email
import email.policy
import re
import socket
import time
from email.message import EmailMessage

from aiosmtpd.controller import Controller


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Mailbox:
    """An aiosmtpd handler keeping every message it receives (``messages``: parsed, in arrival order)."""

    def __init__(self):
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's hook name)
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        self.messages.append(message)
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, *, timeout: float = 30) -> list[EmailMessage]:
        """Wait until ``count`` messages arrived; return them."""
        deadline = time.monotonic() + timeout
        while len(self.messages) < count:
            if time.monotonic() > deadline:
                subjects = [m["Subject"] for m in self.messages]
                raise AssertionError(f"{len(self.messages)} of {count} messages after {timeout} s: {subjects}")
            time.sleep(0.05)
        return self.messages[:count]

    def with_subject(self, start: str) -> list[EmailMessage]:
        return [message for message in self.messages if message["Subject"].startswith(start)]


def body(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    assert part is not None, "the message has a plain-text part"
    return part.get_content()


def link_path(message: EmailMessage, site_url: str) -> str:
    """The path of the one link to ``site_url`` in the message's body."""
    links = re.findall(re.escape(site_url) + r"(/\S+)", body(message))
    assert len(links) == 1, links
    return links[0]


class SmtpServer:
    """An SMTP server on 127.0.0.1 (a free port), running until :meth:`stop`."""

    def __init__(self):
        self.mailbox = Mailbox()
        self.port = _free_port()
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    @property
    def url(self) -> str:
        """The ``EMAIL_URL`` that points Django at this server."""
        return f"smtp://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.controller.stop()
