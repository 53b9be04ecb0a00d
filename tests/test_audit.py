"""The turn-decision log, search_log and offline labels."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

import retold._audit as audit_module
from retold import (
    AuditLog,
    InvalidInputError,
    OfflineLabel,
    Principal,
    ProfileBlock,
    Record,
    RecordDraft,
    SQLiteStore,
    Store,
    TurnMemoryDecision,
    TurnOptions,
    UtilityAwareConfig,
    UtilityAwareOrchestrator,
    open_store,
)
from retold._audit import percentile
from retold.cli import main
from retold.testing import (
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    ScriptedGeneration,
    StoreRetriever,
)

from .conftest import FixedClock

pytestmark = pytest.mark.anyio

SECRET = "sk-live-" + "Q" * 32


@pytest.fixture
def vim(store: SQLiteStore, alice: Principal) -> Record:
    return store.add(alice, RecordDraft(text="Alice prefers the vim editor", kind="preference"))


@pytest.fixture
def emacs(store: SQLiteStore, alice: Principal) -> Record:
    return store.add(alice, RecordDraft(text="Alice once tried the emacs editor"))


def orchestrator(
    store: SQLiteStore, admit: Any = "all", gaps: Any = None
) -> UtilityAwareOrchestrator:
    return UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy(gaps if gaps is not None else [("preference", "editor")]),
        admission_policy=ScriptedAdmissionPolicy(admit),
        serving_model="model-x@2026-01",
    )


async def turn(
    orch: UtilityAwareOrchestrator,
    scope: Principal,
    index: int,
    text: str = "Which editor do I like?",
    budget: int | None = None,
) -> TurnMemoryDecision:
    return await orch.prepare_turn(
        scope,
        session_id="s1",
        turn_index=index,
        turn=text,
        public_context=None,
        profile=ProfileBlock(text="Be brief.", record_ids=("p1",)),
        generate_draft=ScriptedGeneration("the draft answer"),
        generate_final=ScriptedGeneration("the final answer"),
        retriever=StoreRetriever(orch.store),
        options=TurnOptions(latency_budget_ms=budget),
    )


async def test_decision_row_holds_ids_and_timings_not_bodies(
    store: SQLiteStore, alice: Principal, vim: Record, emacs: Record
) -> None:
    """The row records ids, verdicts, budget and timings; never record, draft or final text."""
    decision = await turn(orchestrator(store, [vim.id]), alice, 0)
    [row] = AuditLog(store).decision_rows()
    assert row["id"] == decision.decision_id
    assert (row["session_id"], row["turn_index"]) == ("s1", 0)
    assert row["ambient_ids"] == ["p1"]
    assert set(row["candidate_ids"]) == {vim.id, emacs.id}
    assert row["admitted_ids"] == [vim.id]
    assert row["verdicts"] == {vim.id: "helpful", emacs.id: "insufficient"}
    assert row["search_ids"] == list(decision.search_ids)
    assert row["gap_policy"] == "scripted-gap@1"
    assert row["admission_policy"] == "scripted-admission@1"
    assert row["serving_model"] == "model-x@2026-01"
    assert row["policy_model"] is None  # scripted policies call no model
    assert row["regeneration_estimate_ms"] == decision.regeneration_estimate_ms
    assert row["draft_ms"] is not None and row["total_ms"] is not None
    assert row["config"]["gap_enabled"] is True
    flat = json.dumps(row, default=str)
    for body in (vim.text, emacs.text, "the draft answer", "the final answer"):
        assert body not in flat


async def test_search_log_keeps_the_turn_as_redacted_context(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """search_log keeps the raw turn as context, passed through the redactor first."""
    decision = await turn(orchestrator(store), alice, 0, text=f"my key is {SECRET}, which editor?")
    [search] = AuditLog(store).search_rows(decision.decision_id)
    assert SECRET not in search["context"] and "[REDACTED" in search["context"]
    assert search["query"] == "editor" and search["origin"] == "host"
    assert search["result_ids"] == [vim.id]


async def test_every_path_writes_exactly_one_row(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """No-gap, regenerated, budget-zero and failed turns each write one row."""
    await turn(orchestrator(store, gaps=[]), alice, 0)
    await turn(orchestrator(store), alice, 1)
    await turn(orchestrator(store), alice, 2, budget=0)
    failing = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=ScriptedGapPolicy(error=RuntimeError("boom")),
        admission_policy=ScriptedAdmissionPolicy("all"),
    )
    await turn(failing, alice, 3)
    rows = AuditLog(store).decision_rows()
    assert [(r["turn_index"], r["disposition"]) for r in rows] == [
        (0, "baseline_no_gaps"),
        (1, "regenerated"),
        (2, "baseline_budget_exhausted"),
        (3, "baseline_policy_failure"),
    ]
    assert [r["effective_budget_ms"] for r in rows] == [None, None, 0, None]


async def test_config_snapshot_is_stored_once(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """Turns reference one stored configuration snapshot by hash."""
    orch = orchestrator(store)
    await turn(orch, alice, 0)
    await turn(orch, alice, 1)
    assert store.query("SELECT count(*) AS n FROM turn_decision_configs")[0]["n"] == 1
    rows = AuditLog(store).decision_rows()
    assert all(r["config"] == orch.config.snapshot() for r in rows)


async def test_offline_labels_are_keyed_as_specified(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """A label is unique per decision, subset, labeler version, model family and provenance."""
    decision = await turn(orchestrator(store), alice, 0)
    audit = AuditLog(store)
    label = OfflineLabel(
        decision_id=decision.decision_id,
        subset=(vim.id,),
        labeler_version="deletion-test@1",
        model_family="family-a",
        provenance="deletion_test",
        useful=True,
        verdict="improved",
    )
    assert audit.add_label(label) is True
    assert audit.add_label(label.model_copy(update={"useful": False})) is False
    assert audit.add_label(label.model_copy(update={"labeler_version": "deletion-test@2"}))
    with pytest.raises(InvalidInputError, match="decision_id"):
        audit.add_label(label.model_copy(update={"decision_id": "d-missing"}))
    rows = store.query("SELECT subset, weak FROM offline_labels")
    assert rows == [{"subset": json.dumps([vim.id]), "weak": 1}] * 2


def test_percentile_interpolates() -> None:
    """Percentiles interpolate linearly and are None for no data."""
    assert percentile([], 50) is None
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)


async def test_one_writer_per_store_and_closing_the_store_writes_what_it_was_handed(
    any_store: Store,
) -> None:
    """On either dialect, every AuditLog over a store shares the orchestrator's decision
    writer (a read through any of them sees the decisions handed over before it), and
    closing the store writes the decisions still queued before its connections go."""
    store = any_store
    alice = Principal(tenant="acme", principal="alice")
    store.add(alice, RecordDraft(text="Alice prefers the vim editor", kind="preference"))
    orch = orchestrator(store)  # type: ignore[arg-type]
    assert AuditLog(store).writer is orch.audit.writer
    first = await turn(orch, alice, 0)
    assert [d["id"] for d in AuditLog(store).decision_rows()] == [first.decision_id]
    rest = [await turn(orch, alice, i) for i in (1, 2)]
    location = store.location
    assert location is not None
    store.close()
    with open_store(location) as again:
        assert [d["id"] for d in AuditLog(again).decision_rows()] == [
            d.decision_id for d in (first, *rest)
        ]


async def test_model_issued_searches_are_logged_without_a_decision(
    store: SQLiteStore, alice: Principal, vim: Record
) -> None:
    """write_search logs a retrieval outside a turn decision, next to the turn's gap searches."""
    decision = await turn(orchestrator(store), alice, 0)
    audit = AuditLog(store)
    search_id = audit.write_search(
        alice,
        session_id="s1",
        turn_index=0,
        origin="model",
        query=f"editor {SECRET}",
        result_ids=[vim.id],
        elapsed_ms=1.5,
    )
    rows = audit.search_rows_for_turn(alice, "s1", 0)
    assert [(r["origin"], r["decision_id"]) for r in rows] == [
        ("host", decision.decision_id),
        ("model", None),
    ]
    assert rows[1]["id"] == search_id and SECRET not in rows[1]["query"]
    assert audit.search_rows_for_turn(Principal(tenant="acme", principal="bob"), "s1", 0) == []


async def _history(store: Store, clock: FixedClock) -> dict[str, list[str]]:
    """Decision ids per tenant: two old turns of acme/alice (one with a model-issued search
    and an offline label) and one of globex/alice; ten days later, one new turn of each."""
    alice, other = (
        Principal(tenant="acme", principal="alice"),
        Principal(tenant="globex", principal="alice"),
    )
    vim = [
        store.add(scope, RecordDraft(text="Alice prefers the vim editor", kind="preference"))
        for scope in (alice, other)
    ]
    orch = orchestrator(store)  # type: ignore[arg-type]
    audit = AuditLog(store)
    ids: dict[str, list[str]] = {"acme": [], "globex": []}
    old = [await turn(orch, alice, 0), await turn(orch, alice, 1), await turn(orch, other, 0)]
    audit.write_search(
        alice, session_id="s1", turn_index=1, origin="model", query="vim", result_ids=[]
    )
    label = OfflineLabel(
        decision_id=old[0].decision_id,
        subset=(vim[0].id,),
        labeler_version="retention-test@1",
        model_family="family-a",
        provenance="deletion_test",
        useful=False,
        verdict="unchanged",
    )
    assert audit.add_label(label)
    clock.advance(days=10)
    new = [await turn(orch, alice, 2), await turn(orch, other, 1)]
    for d in old + new:
        ids[d.scope.tenant].append(d.decision_id)
    return ids


async def test_prune_deletes_old_decisions_with_their_searches_and_labels(
    any_store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows logged before the cutoff go, a decision always with its searches and labels,
    one tenant's only when asked; newer rows stay; a second prune deletes nothing."""
    monkeypatch.setattr(audit_module, "_PRUNE_BATCH", 1)  # one decision per transaction
    store = any_store
    ids = await _history(store, clock)
    audit = AuditLog(store)
    cutoff = clock() - timedelta(days=5)

    acme = audit.prune(cutoff, tenant="acme")

    assert acme.counts == {"turn_decisions": 2, "search_log": 3, "offline_labels": 1}
    assert [d["id"] for d in audit.decision_rows(tenant="acme")] == ids["acme"][2:]
    assert [d["id"] for d in audit.decision_rows(tenant="globex")] == ids["globex"]
    assert store.query("SELECT count(*) AS n FROM offline_labels")[0]["n"] == 0
    searches = store.query("SELECT decision_id, tenant FROM search_log ORDER BY created_at, id")
    assert {(s["tenant"], s["decision_id"]) for s in searches} == {
        ("acme", ids["acme"][2]),
        ("globex", ids["globex"][0]),
        ("globex", ids["globex"][1]),
    }
    every = audit.prune(cutoff)
    assert every.counts == {"turn_decisions": 1, "search_log": 1, "offline_labels": 0}
    assert audit.prune(cutoff).total == 0
    assert {d["id"] for d in audit.decision_rows()} == {ids["acme"][2], ids["globex"][1]}
    assert audit.report(tenant="acme").turns == 1
    with pytest.raises(InvalidInputError, match="before"):
        audit.prune(datetime(2026, 1, 1))


async def test_decisions_prune_command(
    store: SQLiteStore, clock: FixedClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """`retold decisions prune` needs a tenant scope, a valid cutoff and --yes; it prints
    the counts, and the report afterwards covers only the rows kept."""
    ids = await _history(store, clock)
    db = str(store.path)
    store.close()
    base = ["decisions", "prune", "--db", db, "--tenant", "acme"]
    capsys.readouterr()
    assert main([*base, "--before", "2026-01-06"]) == 2  # no --yes
    assert main([*base, "--before", "last week", "--yes"]) == 2
    assert main([*base, "--older-than-days", "0", "--yes"]) == 2
    assert "--before must be an ISO 8601" in capsys.readouterr().err
    assert main([*base, "--before", "2026-01-06", "--yes", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {"turn_decisions": 2, "search_log": 3, "offline_labels": 1}
    assert out["before"] == "2026-01-06T00:00:00Z" and out["tenant"] == "acme"
    assert main(["decisions", "report", "--db", db, "--tenant", "acme", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["turns"] == 1
    assert main([*base, "--older-than-days", "3650", "--yes"]) == 0
    assert "turn_decisions 0, search_log 0, offline_labels 0" in capsys.readouterr().out
    assert main(["decisions", "report", "--db", db, "--tenant", "globex", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["turns"] == len(ids["globex"]) == 2
