"""``open_store(url)``: one way to open a store, picked by the URL.

* ``postgresql://…`` or ``postgres://…`` opens a :class:`~retold.PostgresStore` (the
  ``postgres`` extra); a ``retold_schema=<name>`` query parameter keeps the tables in that
  PostgreSQL schema and is not passed to the server.
* ``sqlite:///path/to/file.db``, ``sqlite:///:memory:`` or a plain file path opens a
  :class:`~retold.SQLiteStore`.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._errors import InvalidInputError
from ._store import SQLiteStore, Store

__all__ = ["is_postgres_url", "open_store", "scratch_store"]

_PG_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(url: str | Path) -> bool:
    """True when ``url`` names a PostgreSQL database."""
    return isinstance(url, str) and urlsplit(url).scheme.lower() in _PG_SCHEMES


def open_store(url: str | Path, *, must_exist: bool = False, **options: Any) -> Store:
    """Open the store ``url`` names; ``options`` go to the store's constructor.

    Args:
        url: a ``postgresql://`` URL, a ``sqlite://`` URL or a SQLite file path.
        must_exist: refuse to create a new SQLite file (a PostgreSQL database must exist
            anyway; its tables are created on first open).

    Raises:
        InvalidInputError: ``url`` is empty, has an unknown scheme, or names a SQLite file
            that does not exist (``must_exist``) or whose directory does not exist.
        StoreError: the database cannot be opened.
    """
    text = str(url)
    if not text.strip():
        raise InvalidInputError("db", "is empty; pass a file path or a postgresql:// URL")
    if is_postgres_url(text):
        from ._store_postgres import PostgresStore

        parts = urlsplit(text)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = [v for k, v in query if k == "retold_schema"]
        rest = urlencode([(k, v) for k, v in query if k != "retold_schema"])
        clean = urlunsplit(parts._replace(query=rest))
        if schema:
            options.setdefault("schema", schema[-1])
        return PostgresStore(clean, **options)
    scheme = urlsplit(text).scheme.lower()
    if scheme == "sqlite":
        text = text[len("sqlite://") :]
        if text.startswith("/:memory:"):
            text = ":memory:"
    elif "://" in text:
        raise InvalidInputError(
            "db", f"unknown store URL scheme {scheme!r}; use a file path or postgresql://"
        )
    if text != ":memory:":
        path = Path(text)
        if must_exist and not path.exists():
            raise InvalidInputError("db", f"no database at {str(path)!r}")
        if path.parent and not path.parent.exists():
            raise InvalidInputError("db", f"directory {str(path.parent)!r} does not exist")
    return SQLiteStore(text, **options)


@contextmanager
def scratch_store(
    db: str | None, filename: str, *, id_factory: Callable[[], str] | None = None
) -> Iterator[Store]:
    """The store a benchmark writes into, closed (and, when made here, removed) at the end.

    ``db`` is a SQLite file path (kept), None (a temporary file named ``filename``), or a
    ``postgresql://`` URL: then the benchmark writes into a fresh schema of that database,
    dropped afterwards, unless the URL names one with ``retold_schema=`` (kept).
    ``id_factory`` makes the record ids of a store made here (a temporary file or a fresh
    schema), so a run is reproducible; a store the caller names may hold records already,
    and keeps the store's own ids.
    """
    fresh: dict[str, Any] = {"id_factory": id_factory} if id_factory is not None else {}
    if db is not None and is_postgres_url(db):
        from ._store_postgres import PostgresStore

        if "retold_schema=" in db:
            with open_store(db) as kept:
                yield kept
            return
        name = "retold_bench_" + secrets.token_hex(4)
        store = open_store(db + ("&" if "?" in db else "?") + f"retold_schema={name}", **fresh)
        assert isinstance(store, PostgresStore)
        try:
            yield store
        finally:
            try:
                store.drop_schema()
            finally:
                store.close()
        return
    if db is not None:
        with open_store(db) as store:
            yield store
        return
    with tempfile.TemporaryDirectory() as tmp:
        with open_store(str(Path(tmp) / filename), **fresh) as store:
            yield store
