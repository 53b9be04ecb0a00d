"""Per-turn ``latency_budget_ms``: one deployment, a chat surface and a voice surface.

The chat surface accepts a few seconds beyond the draft for memory; the voice surface
accepts none (``latency_budget_ms=0``: the draft plus the ambient profile, no gaps,
retrieval or admission). Same configuration, same code path; only ``TurnOptions`` differs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import structlog

from retold import Principal, SQLiteStore, TurnOptions
from retold.adapters import MemoryChat, OfflineResponder, from_env
from retold.policy.reference import get_bundle

CHAT = TurnOptions(latency_budget_ms=3000)  # a chat window: a few seconds is fine
VOICE = TurnOptions(latency_budget_ms=0)  # a voice reply: nothing beyond the draft


async def main(db: Path, *, live: bool = False) -> dict[str, str]:
    """Ask the same question on both surfaces; returns surface -> disposition."""
    bob = Principal(tenant="acme", principal="bob")
    out: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        model = from_env()
        if model is not None:
            await stack.enter_async_context(model)
        bundle = get_bundle("offline-reference" if model is None else "reference")
        store = stack.enter_context(SQLiteStore(db))
        # Entered, the chat's orchestrator runs each turn's gap planning and retrieval in a
        # task group of its own: a turn with nothing to look up returns with its draft.
        chat = await stack.enter_async_context(
            MemoryChat.from_bundle(
                store=store,
                bundle=bundle,
                model=model,
                responder=OfflineResponder(),
                config=bundle.config(shadow=not live),
            )
        )
        await chat.turn(bob, "s1", "My dentist is Dr. Okafor on Elm Street.")
        await chat.end_session(bob, "s1")
        for surface, options in (("chat", CHAT), ("voice", VOICE)):
            reply = await chat.turn(
                bob, f"{surface}-1", "What was my dentist's name again?", options=options
            )
            d = reply.decision
            assert d is not None
            out[surface] = d.disposition.value
            print(
                f"{surface:5} budget={options.latency_budget_ms} ms -> {d.disposition.value}; "
                f"added {d.timings.added_ms} ms; gaps planned: {len(d.gaps)}"
            )
    return out


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    parser = argparse.ArgumentParser(description="Per-turn latency budgets.")
    parser.add_argument("--db", type=Path, default=Path(tempfile.mkdtemp()) / "memory.db")
    parser.add_argument(
        "--live", action="store_true", help="inject memory (needs a recorded fitness result)"
    )
    args = parser.parse_args()
    anyio.run(lambda: main(args.db, live=args.live))
