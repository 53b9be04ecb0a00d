"""``retold decisions report`` and the report it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retold import (
    AuditLog,
    OfflineLabel,
    Principal,
    ProfileBlock,
    RecordDraft,
    SQLiteStore,
    TurnMemoryDecision,
    TurnOptions,
    UtilityAwareConfig,
    UtilityAwareOrchestrator,
)
from retold._audit import build_report
from retold.cli import main
from retold.testing import (
    ManualClock,
    ScriptedAdmissionPolicy,
    ScriptedGapPolicy,
    ScriptedGeneration,
    StoreRetriever,
)

pytestmark = pytest.mark.anyio


async def run(
    store: SQLiteStore,
    scope: Principal,
    index: int,
    *,
    gap: Any,
    admission: Any = None,
    draft: Any = None,
    clock: Any = None,
    budget: int | None = None,
) -> TurnMemoryDecision:
    orch = UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom"),
        gap_policy=gap,
        admission_policy=admission or ScriptedAdmissionPolicy("all"),
        **({"clock": clock} if clock is not None else {}),
    )
    return await orch.prepare_turn(
        scope,
        session_id="s1",
        turn_index=index,
        turn="Which editor do I like?",
        public_context=None,
        profile=ProfileBlock.empty(),
        generate_draft=draft or ScriptedGeneration("draft"),
        generate_final=ScriptedGeneration("final"),
        retriever=StoreRetriever(store),
        options=TurnOptions(latency_budget_ms=budget),
    )


@pytest.fixture
async def populated(store: SQLiteStore, alice: Principal) -> dict[str, Any]:
    """Six turns, one per interesting path, plus offline labels."""
    vim = store.add(alice, RecordDraft(text="Alice prefers the vim editor"))
    emacs = store.add(alice, RecordDraft(text="Alice tried the emacs editor"))
    editor = [("preference", "editor")]
    await run(store, alice, 0, gap=ScriptedGapPolicy([]))
    await run(store, alice, 1, gap=ScriptedGapPolicy([]))
    regenerated = await run(
        store, alice, 2, gap=ScriptedGapPolicy(editor), admission=ScriptedAdmissionPolicy([vim.id])
    )
    clock = ManualClock()
    withheld = await run(
        store,
        alice,
        3,
        gap=ScriptedGapPolicy(editor),
        admission=ScriptedAdmissionPolicy([vim.id], clock=clock, cost_ms=900),
        draft=ScriptedGeneration("draft", clock=clock, cost_ms=300),
        clock=clock,
        budget=1000,
    )
    await run(store, alice, 4, gap=ScriptedGapPolicy(error=RuntimeError("boom")))
    await run(store, alice, 5, gap=ScriptedGapPolicy(editor), budget=0)
    audit = AuditLog(store)
    key = {"labeler_version": "judge@1", "model_family": "fam", "provenance": "deletion_test"}
    for decision, subset, useful in [
        (regenerated, (vim.id,), True),
        (regenerated, (emacs.id,), True),
        (withheld, (vim.id,), False),  # excluded: admitted_not_applied
    ]:
        audit.add_label(
            OfflineLabel(decision_id=decision.decision_id, subset=subset, useful=useful, **key)
        )
    return {"vim": vim, "emacs": emacs}


async def test_report_counts_rates_and_failures(store: SQLiteStore, populated: Any) -> None:
    """Dispositions, injection and budget-withhold rates, failures by stage and reason."""
    report = AuditLog(store).report()
    assert report.turns == 6
    assert report.dispositions == {
        "baseline_no_gaps": 2,
        "baseline_no_candidates": 0,
        "baseline_empty_admission": 0,
        "baseline_policy_failure": 1,
        "baseline_budget_exhausted": 1,
        "admitted_not_applied": 1,
        "regenerated": 1,
    }
    assert report.injection_rate == pytest.approx(1 / 6)
    assert report.budget_withhold_rate == pytest.approx(1 / 6)
    assert report.budget_exhausted == 1
    assert report.policy_failures == {"gap": {"exception": 1}}
    assert report.added_latency["empty_gap"].turns == 2
    assert report.added_latency["gap"].turns == 2
    assert report.serving_models == {"none": 6} and report.policy_models == {"none": 6}


def test_turns_are_counted_per_model() -> None:
    """A log spanning a change of model reports the turns of each."""
    base = {"disposition": "regenerated", "shadow": 0, "gap_status": "ok", "gap_count": 1}
    base |= {"failure_stage": None, "failure_reason": None, "admitted_ids": [], "added_ms": 1.0}
    rows = [
        {**base, "id": "a", "serving_model": "m1", "policy_model": "openai:m1"},
        {**base, "id": "b", "serving_model": "m2", "policy_model": "openai:m2"},
        {**base, "id": "c", "serving_model": "m2", "policy_model": "openai:m2"},
        {**base, "id": "d", "serving_model": "m2", "policy_model": None},
    ]
    report = build_report(rows, [])
    assert report.serving_models == {"m1": 1, "m2": 3}
    assert report.policy_models == {"none": 1, "openai:m1": 1, "openai:m2": 2}


async def test_precision_and_recall_exclude_budget_withholding(
    store: SQLiteStore, populated: Any
) -> None:
    """Precision/recall use offline labels and skip admitted_not_applied decisions."""
    quality = AuditLog(store).report().admission["deletion_test"]
    assert quality.labeled_turns == 1 and quality.labeled_records == 2
    assert quality.precision == 1.0  # vim admitted and useful
    assert quality.recall == 0.5  # emacs useful but not admitted


def test_added_latency_is_split_by_population() -> None:
    """Empty-gap and gap turns get separate p50/p95; failed planners count in neither."""
    base = {
        "disposition": "baseline_no_gaps",
        "shadow": 0,
        "failure_stage": None,
        "failure_reason": None,
        "admitted_ids": [],
    }
    rows = [
        {**base, "id": f"e{i}", "gap_status": "ok", "gap_count": 0, "added_ms": float(i)}
        for i in range(5)
    ] + [
        {**base, "id": f"g{i}", "gap_status": "ok", "gap_count": 1, "added_ms": 100.0 * i}
        for i in range(1, 4)
    ]
    rows.append({**base, "id": "f", "gap_status": "failed", "gap_count": 0, "added_ms": 999.0})
    report = build_report(rows, [])
    assert report.added_latency["empty_gap"].turns == 5
    assert report.added_latency["empty_gap"].p50_ms == 2.0
    assert report.added_latency["gap"].p50_ms == 200.0
    assert report.added_latency["gap"].p95_ms == pytest.approx(290.0)
    assert report.admission == {}


async def test_cli_report_json(
    store: SQLiteStore, populated: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``retold decisions report --json`` prints the report as one JSON object."""
    assert main(["decisions", "report", "--db", store.path, "--all-tenants", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["turns"] == 6
    assert data["dispositions"]["regenerated"] == 1
    assert data["policy_failures"] == {"gap": {"exception": 1}}
    assert set(data["added_latency"]) == {"empty_gap", "gap"}
    assert data["admission"]["deletion_test"]["recall"] == 0.5


async def test_cli_report_text(
    store: SQLiteStore, populated: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The human report names every figure."""
    assert main(["decisions", "report", "--db", store.path, "--all-tenants"]) == 0
    out = capsys.readouterr().out
    for phrase in (
        "turns: 6",
        "serving models: none (6)",
        "policy models: none (6)",
        "regenerated: 1",
        "injection rate",
        "empty-gap turns",
        "budget-withhold rate",
        "gap/exception: 1",
        "deletion_test: precision 100.0%, recall 50.0%",
    ):
        assert phrase in out


def test_cli_report_needs_an_existing_db(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing database is a usage error (exit 2), not an empty report."""
    assert main(["decisions", "report", "--db", str(tmp_path / "none.db"), "--all-tenants"]) == 2
    assert "no database" in capsys.readouterr().err


def test_cli_report_on_a_store_without_decisions(
    store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that never decided a turn reports zeros and gains no audit tables."""
    assert main(["decisions", "report", "--db", store.path, "--all-tenants", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["turns"] == 0 and data["injection_rate"] is None
    assert store.schema_version("audit") == 0
