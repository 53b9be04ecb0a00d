"""``retold keys``: create, list and revoke the gateway's client keys."""

from __future__ import annotations

import argparse
from typing import Any

from .._keys import KeyFile
from ._common import add_json, emit


def register(sub: Any) -> None:
    keys = sub.add_parser("keys", help="create, list and revoke client keys for retold serve")
    ksub = keys.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add = ksub.add_parser(
        "add", help="create a key for one principal (shown once; the file keeps its sha256)"
    )
    add.add_argument("--keys", required=True, help="the keys file (JSON; created if missing)")
    add.add_argument("--tenant", required=True, help="tenant the key authenticates as")
    add.add_argument("--principal", required=True, help="principal the key authenticates as")
    add_json(add)
    add.set_defaults(handler=_add)

    lst = ksub.add_parser("list", help="list keys (ids and scopes, never the keys)")
    lst.add_argument("--keys", required=True, help="the keys file")
    add_json(lst)
    lst.set_defaults(handler=_list)

    revoke = ksub.add_parser("revoke", help="revoke a key by id (a running gateway notices)")
    revoke.add_argument("--keys", required=True, help="the keys file")
    revoke.add_argument("id", help="the key id (from retold keys list)")
    add_json(revoke)
    revoke.set_defaults(handler=_revoke)


def _add(args: argparse.Namespace) -> int:
    key, entry = KeyFile(args.keys).add(args.tenant, args.principal)
    if args.json:
        emit({"key": key, "tenant": entry.tenant, "principal": entry.principal})
    else:
        print(key)
        print(f"# id {entry.id} for {entry.tenant}/{entry.principal}; shown only this once")
    return 0


def _list(args: argparse.Namespace) -> int:
    entries = KeyFile(args.keys).entries()
    if args.json:
        emit({"keys": [e.public() for e in entries], "count": len(entries)})
        return 0
    for e in entries:
        state = f"revoked {e.revoked_at:%Y-%m-%d %H:%M}" if e.revoked_at else "active"
        print(f"{e.id}  {e.tenant}/{e.principal}  created {e.created_at:%Y-%m-%d %H:%M}  {state}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    entry = KeyFile(args.keys).revoke(args.id)
    if args.json:
        emit(entry.public())
    else:
        print(f"{entry.id} revoked")
    return 0
