"""Helpers shared by the command groups."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from .._errors import InvalidInputError, StoreError, UsageError
from .._open import is_postgres_url
from .._open import open_store as _open
from .._records import Principal
from .._store import SQLiteStore, Store

DB_HELP = "SQLite database file, or a postgresql:// URL"


def add_db(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--db", required=required, help=DB_HELP)


def add_scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True, help="tenant id (trusted scope)")
    parser.add_argument("--principal", required=True, help="principal id (trusted scope)")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def scope_of(args: argparse.Namespace) -> Principal:
    try:
        return Principal(tenant=args.tenant, principal=args.principal)
    except ValidationError as exc:
        raise InvalidInputError.from_validation_error(exc) from exc


_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_db_path(path: Path, *, must_exist: bool, field: str = "db") -> None:
    """Refuse, before SQLite touches it, a path that is not a database file we may open.

    SQLite would otherwise write a journal next to a device (``--db /dev/null`` leaves
    ``/dev/null-journal``) or fail later with a bare ``OperationalError``. Errors name
    ``field``, the option that gave the path.
    """
    shown = repr(str(path))
    if not path.exists():
        if must_exist:
            raise InvalidInputError(field, f"no database at {shown}")
        if not path.parent.is_dir():
            raise InvalidInputError(field, f"directory {str(path.parent)!r} does not exist")
        return
    if not path.is_file():
        raise InvalidInputError(field, f"{shown} is not a regular file")
    try:
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise InvalidInputError(field, f"cannot read {shown}: {exc.strerror}") from None
    if header and header != _SQLITE_HEADER:
        raise InvalidInputError(field, f"{shown} is not a SQLite database")


def open_store(args: argparse.Namespace, *, must_exist: bool = False, field: str = "db") -> Store:
    """Open ``--db`` (or the option ``field``): a ``postgresql://`` URL (see
    :func:`retold.open_store`) or a file path.

    A path that cannot hold a Retold store is an error naming ``field``.
    """
    value = getattr(args, field)
    if is_postgres_url(value):
        return _open(value)
    path = Path(value)
    _check_db_path(path, must_exist=must_exist, field=field)
    try:
        return SQLiteStore(path)
    except (StoreError, sqlite3.DatabaseError) as exc:
        cause = exc if isinstance(exc, sqlite3.Error) else exc.__cause__
        code = getattr(cause, "sqlite_errorcode", 0) & 0xFF
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise  # another writer holds it: a runtime failure, not bad input
        raise InvalidInputError(
            field, f"cannot open {str(path)!r} as a Retold store: {exc}"
        ) from None


class Counted(Protocol):
    """What a deletion returns (:class:`~retold.Erasure`, :class:`~retold.AuditPrune`)."""

    @property
    def counts(self) -> dict[str, int]: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


def emit_counts(args: argparse.Namespace, result: Counted, headline: str) -> None:
    """Print a deletion's ``result``: JSON with ``--json``, else ``headline``, the row
    counts per table and the reminder to vacuum."""
    if args.json:
        emit(result.model_dump(mode="json"))
        return
    print(f"{headline}: " + ", ".join(f"{table} {n}" for table, n in result.counts.items()))
    print("run `retold memory vacuum` to remove the deleted text from the database files too")


def emit(obj: Any) -> None:
    """Print one JSON document (sorted keys, UTF-8 kept readable).

    Text that is not valid Unicode (a lone surrogate stored before argv was checked) is
    written as a JSON escape, so the output is always valid UTF-8.
    """
    text = json.dumps(obj, ensure_ascii=False, sort_keys=True, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj, ensure_ascii=True, sort_keys=True, default=str)
    sys.stdout.write(text + "\n")


def add_tenant_scope(parser: Any, what: str) -> None:
    """``--tenant T`` or ``--all-tenants``, one of them required (argparse exits 2 without).

    An operator's view never crosses tenants by default: reading every tenant's
    ``what`` is an explicit choice.
    """
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--tenant", help=f"only this tenant's {what} (or --all-tenants)")
    group.add_argument(
        "--all-tenants",
        action="store_true",
        help=f"every tenant's {what} (an operator's view across tenants)",
    )


def add_cutoff(parser: Any, what: str) -> None:
    """``--before DATE`` or ``--older-than-days N`` (one required), and ``--yes``: the
    arguments of a retention command, which removes ``what`` older than the cutoff."""
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--before", help=f"ISO 8601 date or time; {what} earlier go (no zone: UTC)")
    when.add_argument(
        "--older-than-days", type=int, metavar="N", help=f"{what} more than N days ago go"
    )
    parser.add_argument("--yes", action="store_true", help="confirm: pruning cannot be undone")


def cutoff(args: argparse.Namespace) -> datetime:
    """The cutoff :func:`add_cutoff`'s arguments give (UTC when no zone is written)."""
    if args.older_than_days is not None:
        if args.older_than_days < 1:
            raise UsageError(f"--older-than-days must be at least 1, not {args.older_than_days}")
        return datetime.now(UTC) - timedelta(days=args.older_than_days)
    try:
        before = datetime.fromisoformat(args.before)
    except ValueError:
        raise UsageError(
            f"--before must be an ISO 8601 date or time (2026-09-01, 2026-09-01T12:00:00Z), "
            f"not {args.before!r}"
        ) from None
    return before if before.tzinfo is not None else before.replace(tzinfo=UTC)


def confirmed_cutoff(args: argparse.Namespace, doing: str) -> datetime:
    """The cutoff, once ``--yes`` confirms ``doing`` (a usage error without it)."""
    before = cutoff(args)
    if not args.yes:
        raise UsageError(
            f"{doing} before {before.isoformat()} cannot be undone: pass --yes to confirm"
        )
    return before
