"""The fitness suite: gates, determinism, recording, the CLI's JSON and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from retold.policy.lexical import LexicalAdmissionJudge, LexicalGapPlanner

from retold import (
    SQLiteStore,
    UsageError,
    UtilityAwareConfig,
    _fitness,
    record_fitness,
    recorded_fitness,
)
from retold._activation_classifier import OfflineActivationClassifier
from retold._extraction import OfflineExtractor
from retold._retrieval import RetrievalConfig
from retold.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "policies" / "scenarios"


class LocalOfflineBundle:
    """The offline reference bundle built locally from the deterministic components."""

    name = "offline-reference"
    offline = True

    def __init__(self, owner: str | None = "memory-team") -> None:
        self.retrieval_config = RetrievalConfig()
        self.manifest: dict[str, Any] = {"bundle_sha256": "ab" * 32}
        if owner is not None:
            self.manifest["review_owner"] = owner

    def config(self, **overrides: Any) -> UtilityAwareConfig:
        return UtilityAwareConfig(**{"gap_enabled": True, "admission_mode": "custom", **overrides})

    def gap_policy(self, model: Any = None) -> Any:
        return LexicalGapPlanner()

    def admission_policy(self, model: Any = None) -> Any:
        return LexicalAdmissionJudge()

    def activation_classifier(self, model: Any = None) -> Any:
        return OfflineActivationClassifier()

    def extractor(self, model: Any = None) -> Any:
        return OfflineExtractor()


def _small_set(tmp_path: Path, per_file: int = 3) -> Path:
    out = tmp_path / "scenarios"
    out.mkdir()
    for path in sorted(SCENARIOS.glob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()[:per_file]
        (out / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _run(directory: Path, **kw: Any) -> _fitness.FitnessResult:
    bundle = kw.pop("bundle", LocalOfflineBundle())
    return anyio.run(lambda: _fitness.run_fitness(bundle, directory, **kw))


def test_small_set_runs_both_runs_and_every_gate(tmp_path: Path) -> None:
    """A small set yields every gate with per-run values and the deletion-test counts."""
    result = _run(_small_set(tmp_path))
    names = [g.name for g in result.gates]
    assert names == [
        "ordinary_injection_rate",
        "conditional_fact_recall",
        "ambient_preference_recall",
        "trigger_preference_promotions",
        "unsafe_automatic_promotions",
        "review_backlog",
    ]
    assert set(result.gates[0].runs) == {"ambient", "conditional"}
    assert set(result.gates[2].runs) == {"ambient"}
    assert result.scenario_counts == {
        "ambient_preference": 3,
        "conditional_fact": 3,
        "ordinary": 3,
        "safety": 3,
    }
    for run in result.runs.values():
        d = run.deletion_test
        assert d.improved + d.worse + d.equivalent == run.dispositions.get("regenerated", 0)
        assert d.labels_stored == d.improved + d.worse + d.equivalent
    assert result.verdict == ("pass" if all(g.passed for g in result.gates) else "fail")


def test_same_verdict_and_values_twice(tmp_path: Path) -> None:
    """Two runs over the same set give the same verdict, gate values and hashes."""
    directory = _small_set(tmp_path)
    first, second = _run(directory), _run(directory)
    assert first.verdict == second.verdict
    assert first.gates == second.gates
    assert first.runs == second.runs
    assert first.scenario_set_sha256 == second.scenario_set_sha256


def test_scenario_hash_ignores_whitespace_and_sees_content(tmp_path: Path) -> None:
    """The scenario-set hash is over canonical JSON: re-spacing keeps it, an edit changes it."""
    directory = _small_set(tmp_path, per_file=1)
    before = _fitness.scenario_set_sha256(directory)
    path = directory / "ordinary.jsonl"
    obj = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(obj, indent=None, separators=(" , ", " : ")) + "\n\n")
    assert _fitness.scenario_set_sha256(directory) == before
    obj["probe"]["text"] += " please"
    path.write_text(json.dumps(obj) + "\n")
    assert _fitness.scenario_set_sha256(directory) != before


def test_unassigned_owner_fails_the_backlog_gate(tmp_path: Path) -> None:
    """Without a review owner the backlog gate fails, and so does the verdict."""
    result = _run(_small_set(tmp_path, per_file=1), bundle=LocalOfflineBundle(owner=None))
    backlog = next(g for g in result.gates if g.name == "review_backlog")
    assert result.review_owner == "unassigned"
    assert not backlog.passed
    assert result.verdict == "fail"


def test_record_and_read_back(tmp_path: Path) -> None:
    """record_fitness stores the hashes, gates and verdict; recorded_fitness reads the newest."""
    result = _run(_small_set(tmp_path, per_file=1))
    store = SQLiteStore(tmp_path / "host.db")
    assert recorded_fitness(store, result.bundle_sha256) is None
    first = record_fitness(store, result)
    again = record_fitness(store, result)
    got = recorded_fitness(store, result.bundle_sha256)
    assert got is not None and got.id == again.id > first.id
    assert got.verdict == result.verdict
    assert got.scenario_set_sha256 == result.scenario_set_sha256
    assert got.gates == result.gates
    assert recorded_fitness(store, "cd" * 32) is None
    store.close()


def test_cli_json_report_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``retold fitness --json --record --report`` prints the keys, stores and writes."""
    monkeypatch.setattr(_fitness, "load_bundle", lambda name: LocalOfflineBundle())
    directory = _small_set(tmp_path, per_file=1)
    db, report = tmp_path / "host.db", tmp_path / "report.md"
    argv = ["fitness", "--scenarios", str(directory), "--bundle", "offline-reference"]
    argv += ["--db", str(db), "--record", "--report", str(report), "--json"]
    status = main(argv)
    data = json.loads(capsys.readouterr().out)
    assert status == (0 if data["verdict"] == "pass" else 1)
    assert data["verdict"] in ("pass", "fail")
    assert data["scenario_set_sha256"] == _fitness.scenario_set_sha256(directory)
    for gate in data["gates"]:
        assert {"name", "value", "threshold", "passed"} <= set(gate)
    text = report.read_text(encoding="utf-8")
    assert "deterministic local responder" in text and "## Metric definitions" in text
    store = SQLiteStore(db)
    got = recorded_fitness(store, "ab" * 32)
    assert got is not None and got.id == data["recorded_id"]
    store.close()


def test_cli_record_needs_db(capsys: pytest.CaptureFixture[str]) -> None:
    """``--record`` without ``--db`` is a usage error (exit 2)."""
    assert main(["fitness", "--bundle", "offline-reference", "--record"]) == 2
    assert "--db" in capsys.readouterr().err


def test_model_bundle_without_model_is_refused(tmp_path: Path) -> None:
    """A bundle that is not offline needs a model."""
    bundle = LocalOfflineBundle()
    bundle.offline = False
    with pytest.raises(UsageError, match="needs a model"):
        _run(_small_set(tmp_path, per_file=1), bundle=bundle)


def test_committed_set_passes_with_the_offline_bundle_twice() -> None:
    """The shipped offline bundle passes every gate on the committed set, identically twice."""
    from retold.policy.reference import get_bundle

    bundle = get_bundle("offline-reference")
    first = _run(SCENARIOS, bundle=bundle, review_owner="memory-team")
    second = _run(SCENARIOS, bundle=bundle, review_owner="memory-team")
    assert first.verdict == second.verdict == "pass", [g for g in first.gates if not g.passed]
    assert [g.model_dump() for g in first.gates] == [g.model_dump() for g in second.gates]
    assert sum(first.scenario_counts.values()) >= 200
