"""``retold mcp``: Retold's memory as an MCP server on stdio (needs the ``mcp`` extra)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from .._errors import UsageError
from ._common import add_db, add_scope, open_store, scope_of


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve memory_search and the review queue to MCP clients on stdio",
        description=(
            "An MCP server on stdin/stdout. Every call is scoped to --tenant/--principal; "
            "no tool argument can name another scope."
        ),
    )
    add_db(p)
    add_scope(p)
    p.add_argument(
        "--bundle",
        default="offline-reference",
        help="bundle whose retrieval settings the search uses (default offline-reference)",
    )
    p.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError("retold mcp needs the mcp extra: pip install 'retold[mcp]'") from None
    from .._mcp import build_mcp_server

    scope = scope_of(args)
    with open_store(args, must_exist=True) as store:
        server = build_mcp_server(store, scope, bundle=args.bundle)
        anyio.run(server.run_stdio_async)
    return 0
