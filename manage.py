#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "exchange.settings.local")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 (read the settings now: a refusal to start is one line, not a traceback)
    except ImproperlyConfigured as exc:
        sys.exit(f"Refusing to start: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
