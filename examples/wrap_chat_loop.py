"""Wrap a chat loop with Retold: the smallest real host.

With a model (any OpenAI-compatible server, or Anthropic with RETOLD_PROVIDER=anthropic)::

    RETOLD_BASE_URL=http://localhost:11434/v1 RETOLD_MODEL=llama3.1:8b python examples/wrap_chat_loop.py

With no model it runs the offline reference bundle and a deterministic local responder.
It starts in shadow mode (decide and log, never inject); ``--live`` injects memory, which
the orchestrator allows only once a passing fitness result for the bundle is recorded in
the store (``retold fitness --bundle NAME --db memory.db --record``).
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

from retold import Principal, SQLiteStore
from retold.adapters import MemoryChat, OfflineResponder, from_env
from retold.policy.reference import get_bundle

CONVERSATION = [
    ("monday", "Hi! Please always answer me concisely. My sister Ines lives in Porto."),
    ("monday", "Can you suggest a name for a sourdough starter?"),
    ("thursday", "Where does my sister live again?"),
]


async def main(db: Path, *, live: bool = False) -> list[str]:
    """Run the scripted conversation through the wrapper; returns the responses."""
    alice = Principal(tenant="acme", principal="alice")  # from your authenticated session
    responses: list[str] = []
    async with AsyncExitStack() as stack:
        model = from_env()
        if model is not None:
            await stack.enter_async_context(model)
        bundle = get_bundle("offline-reference" if model is None else "reference")
        print(
            f"bundle: {bundle.name}; model: {model.model if model else 'none: offline responder'}"
        )
        store = stack.enter_context(SQLiteStore(db))
        chat = MemoryChat.from_bundle(
            store=store,
            bundle=bundle,
            model=model,
            responder=OfflineResponder(),
            config=bundle.config(shadow=not live),
        )
        previous: str | None = None
        for session, text in CONVERSATION:
            if previous is not None and session != previous:
                await chat.end_session(alice, previous)  # extraction + activation, off the hot path
            previous = session
            reply = await chat.turn(alice, session, text)
            assert reply.decision is not None
            print(f"[{session}] user: {text}")
            print(f"[{session}] assistant: {reply.response}")
            print(
                f"    decision: {reply.decision.disposition.value}, applied={reply.decision.applied}"
            )
            responses.append(reply.response)
        if previous is not None:
            await chat.end_session(alice, previous)
    print(f"memory is in {db}")
    return responses


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    parser = argparse.ArgumentParser(description="Wrap a chat loop with Retold.")
    parser.add_argument("--db", type=Path, default=Path(tempfile.mkdtemp()) / "memory.db")
    parser.add_argument(
        "--live", action="store_true", help="inject memory (needs a recorded fitness result)"
    )
    args = parser.parse_args()
    anyio.run(lambda: main(args.db, live=args.live))
