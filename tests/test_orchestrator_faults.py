"""Fail-closed behaviour: the fault x stage matrix, the draft, the audit write, cancellation."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs

from retold import (
    AdapterHTTPError,
    AuditLog,
    Disposition,
    FailureReason,
    Generation,
    Principal,
    ProfileBlock,
    Record,
    RecordDraft,
    SQLiteStore,
    Stage,
    StoreError,
    TurnMemoryDecision,
    TurnOptions,
    UtilityAwareConfig,
    UtilityAwareOrchestrator,
)
from retold.testing import (
    Behaviour,
    FakeRetriever,
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    ScriptedGeneration,
    StoreRetriever,
    SyncScriptedAdmissionPolicy,
    SyncScriptedGapPolicy,
    SyncScriptedGeneration,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("task_modes")]

TIMEOUT_MS = 60  # for the timeout and hang faults; the others get a generous timeout
SLACK_MS = 10_000
FAULTS = ["timeout", "exception", "malformed", "unknown_ids", "hang"]
EXPECTED = {
    "timeout": FailureReason.TIMEOUT,
    "hang": FailureReason.TIMEOUT,
    "exception": FailureReason.EXCEPTION,
    "malformed": FailureReason.MALFORMED,
    "unknown_ids": FailureReason.UNKNOWN_IDS,
}


@pytest.fixture
def vim(store: SQLiteStore, alice: Principal) -> Record:
    return store.add(alice, RecordDraft(text="Alice prefers the vim editor", kind="preference"))


@pytest.fixture
def behaviours() -> Iterator[list[Behaviour]]:
    """Collects the doubles' behaviours so blocked worker threads are released afterwards."""
    made: list[Behaviour] = []
    yield made
    for b in made:
        b.release()


def fault_behaviour(fault: str, *, output: Any, made: list[Behaviour]) -> Behaviour:
    """The knobs that produce ``fault`` (``output`` is the malformed/unknown-id answer)."""
    b = Behaviour()
    if fault == "timeout":
        b.delay = 5.0  # far past the stage timeout; the call is abandoned, not waited on
    elif fault == "hang":
        b.hang = True
    elif fault == "exception":
        b.error = RuntimeError("policy exploded")
    else:
        b.output = output
    made.append(b)
    return b


def build(
    store: SQLiteStore,
    alice: Principal,
    vim: Record,
    stage: str,
    fault: str,
    sync: bool,
    made: list[Behaviour],
) -> tuple[UtilityAwareOrchestrator, dict[str, Any]]:
    """An orchestrator whose ``stage`` double misbehaves with ``fault``."""
    gap_cls = SyncScriptedGapPolicy if sync else ScriptedGapPolicy
    adm_cls = SyncScriptedAdmissionPolicy if sync else ScriptedAdmissionPolicy
    gen_cls = SyncScriptedGeneration if sync else ScriptedGeneration
    gap: Any = gap_cls([("preference", "vim editor")])
    admission: Any = adm_cls("all")
    retriever: Any = StoreRetriever(store)
    final: Any = gen_cls("the regenerated answer")
    if stage == "gap":
        output = (
            {"gaps": "nope"}
            if fault == "malformed"
            else {"gaps": [{"category": "weather", "query": "x"}]}
        )
        gap = gap_cls(behaviour=fault_behaviour(fault, output=output, made=made))
    elif stage == "retrieval":
        if fault == "unknown_ids":
            # Another principal's record: the orchestrator re-reads candidates in scope.
            bob = Principal(tenant="acme", principal="bob")
            retriever = FakeRetriever([store.add(bob, RecordDraft(text="Bob prefers emacs"))])
        else:
            b = fault_behaviour(fault, output=["not a candidate"], made=made)
            retriever = StoreRetriever(store, behaviour=b)
    elif stage == "admission":
        if fault == "unknown_ids":
            admission = adm_cls("all", also_name=["r-unknown"])
        else:
            output = {"admitted": [vim.id], "verdicts": []}
            admission = adm_cls("all", behaviour=fault_behaviour(fault, output=output, made=made))
    else:
        output = "" if fault == "malformed" else Generation("text", ("r-unknown",))
        final = gen_cls(behaviour=fault_behaviour(fault, output=output, made=made))
    # Only the stage under test has a short timeout, so a slow, loaded machine cannot turn
    # another fault (or another stage) into a timeout.
    timeouts = {
        f"{name}_timeout_ms": TIMEOUT_MS
        if name == stage and fault in ("timeout", "hang")
        else SLACK_MS
        for name in ("gap", "retrieval", "admission", "regeneration")
    }
    config = UtilityAwareConfig(gap_enabled=True, admission_mode="custom", **timeouts)
    orch = UtilityAwareOrchestrator(store, config, gap_policy=gap, admission_policy=admission)
    return orch, {"retriever": retriever, "generate_final": final, "admission": admission}


async def run_turn(
    orch: UtilityAwareOrchestrator,
    scope: Principal,
    *,
    retriever: Any,
    generate_final: Any,
    draft: Any = None,
    turn_index: int = 0,
    budget: int | None = None,
    **_: Any,
) -> TurnMemoryDecision:
    return await orch.prepare_turn(
        scope,
        session_id="s1",
        turn_index=turn_index,
        turn="Which editor do I like?",
        public_context=None,
        profile=ProfileBlock(text="Answer concisely.", record_ids=("p1",)),
        generate_draft=draft or ScriptedGeneration("the draft"),
        generate_final=generate_final,
        retriever=retriever,
        options=TurnOptions(latency_budget_ms=budget),
    )


CASES = [
    pytest.param(stage, fault, sync, id=f"{stage}-{fault}-{'sync' if sync else 'async'}")
    for stage in ["gap", "retrieval", "admission", "regeneration"]
    for fault in FAULTS
    for sync in ([False] if stage == "retrieval" else [False, True])
]


@pytest.mark.parametrize(("stage", "fault", "sync"), CASES)
async def test_fault_matrix_returns_the_draft(
    store: SQLiteStore,
    alice: Principal,
    vim: Record,
    behaviours: list[Behaviour],
    stage: str,
    fault: str,
    sync: bool,
) -> None:
    """Any stage fault: baseline draft, memory withheld, reason recorded, one decision row."""
    orch, parts = build(store, alice, vim, stage, fault, sync, behaviours)
    with anyio.fail_after(10):
        decision = await run_turn(orch, alice, **parts)
    assert decision.response == "the draft" and not decision.applied
    assert decision.disposition is Disposition.BASELINE_POLICY_FAILURE
    assert decision.failure is not None
    assert decision.failure.stage is Stage(stage)
    assert decision.failure.reason is EXPECTED[fault]
    assert decision.profile_record_ids == ("p1",)  # the ambient profile stays
    final = parts["generate_final"]
    assert len(final.requests) == (1 if stage == "regeneration" else 0)
    rows = AuditLog(store).decision_rows()
    assert len(rows) == 1
    assert (rows[0]["failure_stage"], rows[0]["failure_reason"]) == (stage, EXPECTED[fault].value)
    assert rows[0]["disposition"] == "baseline_policy_failure"


@pytest.mark.parametrize(
    ("stage", "error"),
    [
        pytest.param("retrieval", ConnectionError("refused"), id="retrieval-connection"),
        pytest.param("admission", AdapterHTTPError(503, "overloaded"), id="admission-http-503"),
        pytest.param("gap", OSError("no route"), id="gap-oserror"),
    ],
)
async def test_unavailable_provider_fails_closed(
    store: SQLiteStore, alice: Principal, vim: Record, stage: str, error: Exception
) -> None:
    """An unavailable provider is recorded as ``unavailable`` and the draft is returned."""
    gap: Any = ScriptedGapPolicy([("preference", "vim editor")])
    admission: Any = ScriptedAdmissionPolicy("all")
    retriever: Any = StoreRetriever(store)
    if stage == "gap":
        gap = ScriptedGapPolicy(error=error)
    elif stage == "retrieval":
        retriever = StoreRetriever(store, error=error)
    else:
        admission = ScriptedAdmissionPolicy("all", error=error)
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=gap,
        admission_policy=admission,
    )
    decision = await run_turn(
        orch, alice, retriever=retriever, generate_final=ScriptedGeneration("x")
    )
    assert decision.failure is not None
    assert (decision.failure.stage, decision.failure.reason) == (
        Stage(stage),
        FailureReason.UNAVAILABLE,
    )
    assert decision.response == "the draft"


async def test_admitted_jointly_helpful_alone_is_malformed(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """A lone jointly_helpful admission is inconsistent, so it fails closed as malformed."""
    output = {
        "admitted": [vim.id],
        "verdicts": [{"record_id": vim.id, "reason": "jointly_helpful"}],
    }
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy([("preference", "vim")]),
        admission_policy=ScriptedAdmissionPolicy(output=output),
    )
    decision = await run_turn(
        orch, alice, retriever=StoreRetriever(store), generate_final=ScriptedGeneration("x")
    )
    assert decision.failure is not None and decision.failure.reason is FailureReason.MALFORMED


async def test_draft_failure_raises_after_writing_its_row(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """A failing draft callback propagates, but the turn still gets its one decision row."""
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy(hang=True),
        admission_policy=ScriptedAdmissionPolicy("all"),
    )
    with pytest.raises(RuntimeError, match="model down"):
        await run_turn(
            orch,
            alice,
            retriever=StoreRetriever(store),
            generate_final=ScriptedGeneration("x"),
            draft=ScriptedGeneration(error=RuntimeError("model down")),
        )
    rows = AuditLog(store).decision_rows()
    assert [(r["failure_stage"], r["failure_reason"]) for r in rows] == [("draft", "exception")]


# -- the audit write --------------------------------------------------------------------


def _vim_orchestrator(store: SQLiteStore) -> tuple[UtilityAwareOrchestrator, dict[str, Any]]:
    """An orchestrator whose every turn plans one gap and admits what the store finds, and
    the turn parts run_turn takes (a store retriever, a scripted final answer)."""
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy([("preference", "vim editor")]),
        admission_policy=ScriptedAdmissionPolicy("all"),
    )
    return orch, {"retriever": StoreRetriever(store), "generate_final": ScriptedGeneration("x")}


def lock_is_free(store: SQLiteStore, path: Path) -> bool:
    """No thread holds the store's lock and no connection holds a write transaction."""
    if not store._lock.acquire(timeout=2):
        return False
    store._lock.release()
    other = sqlite3.connect(path, timeout=0.5, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


async def test_failed_audit_write_is_loud_and_leaves_nothing(
    tmp_path: Path, alice: Principal
) -> None:
    """A failed decision write rolls back whole, is logged and counted, and is raised by
    flush(), by the session's next turn and by close()."""

    def explode(step: str) -> None:
        if step == "search_log":
            raise RuntimeError("disk on fire")

    path = tmp_path / "audit.db"
    store = SQLiteStore(path, on_write_step=explode)
    store.add(alice, RecordDraft(text="Alice prefers the vim editor"))
    orch, parts = _vim_orchestrator(store)
    with capture_logs() as logs:
        decision = await run_turn(orch, alice, **parts)  # the write is off the turn's path
        assert decision.response == "x"
        with pytest.raises(StoreError, match="could not be written") as info:
            await orch.flush()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert [e["log_level"] for e in logs if e["event"] == "turn_decision_write_failed"] == ["error"]
    assert orch.audit.writer.failed == 1
    assert store.query("SELECT count(*) AS n FROM turn_decisions")[0]["n"] == 0
    assert store.query("SELECT count(*) AS n FROM search_log")[0]["n"] == 0
    assert lock_is_free(store, path)

    await run_turn(orch, alice, turn_index=1, **parts)  # its row fails after it returned
    with pytest.raises(StoreError, match="could not be written"):
        await run_turn(orch, alice, turn_index=2, **parts)  # ... and the next turn says so
    assert orch.audit.writer.failed == 2
    other = Principal(tenant="acme", principal="carol")
    await run_turn(orch, other, **parts)
    with pytest.raises(StoreError, match="could not be written"):
        store.close()  # ... and so does close, for a failure nobody was told of yet
    assert orch.audit.writer.failed == 3


# -- cancellation ------------------------------------------------------------------------

POINTS = ["draft", "inventory", "gap", "retrieval", "admission", "regeneration", "audit"]


@pytest.mark.parametrize("point", POINTS)
async def test_cancelling_the_caller_leaves_no_partial_rows(
    tmp_path: Path, alice: Principal, point: str
) -> None:
    """Cancelling at any await point leaves whole rows or none, and no lock held."""
    reached = anyio.Event()
    gate = threading.Event()
    scope = anyio.CancelScope()

    token = anyio.lowlevel.current_token()

    def on_step(step: str) -> None:
        if point == "audit" and step == "turn_decision":
            # Hold the writer's transaction open (on its own thread) until the test is done.
            anyio.from_thread.run_sync(reached.set, token=token)
            gate.wait(5)

    def inventory_fn(store_: SQLiteStore, scope_: Principal) -> list[str]:
        if point == "inventory":  # a host inventory runs on a daemon thread: pass the token
            anyio.from_thread.run_sync(reached.set, token=token)
            gate.wait(5)
        return ["preference"]

    def hook(name: str) -> dict[str, Any]:
        return {"hang": True, "on_call": reached.set} if point == name else {}

    path = tmp_path / "cancel.db"
    store = SQLiteStore(path, on_write_step=on_step)
    store.add(alice, RecordDraft(text="Alice prefers the vim editor", kind="preference"))
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy([("preference", "vim editor")], **hook("gap")),
        admission_policy=ScriptedAdmissionPolicy("all", **hook("admission")),
        inventory_fn=inventory_fn,
    )
    retriever = StoreRetriever(store, **hook("retrieval"))
    draft = ScriptedGeneration("the draft", **hook("draft"))
    final = ScriptedGeneration("the final", **hook("regeneration"))
    finished = False

    async def caller() -> None:
        nonlocal finished
        with scope:
            await run_turn(orch, alice, retriever=retriever, generate_final=final, draft=draft)
            finished = True

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await reached.wait()
            scope.cancel()
            gate.set()
    await orch.flush()
    decisions = store.query("SELECT id FROM turn_decisions")
    searches = store.query("SELECT decision_id FROM search_log")
    if point == "audit":
        # The turn returned once its row was handed over; the writer then wrote it whole,
        # whatever happened to the caller afterwards.
        assert finished
        assert len(decisions) == 1
        assert {s["decision_id"] for s in searches} == {decisions[0]["id"]}
    else:
        assert scope.cancelled_caught and not finished
        assert decisions == [] and searches == []
    assert lock_is_free(store, path)
    store.close()


async def test_sync_policies_run_on_abandonable_daemon_threads(
    store: SQLiteStore, alice: Principal, vim: Record, behaviours: list[Behaviour]
) -> None:
    """A blocking policy runs on a daemon thread, so one that never returns cannot pin the host."""
    threads: list[threading.Thread] = []
    hang = Behaviour(hang=True, on_call=lambda: threads.append(threading.current_thread()))
    behaviours.append(hang)
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom", admission_timeout_ms=50),
        gap_policy=SyncScriptedGapPolicy([("preference", "vim editor")]),
        admission_policy=SyncScriptedAdmissionPolicy("all", behaviour=hang),
    )
    with anyio.fail_after(10):
        decision = await run_turn(
            orch, alice, retriever=StoreRetriever(store), generate_final=ScriptedGeneration("x")
        )
    assert decision.failure is not None and decision.failure.reason is FailureReason.TIMEOUT
    assert len(threads) == 1 and threads[0].daemon and threads[0].is_alive()


def test_blocking_calls_go_to_daemon_workers_and_a_hung_one_keeps_only_its_own() -> None:
    """A blocking call is handed to a daemon worker (the caller never starts a thread
    itself); a call that never returns keeps its worker, and the next call gets another."""
    from retold._host_calls import DaemonWorkers

    workers = DaemonWorkers(idle_s=5.0)
    release, hung, ran = threading.Event(), threading.Event(), threading.Event()
    threads: dict[str, threading.Thread] = {}

    def hang() -> None:
        threads["hang"] = threading.current_thread()
        hung.set()
        release.wait(10)

    def quick() -> None:
        threads["quick"] = threading.current_thread()
        ran.set()

    workers.submit(hang)
    assert hung.wait(10)
    workers.submit(quick)
    try:
        assert ran.wait(10)
    finally:
        release.set()
    assert threads["hang"] is not threads["quick"]
    assert all(t.daemon and t.name == "retold-policy-call" for t in threads.values())


async def test_a_store_that_takes_no_write_fails_a_batch_once_not_row_by_row(
    tmp_path: Path, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With another connection holding SQLite's write lock past the busy timeout, a batch
    of decisions fails in one attempt (each row reported and counted): retrying each row
    alone would wait the timeout once per row, so a flush or a close at shutdown would take
    the batch's size times as long. A row that breaks a rule still fails alone."""
    path = tmp_path / "busy.db"
    store = SQLiteStore(path, busy_timeout_ms=100)
    store.add(alice, RecordDraft(text="Alice prefers the vim editor"))
    orch, parts = _vim_orchestrator(store)
    decision = await run_turn(orch, alice, **parts)
    await orch.flush()
    writer = orch.audit.writer
    attempts: list[int] = []
    write_rows = writer._write_rows

    def counted(batch: Any) -> None:
        attempts.append(len(batch))
        write_rows(batch)

    monkeypatch.setattr(writer, "_write_rows", counted)
    copies = [  # the same turn again under new ids (its searches' ids too)
        decision.model_copy(
            update={
                "decision_id": f"d-busy-{i}",
                "turn_index": 10 + i,
                "searches": tuple(
                    s.model_copy(update={"search_id": f"{s.search_id}-{i}"})
                    for s in decision.searches
                ),
            }
        )
        for i in range(4)
    ]
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with writer._cond:  # handed over together: the writer takes them as one batch
            for d in copies:
                writer.submit(d)
        assert writer.drain(10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert attempts == [4] and writer.failed == 4
    with pytest.raises(StoreError, match="4 turn-decision row"):
        writer.raise_failures()
    # A duplicate id breaks one row of a batch: the others are written.
    attempts.clear()
    with writer._cond:
        writer.submit(copies[0].model_copy(update={"decision_id": decision.decision_id}))
        writer.submit(copies[1])
    assert writer.drain(10)
    assert attempts == [2, 1, 1] and writer.failed == 5
    assert [r["id"] for r in AuditLog(store).decision_rows()] == [decision.decision_id, "d-busy-1"]
    with pytest.raises(StoreError, match="1 turn-decision row"):
        writer.raise_failures()
    store.close()


async def test_a_batch_the_database_rolled_back_runs_again(
    tmp_path: Path, alice: Principal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock or serialization failure (SQLSTATE class 40, PostgreSQL's choice of a
    transaction to roll back) is not the batch's fault: it runs again, up to twice, before
    its rows count as failed."""

    class DeadlockDetected(Exception):
        sqlstate = "40P01"

    store = SQLiteStore(tmp_path / "rb.db")
    store.add(alice, RecordDraft(text="Alice prefers the vim editor"))
    orch, parts = _vim_orchestrator(store)
    writer = orch.audit.writer
    write_rows = writer._write_rows
    attempts: list[int] = []
    deadlocks = [1]

    def rolled_back(batch: Any) -> None:
        attempts.append(len(batch))
        if len(attempts) <= deadlocks[0]:
            raise StoreError("a write failed: DeadlockDetected") from DeadlockDetected()
        write_rows(batch)

    monkeypatch.setattr(writer, "_write_rows", rolled_back)
    await run_turn(orch, alice, **parts)
    await orch.flush()
    assert attempts == [1, 1] and writer.written == 1 and writer.failed == 0
    attempts.clear()
    deadlocks[0] = 3  # rolled back every time: the rows fail after three attempts
    await run_turn(orch, alice, turn_index=1, **parts)
    with pytest.raises(StoreError, match="DeadlockDetected"):
        await orch.flush()
    assert attempts == [1, 1, 1] and writer.failed == 1
    assert len(AuditLog(store).decision_rows()) == 1
    store.close()
