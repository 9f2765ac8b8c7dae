"""The scratch database a benchmark runs in: on the development server, dropped and created anew per run.

Not a benchmark itself (``make bench`` runs ``bench/[a-z]*.py``).
"""

import os
from urllib.parse import urlsplit, urlunsplit


def bench_database_url(suffix: str) -> tuple[str, str]:
    """``(development URL, bench URL)``: the same server, database ``<name><suffix>``.

    Also turns the sealer's head witness off (``LEDGER_SEAL_HEAD_WITNESS``) for this process and the engines it
    starts: a benchmark flushes its database between cases, which the witness, rightly, takes for deleted blocks
    and refuses to seal over (as in the test settings, whose rollbacks Redis outlives)."""
    from exchange.settings.environment import load_local_services_env

    load_local_services_env()
    os.environ["LEDGER_SEAL_HEAD_WITNESS"] = "false"
    url = os.environ["DATABASE_URL"]
    parts = urlsplit(url)
    return url, urlunsplit(parts._replace(path=parts.path.rstrip("/") + suffix))


def recreate_database(admin_url: str, bench_url: str, *, drop_only: bool = False) -> None:
    """Drop the bench database (closing its connections) and, unless ``drop_only``, create it empty."""
    import psycopg

    name = urlsplit(bench_url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')
