"""``retold bench latency``: what the utility-aware orchestrator adds to a turn.

Scripted policies and generation callbacks with known delays (some of them hanging) run
against a real SQLite file, so every figure includes the real audit write:

* ``overhead_ms_p50/p95``: wall time of a full gap turn (gap, retrieval, admission,
  regeneration, audit) whose model calls take no time: pure orchestration cost.
* ``empty_gap_added_ms_p50/p95``: wall time beyond the draft on turns whose planner
  returns no gaps before the draft finishes (the target is 0).
* ``budget_overrun_ms_max/p99``: wall time beyond draft + ``latency_budget_ms`` over
  turns with random budgets, random stage delays and hanging policies (target <= 10 ms).
* ``turns_per_second``: full gap turns with instant model calls at ``--concurrency``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from ._audit import AuditLog, percentile
from ._config import UtilityAwareConfig
from ._errors import InvalidInputError
from ._orchestrator import GenerationRequest, TurnOptions, UtilityAwareOrchestrator
from ._records import Principal, ProfileBlock, Record, RecordDraft, RecordKind
from ._store import SQLiteStore
from .testing._policies import (
    Behaviour,
    FakeRetriever,
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    SyncScriptedAdmissionPolicy,
    SyncScriptedGapPolicy,
)

__all__ = ["register", "run_latency_bench"]

_SCOPE = Principal(tenant="bench", principal="latency")
_PROFILE = ProfileBlock(text="Answer concisely.", record_ids=("p-bench",))


class _Timed:
    """A generation callback with a fixed delay that records its own wall time."""

    def __init__(self, text: str, delay: float = 0.0, hang: bool = False) -> None:
        self.text, self.delay, self.hang = text, delay, hang
        self.elapsed = 0.0

    async def __call__(self, request: GenerationRequest) -> str:
        t0 = time.perf_counter()
        try:
            if self.hang:
                await anyio.sleep_forever()
            if self.delay:
                await anyio.sleep(self.delay)
            return self.text
        finally:
            self.elapsed = time.perf_counter() - t0


def _orchestrator(
    store: SQLiteStore, gap: Any, admission: Any, audit: AuditLog | None = None, **config: Any
) -> UtilityAwareOrchestrator:
    return UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom", **config),
        gap_policy=gap,
        admission_policy=admission,
        audit=audit,
    )


async def _turn(
    orch: UtilityAwareOrchestrator,
    index: int,
    *,
    draft: _Timed,
    final: _Timed,
    retriever: Any,
    budget: int | None = None,
) -> float:
    t0 = time.perf_counter()
    await orch.prepare_turn(
        _SCOPE,
        session_id="bench",
        turn_index=index,
        turn="What should I pack for the trip next week?",
        public_context="You are a travel assistant.",
        profile=_PROFILE,
        generate_draft=draft,
        generate_final=final,
        retriever=retriever,
        inventory=["preference", "task_state"],
        options=TurnOptions(latency_budget_ms=budget),
    )
    return time.perf_counter() - t0


async def _gather(n: int, concurrency: int, job: Callable[[int], Awaitable[None]]) -> float:
    """Run ``job(0..n-1)`` with at most ``concurrency`` at once; returns the wall time."""
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await job(i)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return time.perf_counter() - t0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def _run(
    store: SQLiteStore, records: list[Record], turns: int, concurrency: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    retriever = FakeRetriever(records[:6])
    admit = [r.id for r in records[:2]]
    gaps = [("preference", "packing preferences"), ("task_state", "trip plans")]
    counter = iter(range(10**9))

    # 1. Orchestration overhead: a full gap turn whose model calls take no time.
    full = _orchestrator(store, ScriptedGapPolicy(gaps), ScriptedAdmissionPolicy(admit))
    overhead: list[float] = []
    for _ in range(turns):
        overhead.append(
            await _turn(
                full,
                next(counter),
                draft=_Timed("draft"),
                final=_Timed("final"),
                retriever=retriever,
            )
        )

    # 2. Empty-gap turns whose planner answers before the draft: added latency over it.
    empty = _orchestrator(store, ScriptedGapPolicy([], delay=0.001), ScriptedAdmissionPolicy())
    added: list[float] = []

    async def empty_job(i: int) -> None:
        draft = _Timed("draft", delay=0.010)
        wall = await _turn(
            empty, next(counter), draft=draft, final=_Timed("final"), retriever=retriever
        )
        added.append(max(0.0, wall - draft.elapsed))

    await _gather(turns, concurrency, empty_job)

    # 3. Random budgets against slow and hanging stages (async and sync policies).
    behaviours: list[Behaviour] = []
    overrun: list[float] = []

    async def budget_job(i: int) -> None:
        hang = rng.choice(["gap", "retrieval", "admission", "regeneration", "none"])
        sync = rng.random() < 0.25

        def beh(stage: str) -> Behaviour:
            b = Behaviour(hang=hang == stage, delay=rng.uniform(0, 0.015))
            behaviours.append(b)
            return b

        gap_cls = SyncScriptedGapPolicy if sync else ScriptedGapPolicy
        adm_cls = SyncScriptedAdmissionPolicy if sync else ScriptedAdmissionPolicy
        orch = _orchestrator(
            store,
            gap_cls(gaps, behaviour=beh("gap")),
            adm_cls(admit, behaviour=beh("admission")),
            full.audit,
            gap_timeout_ms=60_000,
            retrieval_timeout_ms=60_000,
            admission_timeout_ms=60_000,
        )
        draft = _Timed("draft", delay=rng.uniform(0, 0.010))
        final = _Timed("final", delay=rng.uniform(0, 0.010), hang=hang == "regeneration")
        budget = rng.randint(0, 50)
        slow_retriever = FakeRetriever(records[:6], behaviour=beh("retrieval"))
        wall = await _turn(
            orch, next(counter), draft=draft, final=final, retriever=slow_retriever, budget=budget
        )
        overrun.append(max(0.0, wall - draft.elapsed - budget / 1000))

    try:
        await _gather(turns, concurrency, budget_job)
    finally:
        for b in behaviours:
            b.release()

    # 4. Throughput of full gap turns at the requested concurrency.
    async def full_job(i: int) -> None:
        await _turn(
            full, next(counter), draft=_Timed("draft"), final=_Timed("final"), retriever=retriever
        )

    wall = await _gather(turns, concurrency, full_job)

    ms = [x * 1000 for x in overhead]
    added_ms = [x * 1000 for x in added]
    overrun_ms = [x * 1000 for x in overrun]
    return {
        "turns": turns,
        "concurrency": concurrency,
        "overhead_ms_p50": _r(percentile(ms, 50)),
        "overhead_ms_p95": _r(percentile(ms, 95)),
        "empty_gap_added_ms_p50": _r(percentile(added_ms, 50)),
        "empty_gap_added_ms_p95": _r(percentile(added_ms, 95)),
        "budget_overrun_ms_max": _r(max(overrun_ms, default=0.0)),
        "budget_overrun_ms_p99": _r(percentile(overrun_ms, 99)),
        "turns_per_second": round(turns / wall, 1) if wall > 0 else None,
    }


def run_latency_bench(
    turns: int = 200,
    concurrency: int = 8,
    *,
    path: str | Path | None = None,
    backend: str = "asyncio",
    seed: int = 7,
) -> dict[str, Any]:
    """Run the four measurements against a SQLite file; returns the report."""
    with tempfile.TemporaryDirectory() as tmp:
        with SQLiteStore(path or Path(tmp) / "latency.db") as store:
            records = [
                store.add(
                    _SCOPE,
                    RecordDraft(
                        text=f"Packing note {i}: bring item {i}", kind=RecordKind.PREFERENCE
                    ),
                )
                for i in range(8)
            ]
            report: dict[str, Any] = anyio.run(
                _run, store, records, turns, concurrency, seed, backend=backend
            )
    report["backend"] = backend
    return report


def register(sub: Any) -> None:
    p = sub.add_parser(
        "latency",
        help="orchestration overhead, empty-gap added latency, budget overrun, turns/s",
    )
    p.add_argument("--turns", type=int, default=200, help="turns per measurement")
    p.add_argument("--concurrency", type=int, default=8, help="turns in flight at once")
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    if args.turns <= 0:
        raise InvalidInputError("turns", "--turns must be > 0")
    if args.concurrency <= 0:
        raise InvalidInputError("concurrency", "--concurrency must be > 0")
    report = run_latency_bench(args.turns, args.concurrency, backend=args.backend)
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        for key in sorted(report):
            print(f"{key}: {report[key]}")
    return 0
