"""ORM queries about one row, compiled once per process: only the row's key changes between runs.

Building and compiling a query with joins and a ``UNION`` costs the ORM more than the database
spends running it (about 1.4 ms against 0.9 ms for a user's permissions, on PostgreSQL); a
chat's first turn makes such queries for every new socket. A query is compiled only where the
key is a plain parameter and nothing else changes from one build to the next; its rows go
through the converters the ORM would apply. The database it runs on is the one the ORM chose
the first time (a router that picks one per call is asked once).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.core.signals import setting_changed
from django.db import connections, models
from django.dispatch import receiver

logger = logging.getLogger("assistant.compiled")
# A column's converters, as the ORM applies them: (position, functions, expression)
Converters = tuple[tuple[int, tuple[Any, ...], Any], ...]
# (alias, SQL, parameters, where the key goes, converters) by (name, model, database); None: not
Compiled = tuple[str, str, tuple[Any, ...], tuple[int, ...], Converters]
_compiled: dict[tuple[Any, ...], Compiled | None] = {}


@receiver(setting_changed)
def _forget_on_change(**kwargs: Any) -> None:
    _compiled.clear()  # (models, databases and backends a query depends on may have changed)


def _sentinels(field: models.Field[Any, Any]) -> tuple[Any, Any] | None:
    """Two stand-in keys no row has, for the model's primary key field (None: a kind not handled)."""
    if isinstance(field, models.UUIDField):
        return uuid.uuid4(), uuid.uuid4()
    if isinstance(field, models.IntegerField | models.AutoField):
        return -2_000_000_011, -2_000_000_017
    if isinstance(field, models.CharField):
        return f"assistant-sentinel-{uuid.uuid4().hex}", f"assistant-sentinel-{uuid.uuid4().hex}"
    return None


def rows_for(
    name: str, row: models.Model, build: Callable[[models.Model], Any]
) -> list[tuple[Any, ...]]:
    """The rows ``build(row)`` returns (a ``values_list`` queryset whose SQL depends only on the
    row's model and its primary key), compiled the first time for the row's model and database.

    A query that holds anything else that changes from one build to the next (the clock, the key
    written otherwise), or has a key of a kind not handled, is built and run by the ORM each
    time, as it would be without this.
    """
    model = row._meta.model  # (through a lazy object, as a request's user, too)
    key = (name, model, row._state.db)
    try:
        entry = _compiled[key]
    except KeyError:
        entry = _compiled[key] = _compile(model, row._state.db, build)
    if entry is None:
        return list(build(row))
    alias, sql, params, where, converters = entry
    connection = connections[alias]
    mine = list(params)
    own_key = model._meta.pk.get_db_prep_value(row.pk, connection, prepared=False)
    for index in where:
        mine[index] = own_key
    with connection.cursor() as cursor:
        cursor.execute(sql, mine)
        rows = cursor.fetchall()
    if not converters:
        return [tuple(values) for values in rows]
    read = []
    for values in map(list, rows):  # (as SQLCompiler.apply_converters)
        for position, functions, expression in converters:
            value = values[position]
            for function in functions:
                value = function(value, expression, connection)
            values[position] = value
        read.append(tuple(values))
    return read


def _compile(
    model: type[models.Model], db: str | None, build: Callable[[models.Model], Any]
) -> Compiled | None:
    """The query built twice, for two stand-in keys: compiled only if the key's positions are all
    that differ between the two."""
    pk = model._meta.pk
    sentinels = _sentinels(pk) if pk is not None else None
    if sentinels is None:
        return None
    try:
        (alias, sql, params, converters), (alias_2, sql_2, params_2, _) = (
            _sql(model, db, build, sentinel) for sentinel in sentinels
        )
    except Exception:  # (a model that cannot be built with a stand-in key: the ORM each time)
        logger.exception("Compiling %s's query once failed; the ORM builds it each time", model)
        return None
    connection = connections[alias]
    first, second = (pk.get_db_prep_value(s, connection, prepared=False) for s in sentinels)
    where = tuple(index for index, value in enumerate(params) if value == first)
    if (
        not where
        or (alias, sql) != (alias_2, sql_2)
        or len(params) != len(params_2)
        or any(
            params_2[index] != (second if index in where else value)
            for index, value in enumerate(params)
        )
    ):
        return None
    return alias, sql, tuple(params), where, converters


def _sql(
    model: type[models.Model], db: str | None, build: Callable[[models.Model], Any], key: Any
) -> tuple[str, str, tuple[Any, ...], Converters]:
    stand_in = model(pk=key)
    stand_in._state.db = db  # (a row's related managers read from its own database)
    queryset = build(stand_in)
    alias = queryset.db
    compiler = queryset.query.get_compiler(using=alias)
    sql, params = compiler.as_sql()
    # as SQLCompiler.results_iter finds them: what the ORM would do to each value read
    found = compiler.get_converters([s[0] for s in compiler.select[0 : compiler.col_count]])
    converters = tuple((position, tuple(f), e) for position, (f, e) in found.items())
    return alias, sql, tuple(params), converters
