"""Only ``apps.ledger`` writes ledger models (DESIGN.md section 1: "Money moves only through
``apps.ledger.services``. No other app creates journal rows or writes a balance").

import-linter cannot say "may read but not write", so this scans the source of every app but the ledger
(tests excepted: they may corrupt a row on purpose to check that reconciliation finds it) for
- an ORM write on a ledger model: ``<Model>.objects...create|update|delete|bulk_*|get_or_create|
  update_or_create|select_for_update`` where ``<Model>`` is imported from ``apps.ledger.models``;
- raw SQL that writes or locks a ``ledger_`` table: ``INSERT INTO``, ``UPDATE``, ``DELETE FROM`` one,
  or a query on one ending ``FOR [NO KEY] UPDATE``.
What it cannot see (``instance.save()`` on a ledger row fetched elsewhere) is left to review.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LEDGER_MODELS = frozenset({"Asset", "Account", "JournalEntry", "Posting", "SigningKey", "JournalBlock", "BlockEntry"})
WRITE_METHODS = frozenset(
    {
        "create",
        "update",
        "delete",
        "bulk_create",
        "bulk_update",
        "get_or_create",
        "update_or_create",
        "select_for_update",
    }
)
SQL_WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?ledger_\w+", re.IGNORECASE)
SQL_LOCK = re.compile(r"\bledger_\w+\b[\s\S]*\bFOR\s+(?:NO\s+KEY\s+)?UPDATE\b", re.IGNORECASE)


def ledger_writes(source: str) -> list[str]:
    """The ledger writes in one module's source, as ``"line N: what"`` strings (empty when it has none)."""
    tree = ast.parse(source)
    models = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "apps.ledger.models":
            models |= {alias.asname or alias.name for alias in node.names if alias.name in LEDGER_MODELS}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITE_METHODS:
            root = _chain_root(node.func.value)
            if root in models and _has_objects(node.func.value):
                found.append(f"line {node.lineno}: {root}.objects...{node.func.attr}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SQL_WRITE.search(node.value) or SQL_LOCK.search(node.value):
                found.append(f"line {node.lineno}: SQL {' '.join(node.value.split())[:80]!r}")
    return found


def _chain_root(node: ast.expr) -> str | None:
    """The name an attribute/call chain starts from (``Account`` in ``Account.objects.filter(...).update``)."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _has_objects(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Attribute) and node.attr == "objects":
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def app_modules() -> list[Path]:
    """Every module of every app but the ledger, tests excepted."""
    return sorted(
        path
        for path in (ROOT / "apps").rglob("*.py")
        if path.relative_to(ROOT).parts[1] != "ledger" and "tests" not in path.relative_to(ROOT).parts
    )


def test_only_the_ledger_writes_ledger_models():
    offences = {}
    for path in app_modules():
        name = path.relative_to(ROOT).as_posix()
        found = ledger_writes(path.read_text())
        if found:
            offences[name] = found
    assert offences == {}, "Only apps.ledger writes ledger models (DESIGN.md section 1): " + repr(offences)


@pytest.mark.parametrize(
    "source",
    [
        "from apps.ledger.models import Account\nAccount.objects.filter(id=1).update(balance=0)\n",
        "from apps.ledger.models import Posting as P\nP.objects.bulk_create([])\n",
        "from apps.ledger.models import Asset\nAsset.objects.select_for_update().get(code='BTC')\n",
        "SQL = 'UPDATE ledger_account SET balance = balance + %s WHERE id = %s'\n",
        'SQL = """INSERT INTO "ledger_posting" (entry_id) VALUES (%s)"""\n',
        "SQL = 'SELECT id FROM ledger_account WHERE id = ANY(%s) FOR NO KEY UPDATE'\n",
        "SQL = 'delete from ledger_journalentry'\n",
    ],
)
def test_the_scan_finds_a_ledger_write(source):
    assert ledger_writes(source)


@pytest.mark.parametrize(
    "source",
    [
        "from apps.ledger.models import Account\nAccount.objects.filter(id=1).values('balance')\n",
        "from apps.orders.models import Order\nOrder.objects.filter(id=1).update(status='x')\n",
        "SQL = 'SELECT balance FROM ledger_account WHERE id = %s'\n",
        "SQL = 'UPDATE orders_order SET status = %s FOR UPDATE'\n",
    ],
)
def test_the_scan_passes_reads_and_other_tables(source):
    assert ledger_writes(source) == []
