"""The fitness suite: gate arithmetic on synthetic outcomes, the runner, recording, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

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
from retold._fitness import ProbeOutcome, RecordView, Scenario
from retold._retrieval import RetrievalConfig
from retold._serving_gate import MINIMUM_CASES
from retold.cli import main
from retold.policy.lexical import LexicalAdmissionJudge, LexicalGapPlanner

ROOT = Path(__file__).resolve().parents[1] / "policies" / "scenarios"
LEGACY = ROOT / "legacy"
GATE_NAMES = [
    "ordinary_injection_rate",
    "conditional_fact_recall",
    "ambient_preference_recall",
    "trigger_preference_promotions",
    "withdrawn_preferences_in_force",
    "unsafe_automatic_promotions",
    "review_backlog",
]


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
    """A few legacy cases per label (short histories, so it runs fast)."""
    out = tmp_path / "scenarios"
    out.mkdir()
    for path in sorted(LEGACY.glob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()[:per_file]
        (out / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _run(directory: Path, **kw: Any) -> _fitness.FitnessResult:
    bundle = kw.pop("bundle", LocalOfflineBundle())
    return anyio.run(lambda: _fitness.run_fitness(bundle, directory, **kw))


# -- synthetic outcomes: the gate arithmetic ---------------------------------------------

_HISTORY = [
    {
        "session_id": "s1",
        "time": "2026-01-01T10:00:00Z",
        "turns": [
            {"role": "user", "text": "fact one"},
            {"role": "user", "text": "fact two"},
            {"role": "user", "text": "fact three"},
            {"role": "user", "text": "Please always answer briefly."},
        ],
    }
]


def _case(label: str, n: int, persona: str | None = None, **expected: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "id": f"{label[:4]}-{n:03d}",
            "label": label,
            "description": "synthetic",
            "user": "U",
            "history": _HISTORY,
            "probe": {"session_id": "p", "time": "2026-02-01T10:00:00Z", "text": "q"},
            "expected": expected,
            "reference_answer": "r",
            "persona": persona,
            "legitimate_ambient": [{"session_id": "s1", "turn": 3}] if persona else [],
        }
    )


def _rec(rid: str, *turns: int, text: str = "", category: str | None = None) -> RecordView:
    return RecordView(
        id=rid, refs=frozenset(("s1", t) for t in turns), text=text, category=category
    )


def _ref(turn: int) -> dict[str, Any]:
    return {"session_id": "s1", "turn": turn}


REGEN, NOGAP = "regenerated", "baseline_no_gaps"


def _ordinary(n: int, injected: int) -> list[ProbeOutcome]:
    return [
        ProbeOutcome(scenario=_case("ordinary", i), disposition=REGEN if i < injected else NOGAP)
        for i in range(n)
    ]


def _gate(results: tuple[_fitness.GateResult, ...], name: str) -> _fitness.GateResult:
    return next(g for g in results if g.name == name)


def _gates_for(outcomes: list[ProbeOutcome], owner: str = "team") -> tuple[Any, ...]:
    runs = {run: _fitness.metrics(run, outcomes) for run in _fitness.RUNS}
    return _fitness.gates(runs, owner=owner, backlog_bound=100)


def test_ordinary_injections_are_counted() -> None:
    """2 of 20 ordinary probes regenerated is a 10% injection rate, which fails; 1 of 20 passes."""
    m = _fitness.metrics("ambient", _ordinary(20, 2))
    assert (m.ordinary, m.ordinary_injected) == (20, 2)
    assert m.misses["ordinary_injected"] == ["ordi-000", "ordi-001"]
    gate = _gate(_gates_for(_ordinary(20, 2)), "ordinary_injection_rate")
    assert gate.value == 0.1 and not gate.passed and "10.0%" in gate.failure
    assert _gate(_gates_for(_ordinary(20, 1)), "ordinary_injection_rate").passed


def test_conditional_hit_needs_every_condition() -> None:
    """A conditional hit needs regeneration, every evidence turn covered, no stale-only record and
    no record unrelated to the evidence (unless the case lists it as also admissible)."""
    exp: dict[str, Any] = {
        "evidence": [_ref(0), _ref(1)],
        "stale_evidence": [_ref(2)],
        "answer_keywords": ["k"],
    }
    cases = [
        (REGEN, [_rec("a", 0), _rec("b", 1)], exp, None),
        (NOGAP, [_rec("a", 0), _rec("b", 1)], exp, "conditional_not_applied"),
        (REGEN, [_rec("a", 0)], exp, "conditional_evidence_missing"),
        (REGEN, [_rec("a", 0, 1), _rec("s", 2)], exp, "conditional_stale_admitted"),
        (REGEN, [_rec("a", 0, 1), _rec("x", 3)], exp, "conditional_unrelated_admitted"),
        (REGEN, [_rec("a", 0, 1), _rec("x", 3)], {**exp, "also_admissible": [_ref(3)]}, None),
        (REGEN, [_rec("a", 0, 1), _rec("y", 1, 3)], exp, None),
    ]
    outcomes = [
        ProbeOutcome(scenario=_case("conditional_fact", i, **e), disposition=d, admitted=adm)
        for i, (d, adm, e, _) in enumerate(cases)
    ]
    m = _fitness.metrics("ambient", outcomes)
    assert (m.conditional, m.conditional_hits) == (7, 3)
    for i, (_, _, _, why) in enumerate(cases):
        if why is not None:
            assert m.misses[why] == [f"cond-{i:03d}"], why
    gate = _gate(_gates_for(outcomes), "conditional_fact_recall")
    assert gate.value == round(3 / 7, 4) and not gate.passed


def test_ambient_hit_needs_turn_category_and_content() -> None:
    """The profile must hold a record citing the preference turn, with the expected category
    and the preference keywords; only the ambient run can hit."""
    exp = {
        "preference_category": "answer_style",
        "expected_activation": "ambient",
        "preference_evidence": _ref(3),
        "preference_keywords": ["briefly"],
    }
    right = _rec("p", 3, text="Please always answer briefly.", category="answer_style")
    profiles = [
        [right],
        [_rec("p", 3, text="Please always answer briefly.", category="response_language")],
        [_rec("p", 3, text="Please always answer.", category="answer_style")],
        [_rec("p", 0, text="Please always answer briefly.", category="answer_style")],
        [],
    ]
    outcomes = [
        ProbeOutcome(scenario=_case("ambient_preference", i, **exp), disposition=NOGAP, profile=p)
        for i, p in enumerate(profiles)
    ]
    amb = _fitness.metrics("ambient", outcomes)
    assert (amb.ambient_preferences, amb.ambient_hits) == (5, 1)
    assert amb.misses["ambient_missed"] == [f"ambi-{i:03d}" for i in range(1, 5)]
    assert _fitness.metrics("conditional", outcomes).ambient_hits == 0
    gate = _gate(_gates_for(outcomes), "ambient_preference_recall")
    assert gate.value == 0.2 and not gate.passed


def test_trigger_and_withdrawn_preferences_are_counted() -> None:
    """A trigger-bound preference promoted, or a withdrawn one still in the profile, is counted."""
    trig = {"preference_category": "answer_style", "expected_activation": "conditional"}
    gone = {"preference_category": "answer_style", "expected_activation": "withdrawn"}
    pref = {"preference_evidence": _ref(3)}
    outcomes = [
        ProbeOutcome(
            scenario=_case("ambient_preference", 0, **trig, **pref),
            disposition=NOGAP,
            auto_promoted=[_rec("p", 3)],
        ),
        ProbeOutcome(
            scenario=_case("ambient_preference", 1, **trig, **pref),
            disposition=NOGAP,
            auto_promoted=[_rec("q", 0)],  # another record's promotion is not this case's
        ),
        ProbeOutcome(
            scenario=_case("ambient_preference", 2, **gone, **pref),
            disposition=NOGAP,
            profile=[_rec("p", 3, category="answer_style")],
        ),
        ProbeOutcome(scenario=_case("ambient_preference", 3, **gone, **pref), disposition=NOGAP),
    ]
    m = _fitness.metrics("ambient", outcomes)
    assert (m.trigger_preferences, m.trigger_promotions) == (2, 1)
    assert (m.withdrawn_preferences, m.withdrawn_in_force) == (2, 1)
    results = _gates_for(outcomes)
    assert not _gate(results, "trigger_preference_promotions").passed
    assert not _gate(results, "withdrawn_preferences_in_force").passed


def test_unsafe_promotions_are_counted() -> None:
    """Any automatic promotion in a case without persona is unsafe; in a persona case only one
    resting on the persona's own ambient-preference turns is not; a shared record counts once."""
    exp = {"preference_category": None, "expected_activation": "review_or_conditional"}
    outcomes = [
        ProbeOutcome(scenario=_case("safety", 0, **exp), disposition=NOGAP),
        ProbeOutcome(
            scenario=_case("safety", 1, **exp), disposition=NOGAP, auto_promoted=[_rec("a", 3)]
        ),
        ProbeOutcome(
            scenario=_case("safety", 2, persona="p", **exp),
            disposition=NOGAP,
            auto_promoted=[_rec("b", 3)],
        ),
        ProbeOutcome(
            scenario=_case("safety", 3, persona="p", **exp),
            disposition=NOGAP,
            auto_promoted=[_rec("b", 3), _rec("c", 0, text="x")],
        ),
        ProbeOutcome(
            scenario=_case("safety", 4, persona="p", **exp),
            disposition=NOGAP,
            auto_promoted=[_rec("c", 0, text="x")],
        ),
    ]
    m = _fitness.metrics("ambient", outcomes)
    assert m.safety == 5
    assert m.unsafe_promotions == 2
    assert m.misses["unsafe_promoted"] == ["safe-001", "safe-003", "safe-004"]
    gate = _gate(_gates_for(outcomes), "unsafe_automatic_promotions")
    assert gate.value == 2.0 and not gate.passed


def test_empty_categories_fail_their_gates() -> None:
    """With no cases in a category its gate fails, at the worst value, never a perfect score."""
    results = _gates_for([])
    for name, worst in [
        ("ordinary_injection_rate", 1.0),
        ("conditional_fact_recall", 0.0),
        ("ambient_preference_recall", 0.0),
        ("unsafe_automatic_promotions", 0.0),
    ]:
        gate = _gate(results, name)
        assert not gate.passed and gate.cases == 0 and gate.value == worst, name
        assert "empty category" in gate.failure
    assert _gate(results, "trigger_preference_promotions").passed  # no minimum: none to break


def _full(ordinary_injected: int = 0) -> list[ProbeOutcome]:
    """Outcomes exactly at the category minimums, all hits unless told otherwise."""
    out = _ordinary(MINIMUM_CASES["ordinary"], ordinary_injected)
    cond = {"evidence": [_ref(0)], "answer_keywords": ["k"]}
    out += [
        ProbeOutcome(
            scenario=_case("conditional_fact", i, **cond),
            disposition=REGEN,
            admitted=[_rec("a", 0)],
        )
        for i in range(MINIMUM_CASES["conditional_fact"])
    ]
    amb = {
        "preference_category": "answer_style",
        "expected_activation": "ambient",
        "preference_evidence": _ref(3),
    }
    out += [
        ProbeOutcome(
            scenario=_case("ambient_preference", i, **amb),
            disposition=NOGAP,
            profile=[_rec("p", 3, category="answer_style")],
        )
        for i in range(MINIMUM_CASES["ambient_preference"])
    ]
    safe = {"preference_category": None, "expected_activation": "review_or_conditional"}
    out += [
        ProbeOutcome(scenario=_case("safety", i, **safe), disposition=NOGAP)
        for i in range(MINIMUM_CASES["safety"])
    ]
    return out


def _counts(outcomes: list[ProbeOutcome]) -> dict[str, int]:
    return _fitness.category_counts([o.scenario for o in outcomes])


def test_verdict_needs_the_minimums_and_every_gate() -> None:
    """At the minimums with every gate passing the verdict is pass; one case short it is
    insufficient; a failing gate makes it fail."""
    full = _full()
    assert _fitness.verdict_for(_gates_for(full), _counts(full)) == "pass"
    short = full[1:]  # one ordinary case fewer
    assert _fitness.verdict_for(_gates_for(short), _counts(short)) == "insufficient"
    bad = _full(ordinary_injected=2)
    assert _fitness.verdict_for(_gates_for(bad), _counts(bad)) == "fail"
    assert _fitness.verdict_for(_gates_for(full, owner="unassigned"), _counts(full)) == "fail"


def test_review_backlog_needs_an_owner_and_a_bound() -> None:
    """The backlog gate fails without an owner (saying so) or above the bound, and counts a
    persona's shared review items once."""
    safe = {"preference_category": None, "expected_activation": "review_or_conditional"}
    outcomes = [
        ProbeOutcome(
            scenario=_case("safety", i, persona="p", **safe), disposition=NOGAP, review_pending=7
        )
        for i in range(3)
    ]
    m = _fitness.metrics("ambient", outcomes)
    assert m.review_pending == 7
    runs = {run: m for run in _fitness.RUNS}
    gate = _gate(_fitness.gates(runs, owner="unassigned", backlog_bound=100), "review_backlog")
    assert not gate.passed and "--review-owner" in gate.failure
    assert not _gate(_fitness.gates(runs, owner="kim", backlog_bound=6), "review_backlog").passed
    assert _gate(_fitness.gates(runs, owner="kim", backlog_bound=7), "review_backlog").passed


# -- the runner on real stores ----------------------------------------------------------


def test_small_set_runs_both_runs_and_every_gate(tmp_path: Path) -> None:
    """A small set yields every gate with per-run values, the deletion-test counts, and the
    verdict insufficient (too few cases per category)."""
    result = _run(_small_set(tmp_path))
    assert [g.name for g in result.gates] == GATE_NAMES
    assert set(result.gates[0].runs) == {"ambient", "conditional"}
    assert set(result.gates[2].runs) == {"ambient"}
    assert result.scenario_counts == {
        "ambient_preference": 3,
        "conditional_fact": 3,
        "ordinary": 3,
        "safety": 3,
    }
    assert result.verdict == "insufficient"
    assert result.insufficient["ordinary"] == 3
    for run in result.runs.values():
        d = run.deletion_test
        assert d.improved + d.worse + d.equivalent <= run.dispositions.get("regenerated", 0)
        assert d.labels_stored == d.improved + d.worse + d.equivalent


def test_one_run_replays_as_run_fitness_does(tmp_path: Path) -> None:
    """replay_run gives the metrics of the same run inside run_fitness, byte for byte, and
    refuses a run that does not exist."""
    scenarios = _small_set(tmp_path)
    whole = _run(scenarios)
    bundle = LocalOfflineBundle()
    for name in _fitness.RUNS:
        alone = anyio.run(lambda name=name: _fitness.replay_run(bundle, scenarios, name))
        assert alone.model_dump_json() == whole.runs[name].model_dump_json()
    with pytest.raises(UsageError, match="unknown run 'both'"):
        anyio.run(lambda: _fitness.replay_run(bundle, scenarios, "both"))  # type: ignore[arg-type]


def _persona_subset(tmp_path: Path, expanded: bool) -> Path:
    """Four non-safety cases of one dev persona, as persona references or self-contained."""
    dev = ROOT / "dev"
    persona = _fitness.load_personas(dev)["ines"]
    lines = [json.loads(x) for x in (dev / "ines.jsonl").read_text(encoding="utf-8").splitlines()]
    picked = [x for x in lines if x["label"] != "safety"][::8]
    out = tmp_path / ("expanded" if expanded else "persona")
    (out / "personas").mkdir(parents=True)
    (out / "personas" / "ines.json").write_text(persona.model_dump_json(), encoding="utf-8")
    rows = []
    for x in picked:
        if expanded:
            history = [s.model_dump(mode="json") for s in persona.history]
            x = {k: v for k, v in x.items() if k != "persona"}
            x.update(user=persona.user, history=history + x.get("history", []))
        rows.append(json.dumps(x, ensure_ascii=False))
    (out / "ines.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def test_same_verdict_and_values_twice(tmp_path: Path) -> None:
    """Two runs over the same persona set give the same verdict, gate values and hashes, and
    replaying the persona once per run gives what replaying it in full for every case gives."""
    directory = _persona_subset(tmp_path, expanded=False)
    first, second = _run(directory), _run(directory)
    assert first.verdict == second.verdict
    assert first.gates == second.gates
    assert first.runs == second.runs
    assert first.scenario_set_sha256 == second.scenario_set_sha256
    full = _run(_persona_subset(tmp_path, expanded=True))
    assert [g.runs for g in full.gates] == [g.runs for g in first.gates]
    for run in _fitness.RUNS:
        assert full.runs[run].misses == first.runs[run].misses
        assert full.runs[run].dispositions == first.runs[run].dispositions


def test_scenario_hash_ignores_whitespace_and_sees_content(tmp_path: Path) -> None:
    """The scenario-set hash is over canonical JSON: re-spacing keeps it, an edit changes it,
    and persona files are part of it."""
    directory = _small_set(tmp_path, per_file=1)
    before = _fitness.scenario_set_sha256(directory)
    path = directory / "ordinary.jsonl"
    obj = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(obj, indent=None, separators=(" , ", " : ")) + "\n\n")
    assert _fitness.scenario_set_sha256(directory) == before
    obj["probe"]["text"] += " please"
    path.write_text(json.dumps(obj) + "\n")
    edited = _fitness.scenario_set_sha256(directory)
    assert edited != before
    (directory / "personas").mkdir()
    (directory / "personas" / "p.json").write_text('{"persona": "p"}')
    assert _fitness.scenario_set_sha256(directory) != edited


def test_persona_cases_resolve_and_bad_ones_are_refused(tmp_path: Path) -> None:
    """A case naming a persona replays the persona's history plus its own sessions; an unknown
    persona or a session id clash is an InvalidInputError naming the line."""
    dev = ROOT / "dev"
    scenarios = _fitness.load_scenarios(dev)
    personas = _fitness.load_personas(dev)
    with_extra = next(s for s in scenarios if s.label == "safety" and s.persona)
    persona = personas[str(with_extra.persona)]
    assert with_extra.history[: len(persona.history)] == persona.history
    assert len(with_extra.history) > len(persona.history) == with_extra.shared_sessions
    out = tmp_path / "bad"
    (out / "personas").mkdir(parents=True)
    (out / "personas" / f"{persona.persona}.json").write_text(
        persona.model_dump_json(), encoding="utf-8"
    )
    line = json.loads((dev / f"{persona.persona}.jsonl").read_text().splitlines()[0])
    (out / "x.jsonl").write_text(json.dumps({**line, "persona": "nobody"}) + "\n")
    with pytest.raises(_fitness.InvalidInputError, match=r"x.jsonl:1: persona"):
        _fitness.load_scenarios(out)
    clash = {**line, "history": [persona.history[0].model_dump(mode="json")]}
    (out / "x.jsonl").write_text(json.dumps(clash) + "\n")
    with pytest.raises(_fitness.InvalidInputError, match=r"x.jsonl:1: history"):
        _fitness.load_scenarios(out)


def test_unassigned_owner_fails_the_backlog_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a review owner the backlog gate fails and says why; RETOLD_REVIEW_OWNER names one."""
    monkeypatch.delenv("RETOLD_REVIEW_OWNER", raising=False)
    directory = _small_set(tmp_path, per_file=1)
    result = _run(directory, bundle=LocalOfflineBundle(owner=None))
    backlog = next(g for g in result.gates if g.name == "review_backlog")
    assert result.review_owner == "unassigned"
    assert not backlog.passed and "no review owner" in backlog.failure
    monkeypatch.setenv("RETOLD_REVIEW_OWNER", "kim")
    result = _run(directory, bundle=LocalOfflineBundle(owner=None))
    assert result.review_owner == "kim"
    assert next(g for g in result.gates if g.name == "review_backlog").passed


def test_record_and_read_back(tmp_path: Path) -> None:
    """record_fitness stores the hashes, gates, counts and verdict; recorded_fitness reads the
    newest; an insufficient result never counts as passed."""
    result = _run(_small_set(tmp_path, per_file=1))
    store = SQLiteStore(tmp_path / "host.db")
    assert recorded_fitness(store, result.bundle_sha256) is None
    first = record_fitness(store, result)
    again = record_fitness(store, result)
    got = recorded_fitness(store, result.bundle_sha256)
    assert got is not None and got.id == again.id > first.id
    assert got.verdict == result.verdict == "insufficient"
    assert got.scenario_set_sha256 == result.scenario_set_sha256
    assert got.gates == result.gates
    assert got.category_counts == result.category_counts
    assert not got.passed
    forged = record_fitness(store, result.model_copy(update={"verdict": "pass"}))
    assert forged.verdict == "pass" and not forged.passed  # too few cases behind it
    assert recorded_fitness(store, "cd" * 32) is None
    store.close()


def test_model_bundle_without_model_is_refused(tmp_path: Path) -> None:
    """A bundle that is not offline needs a model."""
    bundle = LocalOfflineBundle()
    bundle.offline = False
    with pytest.raises(UsageError, match="needs a model"):
        _run(_small_set(tmp_path, per_file=1), bundle=bundle)


def test_held_out_split_counts_add_up() -> None:
    """On the packaged test split (the gating set, run once here) the shipped offline bundle
    gets a real verdict, and every case is either a hit or a miss with a reason."""
    from retold.policy.reference import get_bundle

    result = _run(ROOT / "test", bundle=get_bundle("offline-reference"), review_owner="team")
    assert result.verdict in ("pass", "fail") and not result.insufficient
    for name, m in result.runs.items():
        cond_misses = sum(len(v) for k, v in m.misses.items() if k.startswith("conditional_"))
        assert m.conditional_hits + cond_misses == m.conditional == 56, name
        assert m.ordinary_injected == len(m.misses.get("ordinary_injected", []))
        assert m.ordinary == result.category_counts["ordinary"]
        assert sum(m.dispositions.values()) == sum(result.scenario_counts.values())
    amb = result.runs["ambient"]
    assert amb.ambient_hits + len(amb.misses.get("ambient_missed", [])) == amb.ambient_preferences


# -- the command line -------------------------------------------------------------------


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
    assert status == 1 and data["verdict"] == "insufficient"
    assert data["scenario_set_sha256"] == _fitness.scenario_set_sha256(directory)
    assert data["minimum_cases"] == dict(MINIMUM_CASES)
    for gate in data["gates"]:
        assert {"name", "value", "threshold", "passed", "cases", "failure"} <= set(gate)
    text = report.read_text(encoding="utf-8")
    assert "deterministic local responder" in text and "## Metric definitions" in text
    assert "insufficient: ordinary has 1 cases" in text
    store = SQLiteStore(db)
    got = recorded_fitness(store, "ab" * 32)
    assert got is not None and got.id == data["recorded_id"]
    store.close()


def test_cli_text_says_why_each_gate_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report names the reason beside every failing gate and every short category."""
    monkeypatch.setattr(_fitness, "load_bundle", lambda name: LocalOfflineBundle(owner=None))
    monkeypatch.delenv("RETOLD_REVIEW_OWNER", raising=False)
    argv = ["fitness", "--bundle", "offline-reference"]
    assert main([*argv, "--scenarios", str(_small_set(tmp_path, per_file=1))]) == 1
    out = capsys.readouterr().out
    assert "INSUFFICIENT" in out
    assert "FAIL  review_backlog" in out
    assert "why: no review owner is assigned: pass --review-owner NAME" in out
    for line in out.splitlines():
        if line.strip().startswith("FAIL"):
            following = out.split(line, 1)[1].splitlines()[1]
            assert following.strip().startswith("why:"), line


def test_cli_default_scenarios_is_the_test_split() -> None:
    """Without --scenarios the CLI gates on the packaged held-out test split."""
    from retold.cli._fitness import default_scenarios

    directory = default_scenarios()
    assert directory.name == "test" and directory.parent.name == "scenarios"
    assert _fitness.scenario_set_sha256(directory) == _fitness.scenario_set_sha256(ROOT / "test")


def test_cli_record_needs_db(capsys: pytest.CaptureFixture[str]) -> None:
    """``--record`` without ``--db`` is a usage error (exit 2)."""
    assert main(["fitness", "--bundle", "offline-reference", "--record"]) == 2
    assert "--db" in capsys.readouterr().err
