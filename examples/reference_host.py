"""The reference host: per-stage kill switches mapped one to one onto UtilityAwareConfig.

Every field of :class:`~retold.UtilityAwareConfig` except the bundle manifest is a flag
(``--gap-enabled/--no-gap-enabled``, ``--shadow/--no-shadow``, ``--gap-timeout-ms N``,
...), so an operator can turn any stage off without a code change. The default is shadow
mode. Turns come from the command line (or stdin, one per line)::

    python examples/reference_host.py --no-shadow --latency-budget-ms 1500 "Where do I live?"
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import structlog
from pydantic import ValidationError

from retold import InvalidInputError, Principal, SQLiteStore, UtilityAwareConfig
from retold.adapters import MemoryChat, OfflineResponder, from_env
from retold.policy.reference import get_bundle

# The kill switches: every config field but the bundle, flag for flag.
SWITCHES = [name for name in UtilityAwareConfig.model_fields if name != "bundle"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Retold reference host.")
    parser.add_argument("--db", type=Path, default=Path(tempfile.mkdtemp()) / "memory.db")
    parser.add_argument("--tenant", default="acme")
    parser.add_argument("--principal", default="alice")
    parser.add_argument("--session", default="s1")
    for name in SWITCHES:
        field = UtilityAwareConfig.model_fields[name]
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool or field.annotation == "bool":
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None
            )
        else:
            parser.add_argument(flag, dest=name, default=None, help=str(field.description or ""))
    parser.add_argument("turns", nargs="*", help="user turns (default: stdin, one per line)")
    return parser


def config_from(args: argparse.Namespace, bundle: Any) -> UtilityAwareConfig:
    """The bundle's configuration with every switch given on the command line applied."""
    overrides: dict[str, Any] = {"shadow": True}
    for name in SWITCHES:
        value = getattr(args, name)
        if value is not None:
            overrides[name] = None if value == "none" else value
    return bundle.config(**overrides)  # validated: a bad value names its field


async def main(argv: Sequence[str]) -> list[str]:
    args = build_parser().parse_args(argv)
    turns = args.turns or [line.strip() for line in sys.stdin if line.strip()]
    scope = Principal(tenant=args.tenant, principal=args.principal)
    out: list[str] = []
    async with AsyncExitStack() as stack:
        model = from_env()
        if model is not None:
            await stack.enter_async_context(model)
        bundle = get_bundle("offline-reference" if model is None else "reference")
        try:
            config = config_from(args, bundle)
        except ValidationError as exc:
            raise SystemExit(
                f"reference_host: error: {InvalidInputError.from_validation_error(exc)}"
            ) from None
        store = stack.enter_context(SQLiteStore(args.db))
        chat = MemoryChat.from_bundle(
            store=store, bundle=bundle, model=model, responder=OfflineResponder(), config=config
        )
        switches = {name: getattr(config, name) for name in SWITCHES}
        print(f"config: {switches}")
        for text in turns:
            reply = await chat.turn(scope, args.session, text)
            d = reply.decision
            assert d is not None
            print(f"> {text}\n{reply.response}\n[{d.disposition.value}; applied={d.applied}]")
            out.append(d.disposition.value)
    return out


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    anyio.run(main, sys.argv[1:])
