"""The latency budget against a busy store, the real retriever, and misbehaving policies."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from structlog.testing import capture_logs

from retold import (
    AdmissionDecision,
    AuditLog,
    DeadlineExceeded,
    Disposition,
    FailureReason,
    Principal,
    ProfileBlock,
    Record,
    RecordDraft,
    SQLiteStore,
    Stage,
    TurnMemoryDecision,
    TurnOptions,
    UsageError,
    UtilityAwareConfig,
    UtilityAwareOrchestrator,
)
from retold._deadline import Deadline, bounded_by
from retold._retrieval import HybridRetriever, RetrievalConfig
from retold.testing import (
    FakeRetriever,
    FunctionAdmissionPolicy,
    FunctionGapPolicy,
    HashingEmbedder,
    ManualClock,
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    ScriptedGeneration,
    StoreRetriever,
    SyncScriptedAdmissionPolicy,
    SyncScriptedGapPolicy,
)

pytestmark = pytest.mark.anyio

# Generous: the turn must come back near its budget, not after SQLite's 30 s busy timeout.
FAR_BELOW_BUSY_TIMEOUT_S = 5.0
ENDLESS_SQL = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c"
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "busy.db"


@pytest.fixture
def file_store(path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path)
    yield store
    store.close()


class LockHolder:
    """Another connection holding SQLite's write lock until released (a busy store)."""

    def __init__(self, path: Path) -> None:
        self.conn: sqlite3.Connection | None = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False
        )
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self.conn is not None:
            self.conn.execute("ROLLBACK")
            self.conn.close()
            self.conn = None


async def turn(
    orch: UtilityAwareOrchestrator,
    scope: Principal,
    retriever: Any,
    *,
    budget: int | None = None,
    session_id: str = "s1",
    turn_index: int = 0,
    draft: Any = None,
    inventory: Sequence[str] | None = None,
) -> TurnMemoryDecision:
    return await orch.prepare_turn(
        scope,
        session_id=session_id,
        turn_index=turn_index,
        turn="Which editor does Alice like in Lisbon?",
        public_context=None,
        profile=ProfileBlock.empty(),
        generate_draft=draft or ScriptedGeneration("the draft"),
        generate_final=ScriptedGeneration("the final"),
        retriever=retriever,
        inventory=inventory,
        options=TurnOptions(latency_budget_ms=budget),
    )


def orchestrator(store: SQLiteStore, gap: Any = None, admission: Any = None, **config: Any) -> Any:
    return UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom", **config),
        gap_policy=gap or ScriptedGapPolicy([("preference", "Alice editor Lisbon")]),
        admission_policy=admission or ScriptedAdmissionPolicy("all"),
    )


# -- the store seam ---------------------------------------------------------------------


def test_a_read_past_its_deadline_is_interrupted(file_store: SQLiteStore) -> None:
    """A statement that would run forever stops at its deadline with DeadlineExceeded."""
    with bounded_by(Deadline.after(0.05, kind="budget")):
        with pytest.raises(DeadlineExceeded) as info:
            file_store.query(ENDLESS_SQL)
    assert info.value.kind == "budget"
    assert file_store.query("SELECT 1 AS one") == [{"one": 1}]  # the pool is still usable


def test_lock_waits_are_clamped_to_the_deadline(file_store: SQLiteStore, path: Path) -> None:
    """Under a deadline a write waits for another process's lock only as long as is left."""
    holder = LockHolder(path)
    try:
        t0 = time.monotonic()
        with bounded_by(Deadline.after(0.1)):
            with pytest.raises(DeadlineExceeded):
                with file_store.write() as w:
                    w.execute("INSERT INTO retold_meta (key, value) VALUES ('k', 'v')")
        assert time.monotonic() - t0 < FAR_BELOW_BUSY_TIMEOUT_S
        # Reads never queue behind the held lock (WAL, read connections).
        assert file_store.query("SELECT count(*) AS n FROM records") == [{"n": 0}]
    finally:
        holder.release()
    with file_store.write() as w:  # and the store's own lock was given back
        w.execute("INSERT INTO retold_meta (key, value) VALUES ('k', 'v')")


# -- the turn ----------------------------------------------------------------------------


async def test_real_retriever_behind_a_lock_holder_keeps_the_budget(
    file_store: SQLiteStore, path: Path, alice: Principal
) -> None:
    """The hybrid retriever needing the write lock (unindexed records) fails closed at the
    budget, and the turn returns before its own decision row could be written."""
    embedder = HashingEmbedder(32)
    retriever = HybridRetriever(file_store, config=RetrievalConfig(), embedder=embedder)
    for i in range(30):  # new records: the entity index and the vectors need writes
        file_store.add(alice, RecordDraft(text=f"Alice likes the vim editor in Lisbon, note {i}"))
    orch = orchestrator(file_store)
    holder = LockHolder(path)
    try:
        t0 = time.monotonic()
        with anyio.fail_after(FAR_BELOW_BUSY_TIMEOUT_S):
            decision = await turn(orch, alice, retriever, budget=100)
        assert time.monotonic() - t0 < FAR_BELOW_BUSY_TIMEOUT_S
        assert decision.disposition is Disposition.BASELINE_BUDGET_EXHAUSTED
        assert decision.failure is not None
        assert decision.failure.stage in (Stage.GAP, Stage.RETRIEVAL)
        assert decision.failure.reason is FailureReason.BUDGET_EXHAUSTED
        assert decision.response == "the draft"
        assert orch.audit.writer.pending() == 1  # handed over, not yet written: lock held
    finally:
        holder.release()
    await orch.flush()
    rows = AuditLog(file_store).decision_rows()
    assert [r["id"] for r in rows] == [decision.decision_id]
    assert rows[0]["failure_reason"] == "budget_exhausted"


async def test_slow_inventory_sql_is_interrupted_at_the_gap_timeout(
    file_store: SQLiteStore, alice: Principal
) -> None:
    """A slow inventory query ends the gap stage at its timeout, and its SQL is stopped."""
    ended = threading.Event()
    errors: list[BaseException] = []

    def inventory_fn(store: SQLiteStore, scope: Principal) -> list[str]:
        try:
            store.query(ENDLESS_SQL)
        except BaseException as exc:
            errors.append(exc)
            raise
        finally:
            ended.set()
        return []

    orch = UtilityAwareOrchestrator(
        file_store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom", gap_timeout_ms=100),
        gap_policy=ScriptedGapPolicy([("preference", "editor")]),
        admission_policy=ScriptedAdmissionPolicy("all"),
        inventory_fn=inventory_fn,
    )
    with anyio.fail_after(FAR_BELOW_BUSY_TIMEOUT_S):
        decision = await turn(orch, alice, StoreRetriever(file_store))
    assert decision.failure is not None
    assert (decision.failure.stage, decision.failure.reason) == (Stage.GAP, FailureReason.TIMEOUT)
    assert "inventory" in decision.failure.detail
    assert ended.wait(FAR_BELOW_BUSY_TIMEOUT_S)  # the abandoned thread's SQL was interrupted
    assert [type(e) for e in errors] == [DeadlineExceeded]


async def test_slow_inventory_under_a_budget_is_a_budget_withholding(
    file_store: SQLiteStore, alice: Principal
) -> None:
    """The same slow inventory with a small budget is withheld as budget_exhausted."""

    def inventory_fn(store: SQLiteStore, scope: Principal) -> list[str]:
        store.query(ENDLESS_SQL)
        return []

    orch = UtilityAwareOrchestrator(
        file_store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy([("preference", "editor")]),
        admission_policy=ScriptedAdmissionPolicy("all"),
        inventory_fn=inventory_fn,
    )
    with anyio.fail_after(FAR_BELOW_BUSY_TIMEOUT_S):
        decision = await turn(orch, alice, StoreRetriever(file_store), budget=50)
    assert decision.disposition is Disposition.BASELINE_BUDGET_EXHAUSTED
    assert decision.failure is not None
    assert decision.failure.reason is FailureReason.BUDGET_EXHAUSTED


# -- policies the orchestrator cannot preempt ------------------------------------------------

BASE_EXCEPTIONS = [
    pytest.param(asyncio.CancelledError, id="CancelledError"),
    pytest.param(KeyboardInterrupt, id="KeyboardInterrupt"),
    pytest.param(SystemExit, id="SystemExit"),
]


@pytest.mark.parametrize("error", BASE_EXCEPTIONS)
@pytest.mark.parametrize("stage", ["gap", "admission"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_policy_raising_a_base_exception_fails_closed(
    store: SQLiteStore,
    alice: Principal,
    error: type[BaseException],
    stage: str,
    sync: bool,
) -> None:
    """A policy's own CancelledError, KeyboardInterrupt or SystemExit is a policy failure:
    the draft is returned and the turn writes its decision row."""
    store.add(alice, RecordDraft(text="Alice prefers the vim editor in Lisbon"))
    gap_cls = SyncScriptedGapPolicy if sync else ScriptedGapPolicy
    adm_cls = SyncScriptedAdmissionPolicy if sync else ScriptedAdmissionPolicy
    gap: Any = gap_cls([("preference", "vim editor")])
    admission: Any = adm_cls("all")
    if stage == "gap":
        gap = gap_cls([("preference", "vim editor")], error=error())
    else:
        admission = adm_cls("all", error=error())
    orch = orchestrator(store, gap, admission)
    with anyio.fail_after(10):
        decision = await turn(orch, alice, StoreRetriever(store))
    assert decision.response == "the draft"
    assert decision.disposition is Disposition.BASELINE_POLICY_FAILURE
    assert decision.failure is not None
    assert decision.failure.stage is Stage(stage)
    assert decision.failure.reason is FailureReason.EXCEPTION
    assert decision.failure.detail == error.__name__
    assert [r["id"] for r in AuditLog(store).decision_rows()] == [decision.decision_id]


async def test_the_callers_cancellation_still_propagates(
    store: SQLiteStore, alice: Principal
) -> None:
    """Cancelling the turn from outside is not mistaken for a policy failure: no row."""
    started = anyio.Event()
    orch = orchestrator(store, ScriptedGapPolicy(hang=True, on_call=started.set))
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, orch, alice, StoreRetriever(store))
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    await orch.flush()
    assert AuditLog(store).decision_rows() == []


async def test_oversized_admission_output_is_refused_before_validation(
    store: SQLiteStore, alice: Principal
) -> None:
    """300k verdicts fail closed as malformed by their size, naming the field."""
    store.add(alice, RecordDraft(text="Alice prefers the vim editor in Lisbon"))
    huge = {
        "admitted": [],
        "verdicts": [{"record_id": f"r{i}", "reason": "insufficient"} for i in range(300_000)],
    }
    orch = orchestrator(store, admission=ScriptedAdmissionPolicy(output=huge))
    decision = await turn(orch, alice, StoreRetriever(store))
    assert decision.failure is not None
    assert decision.failure.reason is FailureReason.MALFORMED
    assert decision.failure.detail.startswith("verdicts: 300000 items")


async def test_malformed_output_names_the_field_with_policy_text_scrubbed(
    store: SQLiteStore, alice: Principal
) -> None:
    """``malformed`` carries the failing field; a policy-supplied key is reduced to a token."""
    output = {"gaps": [{"category": "preference", "query": "x", "note <script> hi": 1}]}
    orch = orchestrator(store, ScriptedGapPolicy(output=output))
    with capture_logs() as logs:
        decision = await turn(orch, alice, StoreRetriever(store))
    assert decision.failure is not None and decision.failure.reason is FailureReason.MALFORMED
    assert decision.failure.detail == "gaps.0.note_script_hi: extra_forbidden"
    failed = [e for e in logs if e["event"] == "policy_failed"]
    assert failed[0]["detail"] == decision.failure.detail


async def test_unknown_ids_name_the_first_unknown_id(store: SQLiteStore, alice: Principal) -> None:
    """An admission naming an id it was not given says which one, scrubbed."""
    store.add(alice, RecordDraft(text="Alice prefers the vim editor in Lisbon"))
    orch = orchestrator(store, admission=ScriptedAdmissionPolicy("all", also_name=["r-ghost 1"]))
    decision = await turn(orch, alice, StoreRetriever(store))
    assert decision.failure is not None and decision.failure.reason is FailureReason.UNKNOWN_IDS
    assert decision.failure.detail == "1 ids it was not given (first: r-ghost_1)"


async def test_an_async_policy_blocking_the_event_loop_is_reported(
    store: SQLiteStore, alice: Principal
) -> None:
    """An async planner that blocks the loop is logged with the stall's length."""

    async def plan(*args: Any) -> dict[str, Any]:
        time.sleep(0.12)  # noqa: ASYNC251 - the fault under test: blocking inside async
        return {"gaps": []}

    orch = orchestrator(store, FunctionGapPolicy(plan))
    with capture_logs() as logs:
        decision = await turn(orch, alice, StoreRetriever(store))
    assert decision.disposition is Disposition.BASELINE_NO_GAPS
    stalls = [e for e in logs if e["event"] == "policy_blocked_event_loop"]
    assert len(stalls) == 1 and stalls[0]["stall_ms"] >= 100 and stalls[0]["stage"] == "gap"
    assert orch.stalls["blocked_event_loop"] == 1


async def test_an_async_policy_ignoring_cancellation_is_reported_and_discarded(
    store: SQLiteStore, alice: Principal
) -> None:
    """A judge that swallows its cancellation and answers late is a timeout, and logged."""
    record: list[Record] = [store.add(alice, RecordDraft(text="Alice prefers vim in Lisbon"))]

    async def admit(*args: Any) -> AdmissionDecision:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # the fault: it keeps going
                await anyio.sleep(0.15)
        return AdmissionDecision(
            admitted=(record[0].id,),
            verdicts=({"record_id": record[0].id, "reason": "helpful"},),  # type: ignore[arg-type]
        )

    orch = orchestrator(store, admission=FunctionAdmissionPolicy(admit), admission_timeout_ms=50)
    with capture_logs() as logs:
        decision = await turn(orch, alice, StoreRetriever(store))
    assert decision.response == "the draft" and not decision.applied
    assert decision.failure is not None
    assert (decision.failure.stage, decision.failure.reason) == (
        Stage.ADMISSION,
        FailureReason.TIMEOUT,
    )
    assert "after its 50.0 ms deadline" in decision.failure.detail
    ignored = [e for e in logs if e["event"] == "policy_ignored_cancellation"]
    assert len(ignored) == 1 and ignored[0]["stall_ms"] >= 100


# -- the decision write ---------------------------------------------------------------------


async def test_decision_writes_wait_for_the_lock_off_the_turns_path(
    file_store: SQLiteStore, path: Path, alice: Principal
) -> None:
    """With the write lock held elsewhere, turns still return; their rows land together
    once it is released, one per turn."""
    orch = orchestrator(file_store, ScriptedGapPolicy([]))
    holder = LockHolder(path)
    try:
        decisions = [
            await turn(orch, alice, StoreRetriever(file_store), session_id=f"s{i}")
            for i in range(5)
        ]
        assert orch.audit.writer.pending() == 5
    finally:
        holder.release()
    await orch.flush()
    rows = AuditLog(file_store).decision_rows()
    assert sorted(r["id"] for r in rows) == sorted(d.decision_id for d in decisions)
    assert all(r["write_ms"] is not None and r["write_ms"] >= 0 for r in rows)


async def test_a_sessions_next_turn_waits_for_its_previous_row(
    file_store: SQLiteStore, path: Path, alice: Principal
) -> None:
    """The next turn of a session starts only once the previous turn's row is durable."""
    orch = orchestrator(file_store, ScriptedGapPolicy([]))
    holder = LockHolder(path)
    second = ScriptedGeneration("second draft")
    try:
        await turn(orch, alice, StoreRetriever(file_store))
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: turn(orch, alice, StoreRetriever(file_store), turn_index=1, draft=second)
            )
            await wait_all_tasks_blocked()
            assert second.requests == []  # still waiting for turn 0's row
            holder.release()
    finally:
        holder.release()
    assert len(second.requests) == 1
    await orch.flush()
    assert [r["turn_index"] for r in AuditLog(file_store).decision_rows()] == [0, 1]


def test_the_default_inventory_probes_an_index(store: SQLiteStore, alice: Principal) -> None:
    """The inventory reads one index entry per kind, not every record of the principal."""
    from retold._orchestrator import ensure_inventory_index, store_inventory

    store.add(alice, RecordDraft(text="Alice prefers vim", kind="preference"))
    store.add(alice, RecordDraft(text="Alice moved to Lisbon", kind="event"))
    ensure_inventory_index(store)
    assert store_inventory(store, alice) == ["preference", "relationship_or_event"]
    plan = store.query(
        "EXPLAIN QUERY PLAN SELECT 1 FROM records WHERE tenant = ? AND principal = ? "
        "AND kind = ? AND lifecycle = 'active' AND activation = 'conditional'",
        ["acme", "alice", "fact"],
    )
    assert any("inventory_kinds" in str(row["detail"]) for row in plan)


# -- reads on the event loop ---------------------------------------------------------------


def test_an_inline_read_returns_rows_and_never_waits_for_a_lock(
    file_store: SQLiteStore, path: Path
) -> None:
    """A small read runs on the calling thread, even while another process holds the write
    lock (WAL readers do not wait for it)."""
    holder = LockHolder(path)
    try:
        rows = file_store.query_inline("SELECT count(*) AS n FROM records", within_s=1.0)
    finally:
        holder.release()
    assert rows == [{"n": 0}]


def test_inline_reads_never_wait_and_leave_other_reads_their_busy_timeout(
    file_store: SQLiteStore,
) -> None:
    """The event loop's reads come from their own connections, whose busy handler is off
    for good (no per-read toggling); the other reads keep the store's busy timeout."""
    for _ in range(3):
        assert file_store.query_inline("PRAGMA busy_timeout", within_s=1.0) == [{"timeout": 0}]
        assert file_store.query("PRAGMA busy_timeout") == [{"timeout": file_store.busy_timeout_ms}]


def test_an_inline_read_that_runs_long_gives_way_to_a_worker_thread(
    file_store: SQLiteStore,
) -> None:
    """A read past its time slice is interrupted and reports None (run it on a thread)."""
    t0 = time.monotonic()
    assert file_store.query_inline(ENDLESS_SQL, within_s=0.005) is None
    assert time.monotonic() - t0 < FAR_BELOW_BUSY_TIMEOUT_S
    assert file_store.query_inline("SELECT 1 AS one", within_s=1.0) == [{"one": 1}]


def test_an_inline_read_past_the_turns_deadline_raises(file_store: SQLiteStore) -> None:
    """The context's deadline still applies: a read interrupted by it is DeadlineExceeded."""
    with bounded_by(Deadline.after(0.02, kind="budget")):
        with pytest.raises(DeadlineExceeded) as info:
            file_store.query_inline(ENDLESS_SQL, within_s=60.0)
    assert info.value.kind == "budget"


def test_an_inline_read_on_a_locked_memory_store_gives_way() -> None:
    """A ``:memory:`` store reads on its write connection: while another thread holds it,
    the inline read reports None at once instead of waiting."""
    store = SQLiteStore(":memory:")
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.write():
            taken.set()
            done.wait(FAR_BELOW_BUSY_TIMEOUT_S)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(FAR_BELOW_BUSY_TIMEOUT_S)
        assert store.query_inline("SELECT 1 AS one", within_s=1.0) is None
    finally:
        done.set()
        holder.join()
    assert store.query_inline("SELECT 1 AS one", within_s=1.0) == [{"one": 1}]
    store.close()


# -- stages that cannot finish are not started ----------------------------------------------


async def test_a_retrieval_the_budget_cannot_cover_is_not_started(
    store: SQLiteStore, alice: Principal
) -> None:
    """After this retriever took 40 ms, a turn with 10 ms of budget withholds memory at once
    (budget_exhausted) without calling it; a larger budget runs it, and the estimate
    expires so a retriever that got faster is tried again."""
    clock = ManualClock()
    vim = store.add(alice, RecordDraft(text="Alice likes the vim editor", kind="preference"))
    retriever = FakeRetriever([vim], cost_ms=40, clock=clock)
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy([("preference", "editor")]),
        admission_policy=ScriptedAdmissionPolicy("all"),
        clock=clock,
    )
    first = await turn(orch, alice, retriever, turn_index=0)
    assert first.disposition is Disposition.REGENERATED and len(retriever.calls) == 1

    skipped = await turn(orch, alice, retriever, budget=10, turn_index=1)
    assert len(retriever.calls) == 1
    assert skipped.disposition is Disposition.BASELINE_BUDGET_EXHAUSTED
    assert skipped.failure is not None
    assert (skipped.failure.stage, skipped.failure.reason) == (
        Stage.RETRIEVAL,
        FailureReason.BUDGET_EXHAUSTED,
    )
    assert "retrieval takes about 40.0 ms" in skipped.failure.detail
    assert skipped.searches == () and skipped.response == "the draft"

    await turn(orch, alice, retriever, budget=100, turn_index=2)
    assert len(retriever.calls) == 2

    clock.advance(60_000)  # the observations expire
    await turn(orch, alice, retriever, budget=10, turn_index=3)
    assert len(retriever.calls) == 3
    await orch.flush()


async def test_the_draft_runs_in_the_callers_own_task(store: SQLiteStore, alice: Principal) -> None:
    """The draft is awaited in the calling task, not a spawned one: it starts without a
    scheduling round, and the turn carries on the moment it returns."""
    caller = anyio.get_current_task().id
    seen: list[int] = []

    async def draft(request: Any) -> str:
        seen.append(anyio.get_current_task().id)
        return "the draft"

    orch = orchestrator(store, gap=ScriptedGapPolicy([]))
    decision = await turn(orch, alice, StoreRetriever(store), draft=draft)
    assert seen == [caller] and decision.response == "the draft"
    await orch.flush()


def test_a_bounded_reads_lock_wait_is_clamped_to_the_deadline(file_store: SQLiteStore) -> None:
    """A read under a deadline waits for a lock (SQLite's busy timeout) only as long as is
    left, since no progress handler runs during that wait; unbounded reads keep the store's."""
    with bounded_by(Deadline.after(0.2)):
        (row,) = file_store.query("PRAGMA busy_timeout")
    assert 0 < next(iter(row.values())) <= 200
    (row,) = file_store.query("PRAGMA busy_timeout")
    assert next(iter(row.values())) == file_store.busy_timeout_ms


# -- the orchestrator's own task group ---------------------------------------------------


async def test_an_entered_orchestrator_returns_an_empty_gap_turn_without_yielding(
    store: SQLiteStore, alice: Principal, anyio_backend: str
) -> None:
    """Entered, a turn whose planner found no gap before its draft returned lets no other
    task run between the draft and its return; outside, leaving its task group does (on
    asyncio, whose ready tasks run in order; trio shuffles them, so there it may not)."""
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async def run(orch: UtilityAwareOrchestrator, tg: Any) -> bool:
        ran.clear()

        async def draft(_request: Any) -> str:
            await anyio.sleep(0.05)  # the planner (no delay) is long done
            tg.start_soon(other)  # ready to run at the event loop's next scheduling round
            return "the draft"

        decision = await turn(orch, alice, FakeRetriever([]), draft=draft)
        assert decision.disposition is Disposition.BASELINE_NO_GAPS
        assert decision.response == "the draft"
        yielded = ran == ["other"]
        await wait_all_tasks_blocked()
        assert ran == ["other"]
        return yielded

    orch = orchestrator(store, gap=ScriptedGapPolicy([]))
    async with anyio.create_task_group() as tg:
        yielded = await run(orch, tg)  # a task group per turn: its exit is a scheduling round
        assert yielded or anyio_backend == "trio"
        async with orch:
            assert not await run(orch, tg)
            assert not await run(orch, tg)
    await orch.flush()
    assert len(AuditLog(store).decision_rows()) == 3


async def test_an_entered_orchestrator_decides_as_a_plain_one(
    store: SQLiteStore, alice: Principal
) -> None:
    """The same gap turn, entered or not: the same disposition, admitted records, reply."""
    kept = store.add(alice, RecordDraft(text="Alice likes the vim editor in Lisbon")).id
    retriever = StoreRetriever(store)
    plain = await turn(orchestrator(store), alice, retriever, session_id="a")
    entered = orchestrator(store)
    async with entered:
        decision = await turn(entered, alice, retriever, session_id="b")
    for d in (plain, decision):
        assert d.disposition is Disposition.REGENERATED
        assert d.admitted_ids == (kept,) and d.response == "the final"


async def test_cancelling_a_turn_of_an_entered_orchestrator_stops_its_conditional_path(
    store: SQLiteStore, alice: Principal
) -> None:
    """The caller's cancellation reaches the conditional path in the orchestrator's group:
    the block ends at once, and the cancelled turn writes nothing."""
    hanging = ScriptedGapPolicy([("preference", "editor")], delay=3600)
    orch = orchestrator(store, gap=hanging)
    with anyio.fail_after(FAR_BELOW_BUSY_TIMEOUT_S):
        async with orch:
            with anyio.move_on_after(0.1) as scope:
                await turn(orch, alice, FakeRetriever([]), draft=ScriptedGeneration("d"))
            assert scope.cancelled_caught
    await orch.flush()
    assert AuditLog(store).decision_rows() == []


async def test_a_failed_draft_of_an_entered_orchestrator_stops_its_conditional_path(
    store: SQLiteStore, alice: Principal
) -> None:
    """A draft that raises ends the turn with its error and the planner is not waited for."""
    hanging = ScriptedGapPolicy([("preference", "editor")], delay=3600)
    orch = orchestrator(store, gap=hanging)

    async def draft(_request: Any) -> str:
        raise RuntimeError("the model is down")

    with anyio.fail_after(FAR_BELOW_BUSY_TIMEOUT_S):
        async with orch:
            with pytest.raises(RuntimeError, match="the model is down"):
                await turn(orch, alice, FakeRetriever([]), draft=draft)
    await orch.flush()
    [row] = AuditLog(store).decision_rows()
    assert row["disposition"] == "baseline_policy_failure" and row["failure_stage"] == "draft"


async def test_a_crash_of_the_conditional_path_is_the_turns_not_the_groups(
    store: SQLiteStore, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug raising out of the conditional path surfaces from that turn's call; the
    orchestrator's group, and the turns after it, carry on."""
    orch = orchestrator(store)
    original = UtilityAwareOrchestrator._plan_and_retrieve
    calls = 0

    async def crashing(self: Any, *args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise LookupError("a bug")
        await original(self, *args)

    monkeypatch.setattr(UtilityAwareOrchestrator, "_plan_and_retrieve", crashing)
    async with orch:
        with pytest.raises(LookupError, match="a bug"):
            await turn(orch, alice, FakeRetriever([]))
        decision = await turn(orch, alice, FakeRetriever([]), session_id="s2")
        assert decision.disposition is Disposition.BASELINE_NO_CANDIDATES
        with pytest.raises(UsageError, match="already entered"):
            await orch.__aenter__()
