"""Helpers of the sealed-journal tests: run the management commands, tamper as a superuser."""

import json
from io import StringIO

from django.core.management import call_command
from django.db import connection


def run_command(name: str, *args: str) -> tuple[int, str]:
    """``(exit code, stdout)`` of ``manage.py name args``."""
    out = StringIO()
    try:
        call_command(name, *args, stdout=out)
    except SystemExit as exit_:
        code = exit_.code  # an int from Django's CommandError; None is a clean exit
        return (code if isinstance(code, int) else 0 if code is None else 1), out.getvalue()
    return 0, out.getvalue()


def verify_json(*args: str) -> tuple[int, dict]:
    code, out = run_command("journal_verify", "--json", *args)
    return code, json.loads(out)


def as_superuser_without_triggers(*statements: tuple[str, list]) -> None:
    """Run raw SQL with every trigger of the journal's tables off (what someone with database rights can
    do), then turn them back on, so only the rows are changed. The test's transaction undoes it all."""
    tables = ["ledger_journalentry", "ledger_posting", "ledger_blockentry", "ledger_journalblock"]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run pending checks so the tables can be altered
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
        for sql, params in statements:
            cursor.execute(sql, params)
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER ALL")
