"""Helpers shared by the command groups."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._errors import InvalidInputError
from .._records import Principal
from .._store import SQLiteStore


def add_db(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument("--db", required=required, help="SQLite database file")


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


def open_store(args: argparse.Namespace, *, must_exist: bool = False) -> SQLiteStore:
    path = Path(args.db)
    if must_exist and not path.exists():
        raise InvalidInputError("db", f"no database at {str(path)!r}")
    if path.parent and not path.parent.exists():
        raise InvalidInputError("db", f"directory {str(path.parent)!r} does not exist")
    return SQLiteStore(path)


def emit(obj: Any) -> None:
    """Print one JSON document (sorted keys, UTF-8 kept readable)."""
    json.dump(obj, sys.stdout, ensure_ascii=False, sort_keys=True, default=str)
    sys.stdout.write("\n")
