"""Statements generated from a model's ``_meta``: set-based INSERT and UPDATE through ``unnest``.

Each column is sent as one array parameter cast to the column's own type
(``field.db_type``), so one statement writes any number of rows and a prepared
statement's plan does not depend on how many.
"""

import enum
from collections.abc import Iterable, Sequence

from django.db import connection, models


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


def insert_sql(model: type[models.Model], names: Sequence[str]) -> str:
    """``INSERT INTO <table> (<columns>) SELECT * FROM unnest(%s::<type>[], ...)``: one array per column."""
    columns = column_types(model, names)
    arrays = ", ".join(f"%s::{db_type}[]" for _, db_type in columns)
    return f"INSERT INTO {model._meta.db_table} ({', '.join(c for c, _ in columns)}) SELECT * FROM unnest({arrays})"


def update_sql(model: type[models.Model], names: Sequence[str], *, constant: Sequence[str] = ()) -> str:
    """``UPDATE <table> SET <column> = v.<column>, ... FROM unnest(...) AS v WHERE <pk> = v.<pk>``.

    ``names`` starts with the primary key; each row gives every name's value. ``constant``
    names fields set to one value for all rows (one scalar parameter each, before the arrays).
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


def plain(value):
    """A value as the database takes it: an enum (a model choice) by its value, not its name."""
    return value.value if isinstance(value, enum.Enum) else value


def columns_of(rows: Iterable[Sequence], width: int) -> list[list]:
    """Transpose ``rows`` (each ``width`` values) into ``width`` column arrays, enums as their values."""
    arrays: list[list] = [[] for _ in range(width)]
    for row in rows:
        for array, value in zip(arrays, row, strict=True):
            array.append(plain(value))
    return arrays
