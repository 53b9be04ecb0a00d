"""``retold profile show``: the ambient profile of a principal or of one session."""

from __future__ import annotations

import argparse
from typing import Any

from .._errors import InvalidInputError
from .._profile import ProfileAssembler
from ._common import add_db, add_json, add_scope, emit, open_store, scope_of


def register(sub: Any) -> None:
    profile = sub.add_parser("profile", help="show the ambient profile")
    psub = profile.add_subparsers(dest="command", required=True, metavar="COMMAND")

    show = psub.add_parser(
        "show",
        help="print the profile a new session would get, or a session's stored snapshot",
    )
    add_db(show)
    add_scope(show)
    show.add_argument(
        "--session",
        help="show this session's snapshot (read-only: a session without one is not started)",
    )
    show.add_argument("--max-records", type=int, default=8, help="count bound (default 8)")
    show.add_argument("--token-budget", type=int, default=400, help="token bound (default 400)")
    add_json(show)
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    if args.session is not None and not args.session.strip():
        raise InvalidInputError(
            "session", "must not be empty (leave --session out for a fresh profile)"
        )
    for field in ("max_records", "token_budget"):
        if getattr(args, field) < 0:
            raise InvalidInputError(field, f"must be >= 0, not {getattr(args, field)}")
    with open_store(args, must_exist=True) as store:
        assembler = ProfileAssembler(
            store, max_records=args.max_records, token_budget=args.token_budget
        )
        block = assembler.snapshot(scope, args.session) if args.session is not None else None
        snapshot = block is not None
        if block is None:
            block = assembler.build(scope)
    if args.json:
        emit({**block.model_dump(mode="json"), "snapshot": snapshot})
        return 0
    if args.session is not None and not snapshot:
        print(f"# no snapshot for session {args.session}; showing a fresh assembly")
    print(block.text if block.text else "# (empty profile)")
    print(
        f"# {len(block.record_ids)}/{block.max_records} records, "
        f"{block.token_count}/{block.token_budget} tokens ({block.unit})"
    )
    for record_id, reason in block.excluded.items():
        print(f"# excluded {record_id}: {reason}")
    return 0
