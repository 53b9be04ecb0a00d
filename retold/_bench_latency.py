"""``retold bench latency``: what the utility-aware orchestrator adds to a turn.

Every figure is wall time of ``UtilityAwareOrchestrator.prepare_turn`` (from the call to its
return, ``time.perf_counter``) on the shipping orchestrator over a real SQLite file: the
real store, the real turn-decision writer, the real inventory query and candidate
verification. What is simulated: the model calls (draft, gap planner, judge,
regeneration) are scripted doubles with chosen delays and faults, and, with
``--retriever hybrid``, the embedder is a deterministic hashing embedder (no model): the
stored vectors, the dense SQL and scoring, the lexical and entity stages and the session
expansion are the real :class:`~retold.HybridRetriever`.

* ``overhead_ms_p50/p95``: full gap turns (gap, retrieval, admission, regeneration), one
  at a time, whose doubles answer at once: the call's wall time minus the time during
  which a double or the retriever was running (the union of their intervals). What is
  left is the orchestrator's own cost: scheduling, validation, the inventory query,
  candidate verification and the hand-over of the decision row. ``retrieval_ms_p50/p95``
  reports the retriever's own time on those turns.
* ``empty_gap_added_ms_p50/p95``: turns whose planner returns no gaps (after 1 ms) before
  the draft (10 ms) finishes, ``--concurrency`` at once: wall time minus the draft's own
  wall time (the target is 0).
* ``budget_overrun_ms_max/p99``: turns with a random ``latency_budget_ms`` in 1..50,
  ``--concurrency`` at once, each with one fault: ``none`` (random short delays), hanging
  async policies (``hang_async``), hanging sync policies (``hang_sync``), raising
  policies (``raise``: an exception, or a policy's own ``CancelledError`` /
  ``KeyboardInterrupt``), malformed output (``malformed``: wrong shape, or 300k
  verdicts), a slow inventory (``slow_inventory``: 500 ms), a slow regeneration
  (``slow_regeneration``). Overrun is wall time beyond draft + budget;
  ``overrun_by_fault`` is the worst per fault kind.
* ``turns_per_second``: full gap turns with instant doubles at ``--concurrency``.

``--records N`` writes N records per principal for two principals (vectors included with
the hybrid retriever). ``--contention`` starts a second *process* that holds write
transactions on the same file for random 50-500 ms periods (with 5-50 ms gaps) for the
whole run. Each turn is its own session (a conversation's next turn comes after its user
read the answer), so the write-before-the-next-turn barrier is not timed here.
``decision_rows_missing`` checks that every turn wrote exactly one decision row. Turns run
through an entered orchestrator (``async with orchestrator:``), as ``MemoryChat`` and the
gateway run them: each turn's conditional path is a task of the orchestrator's own group.

Garbage collection stays on, as in a host. Each measurement starts with a full collection
(``gc.collect()``) and then moves every object alive at that point out of the collector's
reach (``gc.freeze()``, undone when the bench ends), so the bench's own setup (the records
it wrote, the doubles it built before the clock, the 300k-verdict answer of the
``malformed`` fault) is neither charged to some turn as a collection pause nor traversed
by the full collections the turns trigger; those collections are timed, and
``gc_pause_ms_max`` / ``gc_full_collections`` report the longest pause and the number of
full (oldest-generation) collections during the timed turns.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import importlib.util
import json
import multiprocessing
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ._audit import AuditLog, percentile
from ._config import UtilityAwareConfig
from ._errors import InvalidInputError
from ._orchestrator import (
    GenerationRequest,
    TurnOptions,
    UtilityAwareOrchestrator,
    store_inventory,
)
from ._records import Candidate, Principal, ProfileBlock, Record, RecordDraft, RecordKind
from ._retrieval import HybridRetriever, RetrievalConfig, index_entities
from ._store import SQLiteStore, Store
from ._vectors import ensure_vectors
from .testing._policies import (
    Behaviour,
    FakeRetriever,
    HashingEmbedder,
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    SyncScriptedAdmissionPolicy,
    SyncScriptedGapPolicy,
)

__all__ = ["FAULTS", "register", "run_latency_bench"]

_SCOPE = Principal(tenant="bench", principal="latency")
_OTHER = Principal(tenant="bench", principal="neighbour")
_PROFILE = ProfileBlock(text="Answer concisely.", record_ids=("p-bench",))
_TURN = "What should I pack for the trip to Lisbon next week?"
_GAPS = [("preference", "packing preferences for trips"), ("task_state", "Lisbon trip plans")]

#: The fault kinds of the budget measurement (keys of ``overrun_by_fault``).
FAULTS = (
    "none",
    "hang_async",
    "hang_sync",
    "raise",
    "malformed",
    "slow_inventory",
    "slow_regeneration",
)

_WORDS = (
    "trip pack bag shoes jacket rain Lisbon Porto museum train flight hotel beach book "
    "coffee meeting project deadline budget report team dinner friend sister doctor "
    "running garden recipe music concert ticket passport camera charger laptop notes "
    "weekend morning evening plan prefer always never usually likes hates wants needs"
).split()


@functools.cache
def _huge_admission() -> dict[str, Any]:
    """An admission answer of 300k verdicts (built once, before any timing)."""
    return {
        "admitted": [],
        "verdicts": [{"record_id": f"r{i}", "reason": "helpful"} for i in range(300_000)],
    }


def _text(rng: random.Random, i: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 20))]
    return f"Note {i}: " + " ".join(words) + "."


class _Intervals:
    """Start/end times of the doubles' and the retriever's calls during one turn."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def busy(self) -> float:
        """Length of the union of the recorded intervals (seconds)."""
        total, end = 0.0, -1.0
        for a, b in sorted(self.spans):
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total


class _Timed:
    """A generation callback with a fixed delay that records its own wall time."""

    def __init__(
        self,
        text: str,
        delay: float = 0.0,
        hang: bool = False,
        spans: _Intervals | None = None,
    ) -> None:
        self.text, self.delay, self.hang, self.spans = text, delay, hang, spans
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
            t1 = time.perf_counter()
            self.elapsed = t1 - t0
            if self.spans is not None:
                self.spans.spans.append((t0, t1))


class _TimedRetriever:
    """Records the intervals a retriever's calls run in, the retriever itself unchanged.

    Its ``retrieve`` is wrapped on the instance, not behind a wrapper object: the
    orchestrator is handed the retriever itself, as in a host (its candidates are verified
    according to what it is; see ``UtilityAwareOrchestrator._verify``).
    """

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever
        self.spans: _Intervals | None = None
        self.elapsed: list[float] = []
        inner = retriever.retrieve

        async def retrieve(
            scope: Principal, query: str, *, context: str | None = None, limit: int = 8
        ) -> Sequence[Candidate]:
            t0 = time.perf_counter()
            try:
                found: Sequence[Candidate] = await inner(scope, query, context=context, limit=limit)
                return found
            finally:
                t1 = time.perf_counter()
                self.elapsed.append(t1 - t0)
                if self.spans is not None:
                    self.spans.spans.append((t0, t1))

        retriever.retrieve = retrieve


class _TimedPolicy:
    """Wraps an async scripted policy, recording the intervals its calls run in."""

    def __init__(self, inner: Any, spans: _Intervals) -> None:
        self.inner, self.spans = inner, spans
        self.policy_id = inner.policy_id

    async def plan(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await self.inner.plan(*args)
        finally:
            self.spans.spans.append((t0, time.perf_counter()))

    async def admit(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await self.inner.admit(*args)
        finally:
            self.spans.spans.append((t0, time.perf_counter()))


def _hold_locks(path: str, seed: int, stop: Any, started: Any, holds: Any) -> None:
    """The contention process: hold the write lock for 50-500 ms, release for 5-50 ms.

    It ends when told to, or when the bench that started it is gone (never an orphan).
    """
    parent = os.getppid()
    rng = random.Random(seed)
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_contention (id INTEGER PRIMARY KEY, at REAL)")
    while not stop.is_set() and os.getppid() == parent:
        conn.execute("BEGIN IMMEDIATE")
        with holds.get_lock():
            holds.value += 1
        started.set()
        conn.execute("INSERT INTO bench_contention (at) VALUES (?)", [time.time()])
        stop.wait(rng.uniform(0.050, 0.500))
        conn.execute("COMMIT")
        stop.wait(rng.uniform(0.005, 0.050))
    conn.close()


def _orchestrator(
    store: Store,
    gap: Any,
    admission: Any,
    audit: AuditLog,
    inventory_fn: Any = None,
    **config: Any,
) -> UtilityAwareOrchestrator:
    return UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom", **config),
        gap_policy=gap,
        admission_policy=admission,
        audit=audit,
        inventory_fn=inventory_fn,
    )


async def _gather(
    n: int, concurrency: int, job: Callable[[int], Awaitable[None]], pauses: _Monitor
) -> float:
    """Run ``job(0..n-1)`` with at most ``concurrency`` at once; returns the wall time."""
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await job(i)

    pauses.settle()
    t0 = time.perf_counter()
    try:
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return time.perf_counter() - t0
    finally:
        pauses.stop()


def _runqueue_wait_s() -> float | None:
    """Seconds this thread has been runnable but not running (Linux ``schedstat``)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class _Monitor:
    """What the timed turns share with the rest of the machine, while installed.

    Collection pauses (``gc.callbacks``): the longest and the number of full ones; and how
    long the event loop's thread waited for a CPU (runnable, not running: other processes
    or this one's own threads had the cores), summed over the timed turns.
    """

    def __init__(self) -> None:
        self.longest = 0.0
        self.full = 0
        self.cpu_wait: float | None = 0.0
        self._t0 = 0.0
        self._wait0: float | None = None
        self._timing = False

    def __enter__(self) -> _Monitor:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
        gc.unfreeze()

    def settle(self) -> None:
        """Start a measurement with no garbage from the bench's own setup (see module doc);
        pauses and the CPU wait count from here until :meth:`stop`."""
        self._timing = False
        gc.collect()
        gc.freeze()
        self._wait0 = _runqueue_wait_s()
        self._timing = True

    def stop(self) -> None:
        self._timing = False
        end = _runqueue_wait_s()
        if self.cpu_wait is None or end is None or self._wait0 is None:
            self.cpu_wait = None
        else:
            self.cpu_wait += end - self._wait0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if not self._timing:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        self.longest = max(self.longest, time.perf_counter() - self._t0)
        if info["generation"] == 2:
            self.full += 1


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class _Bench:
    def __init__(self, store: Store, retriever: Any, admit: list[str], seed: int) -> None:
        self.store = store
        self.audit = AuditLog(store)
        self.timer = _TimedRetriever(retriever)
        self.admit = admit
        self.rng = random.Random(seed)
        self.turns = 0
        self._session = iter(range(10**9))
        self.pauses = _Monitor()

    async def turn(
        self,
        orch: UtilityAwareOrchestrator,
        *,
        draft: _Timed,
        final: _Timed,
        retriever: Any = None,
        budget: int | None = None,
    ) -> float:
        self.turns += 1
        t0 = time.perf_counter()
        await orch.prepare_turn(
            _SCOPE,
            session_id=f"bench-{next(self._session)}",
            turn_index=0,
            turn=_TURN,
            public_context="You are a travel assistant.",
            profile=_PROFILE,
            generate_draft=draft,
            generate_final=final,
            retriever=retriever or self.timer.retriever,
            options=TurnOptions(latency_budget_ms=budget),
        )
        return time.perf_counter() - t0

    async def overhead(self, turns: int) -> tuple[list[float], list[float]]:
        spans = _Intervals()
        orch = _orchestrator(
            self.store,
            _TimedPolicy(ScriptedGapPolicy(_GAPS), spans),
            _TimedPolicy(ScriptedAdmissionPolicy(self.admit), spans),
            self.audit,
        )
        self.timer.spans = spans
        out: list[float] = []
        self.timer.elapsed.clear()
        self.pauses.settle()
        async with orch:
            for _ in range(turns):
                spans.spans.clear()
                wall = await self.turn(
                    orch, draft=_Timed("draft", spans=spans), final=_Timed("final", spans=spans)
                )
                out.append(max(0.0, wall - spans.busy()))
        self.pauses.stop()
        self.timer.spans = None
        return out, list(self.timer.elapsed)

    async def empty_gap(self, turns: int, concurrency: int) -> list[float]:
        orch = _orchestrator(
            self.store, ScriptedGapPolicy([], delay=0.001), ScriptedAdmissionPolicy(), self.audit
        )
        added: list[float] = []

        async def job(i: int) -> None:
            draft = _Timed("draft", delay=0.010)
            wall = await self.turn(orch, draft=draft, final=_Timed("final"))
            added.append(max(0.0, wall - draft.elapsed))

        async with orch:
            await _gather(turns, concurrency, job, self.pauses)
        return added

    def _faulty(self, fault: str, behaviours: list[Behaviour]) -> tuple[Any, Any, dict[str, Any]]:
        rng = self.rng

        def beh(**kw: Any) -> Behaviour:
            b = Behaviour(delay=rng.uniform(0, 0.015), **kw)
            behaviours.append(b)
            return b

        gap_kw: dict[str, Any] = {}
        adm_kw: dict[str, Any] = {}
        sync = fault == "hang_sync" or (fault == "none" and rng.random() < 0.25)
        extra: dict[str, Any] = {}
        stage = rng.choice(["gap", "admission"])
        target = gap_kw if stage == "gap" else adm_kw
        if fault in ("hang_async", "hang_sync"):
            target["hang"] = True
        elif fault == "raise":
            target["error"] = rng.choice(
                [RuntimeError("policy exploded"), asyncio.CancelledError(), KeyboardInterrupt()]
            )
        elif fault == "malformed":
            if stage == "gap":
                target["output"] = {"gaps": "nope"}
            else:
                target["output"] = _huge_admission()
        elif fault == "slow_inventory":

            def slow(store: Store, scope: Principal) -> list[str]:
                time.sleep(0.5)
                return store_inventory(store, scope)

            extra["inventory_fn"] = slow
        gap_cls = SyncScriptedGapPolicy if sync else ScriptedGapPolicy
        adm_cls = SyncScriptedAdmissionPolicy if sync else ScriptedAdmissionPolicy
        gap = gap_cls(_GAPS, behaviour=beh(**gap_kw))
        admission = adm_cls(self.admit, behaviour=beh(**adm_kw))
        return gap, admission, extra

    async def budget(
        self, turns: int, concurrency: int
    ) -> tuple[list[float], dict[str, float], dict[str, int]]:
        behaviours: list[Behaviour] = []
        overrun: list[float] = []
        by_fault: dict[str, float] = {}
        counts: dict[str, int] = {}

        # Built before the clock runs: constructing doubles is the bench's cost, not a turn's.
        plans = []
        for i in range(turns):
            fault = FAULTS[i % len(FAULTS)]
            gap, admission, extra = self._faulty(fault, behaviours)
            orch = _orchestrator(
                self.store,
                gap,
                admission,
                self.audit,
                gap_timeout_ms=60_000,
                retrieval_timeout_ms=60_000,
                admission_timeout_ms=60_000,
                **extra,
            )
            draft = _Timed("draft", delay=self.rng.uniform(0, 0.010))
            final = _Timed(
                "final",
                delay=0.5 if fault == "slow_regeneration" else self.rng.uniform(0, 0.010),
            )
            plans.append((fault, orch, draft, final, self.rng.randint(1, 50)))

        async def job(i: int) -> None:
            fault, orch, draft, final, budget = plans[i]
            async with orch:
                wall = await self.turn(orch, draft=draft, final=final, budget=budget)
            late = max(0.0, wall - draft.elapsed - budget / 1000) * 1000
            overrun.append(late)
            by_fault[fault] = max(by_fault.get(fault, 0.0), late)
            counts[fault] = counts.get(fault, 0) + 1

        try:
            await _gather(turns, concurrency, job, self.pauses)
        finally:
            for b in behaviours:
                b.release()
        return overrun, by_fault, counts

    async def throughput(self, turns: int, concurrency: int) -> float:
        orch = _orchestrator(
            self.store, ScriptedGapPolicy(_GAPS), ScriptedAdmissionPolicy(self.admit), self.audit
        )

        async def job(i: int) -> None:
            await self.turn(orch, draft=_Timed("draft"), final=_Timed("final"))

        async with orch:
            return await _gather(turns, concurrency, job, self.pauses)


def _populate(store: Store, records: int, *, embedder: HashingEmbedder | None) -> list[Record]:
    """Write ``records`` records for each of two principals (and their vectors).

    Returns the bench principal's first eight records.
    """
    rng = random.Random(11)
    mine: list[Record] = []
    for scope in (_SCOPE, _OTHER):
        kinds = [RecordKind.PREFERENCE, RecordKind.FACT, RecordKind.EVENT, RecordKind.TASK]
        for start in range(0, records, 500):
            drafts = [
                RecordDraft(
                    text=_text(rng, i),
                    kind=kinds[i % len(kinds)],
                    session_id=f"history-{i // 20}",
                )
                for i in range(start, min(records, start + 500))
            ]
            written = store.add_batch(scope, drafts)
            if scope == _SCOPE and len(mine) < 8:
                # Only a few are needed; holding 20k record models would slow every
                # collection of the timed turns that follow.
                mine.extend(written[: 8 - len(mine)])
        index_entities(store, scope)
        if embedder is not None:
            anyio.run(ensure_vectors, store, scope, embedder)
    return mine


async def _run(
    store: Store,
    retriever: Any,
    records: list[Record],
    turns: int,
    concurrency: int,
    seed: int,
) -> dict[str, Any]:
    admit = [r.id for r in records[:2]]
    bench = _Bench(store, retriever, admit, seed)
    pauses = bench.pauses
    with pauses:
        overhead, retrieval = await bench.overhead(turns)
        added = await bench.empty_gap(turns, concurrency)
        overrun, by_fault, counts = await bench.budget(turns, concurrency)
        wall = await bench.throughput(turns, concurrency)
    await anyio.to_thread.run_sync(bench.audit.flush)
    rows = store.query(
        "SELECT count(*) AS n FROM turn_decisions WHERE tenant = ? AND principal = ?",
        [_SCOPE.tenant, _SCOPE.principal],
    )[0]["n"]

    def ms(values: list[float]) -> list[float]:
        return [v * 1000 for v in values]

    return {
        "turns": turns,
        "concurrency": concurrency,
        "overhead_ms_p50": _r(percentile(ms(overhead), 50)),
        "overhead_ms_p95": _r(percentile(ms(overhead), 95)),
        "retrieval_ms_p50": _r(percentile(ms(retrieval), 50)),
        "retrieval_ms_p95": _r(percentile(ms(retrieval), 95)),
        "empty_gap_added_ms_p50": _r(percentile(ms(added), 50)),
        "empty_gap_added_ms_p95": _r(percentile(ms(added), 95)),
        "budget_overrun_ms_max": _r(max(overrun, default=0.0)),
        "budget_overrun_ms_p99": _r(percentile(overrun, 99)),
        "overrun_by_fault": {k: _r(v) for k, v in sorted(by_fault.items())},
        "turns_by_fault": dict(sorted(counts.items())),
        "turns_per_second": round(turns / wall, 1) if wall > 0 else None,
        "decision_rows_missing": bench.turns - int(rows),
        "gc_pause_ms_max": _r(pauses.longest * 1000),
        "gc_full_collections": pauses.full,
        "loop_cpu_wait_ms": _r(None if pauses.cpu_wait is None else pauses.cpu_wait * 1000),
    }


def run_latency_bench(
    turns: int = 200,
    concurrency: int = 8,
    *,
    retriever: str = "hybrid",
    records: int = 1000,
    contention: bool = False,
    path: str | Path | None = None,
    backend: str = "asyncio",
    seed: int = 7,
) -> dict[str, Any]:
    """Run the four measurements against a SQLite file; returns the report."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(path or Path(tmp) / "latency.db")
        with SQLiteStore(db) as store:
            embedder = HashingEmbedder(384) if retriever == "hybrid" else None
            mine = _populate(store, max(records, 8), embedder=embedder)
            chosen: Any
            if retriever == "hybrid":
                chosen = HybridRetriever(store, config=RetrievalConfig(), embedder=embedder)
            else:
                chosen = FakeRetriever(mine[:6])
            holder: Any = None
            ctx = multiprocessing.get_context("spawn")
            stop, started, holds = ctx.Event(), ctx.Event(), ctx.Value("i", 0)
            if contention:
                holder = ctx.Process(
                    target=_hold_locks, args=(str(db), seed, stop, started, holds), daemon=True
                )
                holder.start()
                # Time nothing before the lock holder is holding.
                if not started.wait(60):
                    holder.kill()
                    raise RuntimeError("the contention process did not start")
            try:
                report: dict[str, Any] = anyio.run(
                    _run, store, chosen, mine, turns, concurrency, seed, backend=backend
                )
            finally:
                if holder is not None:
                    stop.set()
                    holder.join(10)
                    if holder.is_alive():
                        holder.kill()
    report.update(
        backend=backend,
        retriever=retriever,
        records=records,
        contention=contention,
        contention_holds=holds.value,
        numpy=importlib.util.find_spec("numpy") is not None,
    )
    return report


def register(sub: Any) -> None:
    p = sub.add_parser(
        "latency",
        help="orchestration overhead, empty-gap added latency, budget overrun, turns/s",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--turns", type=int, default=200, help="turns per measurement")
    p.add_argument("--concurrency", type=int, default=8, help="turns in flight at once")
    p.add_argument(
        "--retriever",
        choices=["fake", "hybrid"],
        default="hybrid",
        help="hybrid: the real HybridRetriever (lexical, dense, entity, sessions); "
        "fake: scripted candidates",
    )
    p.add_argument(
        "--records", type=int, default=1000, help="records per principal (two principals)"
    )
    p.add_argument(
        "--contention",
        action="store_true",
        help="a second process holds write transactions for random 50-500 ms periods",
    )
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    if args.turns <= 0:
        raise InvalidInputError("turns", "--turns must be > 0")
    if args.concurrency <= 0:
        raise InvalidInputError("concurrency", "--concurrency must be > 0")
    if args.records <= 0:
        raise InvalidInputError("records", "--records must be > 0")
    report = run_latency_bench(
        args.turns,
        args.concurrency,
        retriever=args.retriever,
        records=args.records,
        contention=args.contention,
        backend=args.backend,
    )
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        for key in sorted(report):
            print(f"{key}: {report[key]}")
    return 0
