"""Reconciliation: run every invariant check of DESIGN.md section 5 on one snapshot.

Apps register their checks with :func:`register_check` (invariant number, name and a
function returning the offending rows) and their per-asset figures with
:func:`register_asset_figures`, from their ``AppConfig.ready``. :func:`reconcile`
runs them all in one ``REPEATABLE READ`` read-only transaction, so concurrent
trading cannot produce a false alarm, and returns a :class:`Report`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypeVar

from django.db import connection, transaction

from apps.core.errors import NotFound

from .amounts import format_as_stored
from .models import Asset

DETAILS_LIMIT = 100
# Checks read at most this many offending rows from the database.
ROW_LIMIT = 1000


@dataclass(frozen=True)
class Scope:
    """What a check looks at: every asset, or the given ones."""

    assets: tuple[Asset, ...]
    filtered: bool

    @property
    def asset_ids(self) -> list[int]:
        return [asset.id for asset in self.assets]

    @property
    def entry_params(self) -> list:
        """The parameters of :data:`ENTRY_IN_SCOPE`, in its order."""
        return [self.filtered, self.asset_ids]


ENTRY_IN_SCOPE = (
    "(NOT %s OR EXISTS (SELECT 1 FROM ledger_posting sp WHERE sp.entry_id = e.id AND sp.asset_id = ANY(%s)))"
)
"""A check's condition that the journal entry ``e`` is in scope: any entry when the report is unfiltered, else one
with a posting in the report's assets (one index lookup by ``entry_id``); its parameters are
:attr:`Scope.entry_params`."""

REFERENCE_NUMBER = r"CASE WHEN e.reference_id ~ '^[0-9]{1,18}$' THEN e.reference_id::bigint END"
"""SQL: the journal entry ``e``'s ``reference_id`` as a ``bigint`` when it is a number, else NULL (never a cast error
on a reference written by hand): joined with a business record's primary key, one index lookup per entry."""


@dataclass
class CheckResult:
    """One invariant's outcome; ``details`` names each offending row (at most ``DETAILS_LIMIT``)."""

    name: str
    invariant: int
    ok: bool
    details: list[dict] = field(default_factory=list)
    offending: int = 0

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "invariant": self.invariant,
            "ok": self.ok,
            "offending": self.offending,
            "details": self.details,
        }


@dataclass
class Report:
    """The result of :func:`reconcile`: ``ok`` when every check passed; per-asset figures as strings."""

    ok: bool
    checks: list[CheckResult]
    assets: dict[str, dict]

    def as_dict(self) -> dict:
        return {"ok": self.ok, "checks": [check.as_dict() for check in self.checks], "assets": self.assets}


CheckFunction = Callable[[Scope], list[dict]]
# A check as written: called with the scope alone by reconcile, possibly with keyword-only options elsewhere.
Check = TypeVar("Check", bound=CheckFunction)
FiguresFunction = Callable[[Scope], dict[str, dict]]
HoldSource = Callable[[Scope], dict[tuple[int, int], Decimal]]


@dataclass(frozen=True)
class _Check:
    invariant: int
    name: str
    run: CheckFunction


_checks: list[_Check] = []
_figures: list[FiguresFunction] = []
_hold_sources: list[HoldSource] = []
_backed_reasons: set[str] = set()


def query_rows(sql: str, params: list) -> list[dict]:
    """Run a check's query; each row as ``{column: value}``."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        columns = [column.name for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def format_amounts(rows: list[dict], *columns: str) -> list[dict]:
    """Render the named Decimal columns at each row's asset precision (its ``decimals`` column, then dropped); a
    value finer than that keeps every digit (:func:`~apps.ledger.amounts.format_as_stored`), never rounded away."""
    for row in rows:
        decimals = row.pop("decimals")
        for column in columns:
            if isinstance(row.get(column), Decimal):
                row[column] = format_as_stored(row[column], decimals)
    return rows


def register_check(*, invariant: int, name: str) -> Callable[[Check], Check]:
    """Register ``run(scope) -> [offending row, ...]`` as the check ``name`` of ``invariant`` (1 to 9); the
    function is returned as it is (a check may take keyword-only options beyond ``scope``)."""

    def decorator(run: Check) -> Check:
        if not any(check.name == name for check in _checks):
            _checks.append(_Check(invariant, name, run))
            _checks.sort(key=lambda check: check.invariant)
        return run

    return decorator


def register_asset_figures(function: FiguresFunction) -> FiguresFunction:
    """Register ``function(scope) -> {asset code: {figure: "amount"}}``; the dicts are merged per asset."""
    if function not in _figures:
        _figures.append(function)
    return function


def register_hold_source(function: HoldSource) -> HoldSource:
    """Register what explains held funds (invariant 4): ``function(scope) -> {(user id, asset id): amount}``.

    Each app that holds funds (open orders, pending withdrawals) reports the remaining
    holds of its live objects; the ledger compares their sum with every ``user_held``.
    """
    if function not in _hold_sources:
        _hold_sources.append(function)
    return function


def hold_sources() -> list[HoldSource]:
    """The registered hold sources (see :func:`register_hold_source`)."""
    return list(_hold_sources)


def register_backed_reasons(*reasons: str) -> None:
    """Declare that a registered check looks from every journal entry of these :class:`~apps.ledger.models.EntryReason`
    values back to the business record that justifies it (an app backs the reasons its services post).

    The ledger's check ``entry_reasons_backed`` flags every entry of a reason no app backs.
    """
    _backed_reasons.update(reasons)


def backed_reasons() -> set[str]:
    """The reasons some app's check backs (see :func:`register_backed_reasons`)."""
    return set(_backed_reasons)


def registered_invariants() -> set[int]:
    """The invariant numbers that have at least one registered check."""
    return {check.invariant for check in _checks}


def reconcile(*, asset_code: str | None = None) -> Report:
    """Run every registered check (optionally for one asset) on one consistent snapshot.

    Raises :class:`NotFound` for an unknown ``asset_code``.
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:  # inside a caller's transaction the caller's snapshot rules apply
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        assets = Asset.objects.order_by("code")
        if asset_code is not None:
            assets = assets.filter(code=asset_code)
            if not assets:
                raise NotFound(f"Unknown asset {asset_code}.", fields={"asset": "Unknown asset."})
        scope = Scope(assets=tuple(assets), filtered=asset_code is not None)

        results = []
        for check in _checks:
            rows = check.run(scope)
            results.append(
                CheckResult(check.name, check.invariant, ok=not rows, details=rows[:DETAILS_LIMIT], offending=len(rows))
            )
        figures: dict[str, dict] = {asset.code: {} for asset in scope.assets}
        for function in _figures:
            for code, values in function(scope).items():
                figures.setdefault(code, {}).update(values)
    return Report(ok=all(result.ok for result in results), checks=results, assets=figures)
