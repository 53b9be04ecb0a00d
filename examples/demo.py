"""The Retold demo (``make demo``): a scripted multi-session conversation through MemoryChat.

With no model configured it runs the offline reference bundle (deterministic lexical gap
planner and judge, rule-based extractor and activation classifier) and a deterministic
local responder, and says so. With ``RETOLD_BASE_URL``/``RETOLD_MODEL`` set it runs the
model-backed reference bundle against that model. It shows, in order:

1. the deploy check: the fitness suite on the committed scenario set, recorded in the store
   (the orchestrator refuses to serve a bundle without a recorded passing result);
2. a preference promoted automatically, and an ambiguous one resolved through the review queue;
3. facts extracted after session 1 and recalled in session 2 by the utility-aware path;
4. an ordinary turn that injects nothing;
5. a turn withheld by ``latency_budget_ms=0``;
6. a shadow-mode turn (decided and logged, never injected);
7. ``retold decisions report``.

It leaves its database where the output says.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from importlib.resources import files
from pathlib import Path
from typing import Any

import anyio
import structlog

from retold import Principal, SQLiteStore, TurnOptions
from retold._activation_review import ReviewQueue
from retold._fitness import record_fitness, run_fitness
from retold.adapters import MemoryChat, OfflineResponder, from_env
from retold.cli import main as retold_cli
from retold.policy.reference import get_bundle

MAYA = Principal(tenant="demo", principal="maya")


def heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 70 - len(text)))


async def turn(chat: MemoryChat, session: str, text: str, **kw: Any) -> Any:
    reply = await chat.turn(MAYA, session, text, **kw)
    d = reply.decision
    print(f"  maya: {text}")
    print("  assistant: " + reply.response.replace("\n", "\n             "))
    gaps = ", ".join(f"{g.category.value}:{g.query!r}" for g in d.gaps) or "none"
    print(f"  -> {d.disposition.value} (applied={d.applied}, shadow={d.shadow}); gaps: {gaps}")
    if d.admitted_ids:
        print(f"     admitted records: {', '.join(d.admitted_ids)}")
    if d.failure is not None:
        print(f"     withheld: {d.failure.stage.value}/{d.failure.reason.value}")
    return reply


async def main(db: Path) -> None:
    async with AsyncExitStack() as stack:
        model = from_env()
        if model is not None:
            await stack.enter_async_context(model)
        bundle = get_bundle("offline-reference" if model is None else "reference")
        store = stack.enter_context(SQLiteStore(db))
        if model is None:
            print("No model configured (RETOLD_BASE_URL/RETOLD_MODEL unset): running the OFFLINE")
            print("reference bundle (lexical gap planner and judge, rule-based extractor and")
            print(
                "activation classifier) with a deterministic local responder, not a language model."
            )
        else:
            print(f"Model: {model.model} at {model.base_url}; bundle: {bundle.name}")

        heading("1. Deploy check: fitness suite on the held-out test scenarios")
        started = time.perf_counter()
        scenarios = Path(str(files("retold.policy") / "scenarios" / "test"))
        result = await run_fitness(bundle, scenarios, model=model, review_owner="demo-oncall")
        record_fitness(store, result)
        for gate in result.gates:
            print(
                f"  {gate.name:32} {gate.value:8.3f}  threshold {gate.threshold:<6} {'pass' if gate.passed else 'FAIL'}"
            )
        print(
            f"  verdict: {result.verdict} in {time.perf_counter() - started:.1f}s; recorded in the store"
        )
        live = result.verdict == "pass"
        if not live:
            print("  the bundle did not pass, so the conversation below runs in shadow mode")

        chat = MemoryChat.from_bundle(
            store=store,
            bundle=bundle,
            model=model,
            responder=OfflineResponder(),
            config=bundle.config(shadow=not live),
        )

        heading("2. Session 1: Maya states preferences and facts")
        await turn(chat, "session-1", "Hi! Please always answer me concisely.")
        await turn(
            chat,
            "session-1",
            "I'm allergic to peanuts, and my dentist is Dr. Okafor on Elm Street.",
        )
        await turn(chat, "session-1", "Bullet points in Portuguese, please.")
        extracted = await chat.end_session(MAYA, "session-1")
        assert extracted is not None
        print(f"  extraction after the session: {len(extracted.written)} records written")
        for event in store.events(MAYA, type="record.activation_decided"):
            print(
                f"  activation: {event.record_id} -> {event.data['decision']} ({event.data.get('reason')})"
            )
        queue = ReviewQueue(store)
        for item in queue.items(tenant=MAYA.tenant, status="pending"):
            print(
                f"  review queue: {item.id} for {item.record_id} ({item.reason}); a reviewer promotes it"
            )
            resolved = queue.resolve(
                item.id, "promote", reviewer="kim@demo", category="answer_style"
            )
            print(f"  review resolved: applied={resolved.applied}")

        heading("3. Session 2: the new profile, recall, an ordinary turn")
        profile = await anyio.to_thread.run_sync(chat.profile.for_session, MAYA, "session-2")
        print("  ambient profile for session 2:\n    " + profile.text.replace("\n", "\n    "))
        await turn(chat, "session-2", "What was my dentist's name again?")
        await turn(chat, "session-2", "What's the capital of Australia?")

        heading("4. A voice turn: latency_budget_ms=0 withholds conditional memory")
        await turn(
            chat,
            "session-2",
            "Can you suggest a snack for my flight?",
            options=TurnOptions(latency_budget_ms=0),
        )

        heading("5. A shadow-mode turn: decided and logged, never injected")
        shadow = MemoryChat.from_bundle(
            store=store,
            bundle=bundle,
            model=model,
            responder=OfflineResponder(),
            config=bundle.config(shadow=True),
        )
        await turn(shadow, "session-3", "Remind me, which dentist do I go to?")

    heading("6. retold decisions report")
    retold_cli(["decisions", "report", "--db", str(db), "--all-tenants"])
    print(f"\nThe demo database is at {db}")


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    parser = argparse.ArgumentParser(description="Run the Retold demo.")
    parser.add_argument(
        "--db", type=Path, default=None, help="database file (default: a new temp dir)"
    )
    args = parser.parse_args()
    target = args.db or Path(tempfile.mkdtemp(prefix="retold-demo-")) / "demo.db"
    anyio.run(main, target)
