"""Statements generated from a model's ``_meta``: set-based INSERT through ``json_populate_recordset`` and
UPDATE through ``unnest``, so one statement writes any number of rows.

An INSERT's rows travel as one JSON parameter (:func:`rows_json`), read back with the table's own
row type: the client dumps one string instead of an array per column (psycopg's array dumper looks
up a dumper for every element). An UPDATE takes one array literal per column (:func:`columns_of`; see
:func:`update_sql` for why).
"""

from collections.abc import Iterable, Sequence
from decimal import Decimal

import orjson
from django.db import connection, models

from apps.ledger.db import array_literal


def column_types(model: type[models.Model], names: Sequence[str]) -> list[tuple[str, str]]:
    """``(column, SQL type)`` of the model fields ``names`` (attribute names, ``market_id`` or ``market``)."""
    by_name = {f.attname: f for f in model._meta.concrete_fields} | {f.name: f for f in model._meta.concrete_fields}
    result = []
    for name in names:
        field = by_name.get(name)
        if field is None:
            raise ValueError(f"{model.__name__}.{name} is not a column")
        db_type = field.rel_db_type(connection) if field.is_relation else field.db_type(connection)
        if db_type is None:
            raise ValueError(f"{model.__name__}.{name} has no column type")
        result.append((str(field.column), db_type))
    return result


def attnames(model: type[models.Model]) -> list[str]:
    """The model's concrete fields' attribute names (``market_id`` for a foreign key), in column order."""
    return [field.attname for field in model._meta.concrete_fields]


def column_names(model: type[models.Model], names: Sequence[str]) -> list[str]:
    """The columns of the model fields ``names``: the keys of :func:`rows_json`'s objects."""
    return [column for column, _ in column_types(model, names)]


def insert_sql(model: type[models.Model], names: Sequence[str]) -> str:
    """``INSERT INTO <table> (<columns>) SELECT <columns> FROM json_populate_recordset(NULL::<table>, %s::json)``.

    One parameter: the rows as :func:`rows_json` writes them, each column read with the
    column's own type (its input function: amounts are exact).
    """
    table = model._meta.db_table
    columns = ", ".join(column_names(model, names))
    return f"INSERT INTO {table} ({columns}) SELECT {columns} FROM json_populate_recordset(NULL::{table}, %s::json)"


def update_sql(model: type[models.Model], names: Sequence[str], *, constant: Sequence[str] = ()) -> str:
    """``UPDATE <table> SET <column> = v.<column>, ... FROM unnest(...) AS v WHERE <pk> = v.<pk>``.

    ``names`` starts with the primary key; one array parameter per name (:func:`columns_of`), cast to
    the column's type. ``constant`` names fields set to one value for all rows (one scalar parameter
    each, before the arrays). Arrays, not :func:`rows_json`: PostgreSQL plans ``unnest`` of the
    arrays it is given for as many rows as they hold, so it reaches the rows to update through the
    primary key; it counts 100 rows for ``json_populate_recordset``, and hash-joined a sequential
    scan of the whole table to them.
    """
    table, pk = model._meta.db_table, model._meta.pk.column
    columns = column_types(model, names)
    fixed = column_types(model, constant)
    sets = [f"{c} = v.{c}" for c, _ in columns if c != pk] + [f"{c} = %s::{t}" for c, t in fixed]
    arrays = ", ".join(f"%s::{db_type}[]" for _, db_type in columns)
    return (
        f"UPDATE {table} t SET {', '.join(sets)} FROM unnest({arrays}) AS v({', '.join(c for c, _ in columns)}) "
        f"WHERE t.{pk} = v.{pk}"
    )


def columns_of(rows: Iterable[Sequence], width: int) -> list[str]:
    """Transpose ``rows`` (each ``width`` values) into ``width`` column arrays (:func:`update_sql`), each as an
    array literal (:func:`apps.ledger.db.array_literal`: enums as their values, amounts exact)."""
    arrays: list[list] = [[] for _ in range(width)]
    for row in rows:
        for array, value in zip(arrays, row, strict=True):
            array.append(value)
    return [array_literal(array) for array in arrays]


def _json_value(value):
    """A value orjson does not write itself: an amount, as its exact digits (``TypeError`` for anything else)."""
    if isinstance(value, Decimal):
        return f"{value:f}"
    raise TypeError(f"{type(value).__name__} is not a column value")


def rows_json(columns: Sequence[str], rows: Iterable[Sequence]) -> str:
    """``rows`` (each a value per name of ``columns``) as the one parameter of :func:`insert_sql` and
    :func:`update_sql`: a JSON array of objects keyed by column. ``Decimal`` amounts travel as exact
    strings (never floats), times in ISO 8601 with their offset, enums (model choices) as their values
    (orjson writes those two itself). Raises ``TypeError`` for a float (orjson would write it as a JSON number,
    which PostgreSQL reads into a numeric column as it is: an inexact amount) and (orjson's ``JSONEncodeError``)
    for a value that neither orjson nor :func:`_json_value` writes."""
    objects = []
    for row in rows:
        if float in map(type, row):  # by exact class, as orjson writes a float (not a subclass) as a number
            raise TypeError(f"a float is not a column value (amounts are Decimal): {row!r}")
        objects.append(dict(zip(columns, row, strict=True)))
    return orjson.dumps(objects, default=_json_value).decode()
