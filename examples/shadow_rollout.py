"""A shadow-mode rollout: run in shadow, read the report, then switch on.

1. Shadow: the bundle decides and logs every turn but never injects; users see the draft.
2. Read ``retold decisions report``: how often memory would have been injected, what it
   would have cost in latency, how often a policy failed.
3. Switch on: record the bundle's fitness result in the host's store (the orchestrator
   refuses to serve a bundle without a passing one) and go live if it passed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from contextlib import AsyncExitStack
from importlib.resources import files
from pathlib import Path

import anyio
import structlog

from retold import Principal, SQLiteStore, UnfittedBundleError
from retold._audit import AuditLog
from retold._fitness import record_fitness, run_fitness
from retold.adapters import MemoryChat, OfflineResponder, from_env
from retold.policy.reference import get_bundle

TRAFFIC = [
    ("s1", "I just adopted a greyhound called Biscuit."),
    ("s1", "What's a good first command to teach a dog?"),
    ("s2", "How old is Biscuit likely to be if he's a retired racer?"),
    ("s2", "What's the boiling point of water at altitude?"),
    ("s2", "Remind me, what's my dog's name?"),
]


async def main(db: Path, *, scenarios: Path | None = None) -> dict[str, object]:
    """Run the three phases; returns the shadow report and whether the bundle went live."""
    user = Principal(tenant="acme", principal="dana")
    async with AsyncExitStack() as stack:
        model = from_env()
        if model is not None:
            await stack.enter_async_context(model)
        bundle = get_bundle("offline-reference" if model is None else "reference")
        store = stack.enter_context(SQLiteStore(db))

        print("phase 1: shadow")
        chat = MemoryChat.from_bundle(
            store=store,
            bundle=bundle,
            model=model,
            responder=OfflineResponder(),
            config=bundle.config(shadow=True),
        )
        previous = None
        for session, text in TRAFFIC:
            if previous and previous != session:
                await chat.end_session(user, previous)
            previous = session
            reply = await chat.turn(user, session, text)
            assert reply.decision is not None and not reply.decision.applied
            print(f"  {text!r}: would be {reply.decision.disposition.value}")

        print("phase 2: the report")
        report = AuditLog(store).report()
        print(f"  turns {report.turns}; dispositions {dict(report.dispositions)}")
        print(f"  conditional-memory injection rate (had it been live): {report.injection_rate}")
        print(f"  policy failures: {dict(report.policy_failures)}")

        print("phase 3: switch on")
        directory = scenarios or Path(str(files("retold.policy") / "scenarios" / "test"))
        result = await run_fitness(bundle, directory, model=model, review_owner="memory-team")
        record_fitness(store, result)
        print(f"  fitness verdict {result.verdict} recorded for bundle {result.bundle_sha256[:12]}")
        try:
            live = MemoryChat.from_bundle(
                store=store,
                bundle=bundle,
                model=model,
                responder=OfflineResponder(),
                config=bundle.config(shadow=False),
            )
        except UnfittedBundleError as exc:
            print(f"  staying in shadow: {exc}")
            return {"report": report, "live": False}
        reply = await live.turn(user, "s3", "Remind me, what's my dog's name?")
        assert reply.decision is not None
        print(f"  live: {reply.decision.disposition.value}, applied={reply.decision.applied}")
        return {"report": report, "live": True}


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    parser = argparse.ArgumentParser(description="Shadow-mode rollout.")
    parser.add_argument("--db", type=Path, default=Path(tempfile.mkdtemp()) / "memory.db")
    parser.add_argument(
        "--scenarios",
        type=Path,
        help="fitness scenarios (default: the packaged held-out test split)",
    )
    args = parser.parse_args()
    anyio.run(lambda: main(args.db, scenarios=args.scenarios))
