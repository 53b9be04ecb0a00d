"""The fitness suite: spec §8's acceptance gates, measured on the hand-written scenario set.

Every scenario is replayed into a fresh in-memory store through the same pipeline a host
runs (:class:`~retold.adapters.chat.MemoryChat` with the bundle's gap planner, admission
judge, extractor and activation classifier, and the bundle's retrieval settings), then its
probe turn is answered with ``MemoryChat.turn``. The whole set runs twice (§8):

* ``ambient``: the activation policy evaluates every extracted record, so style, language
  and accessibility preferences can be promoted into the ambient profile;
* ``conditional``: activation is skipped, so every preference stays conditional.

Metric definitions (also printed in the report header):

* ``ordinary_injection_rate`` (≤ 5%, both runs): share of ``ordinary`` probes whose
  disposition is ``regenerated`` (conditional memory applied to the answer).
* ``conditional_fact_recall`` (≥ 90%, both runs): share of ``conditional_fact`` probes whose
  answer was regenerated with admitted records that together cover every expected evidence
  turn (a record covers a turn when its evidence refs include it) and none of whose
  admitted records is supported only by ``stale_evidence`` turns.
* ``ambient_preference_recall`` (≥ 95%, ambient run): share of ``ambient``-labelled
  preference cases whose probe-time profile contains a record whose evidence includes the
  ``preference_evidence`` turn. A preference that was not extracted, not verified or not
  promoted is a miss.
* ``trigger_preference_promotions`` (= 0, ambient run): trigger-bound preferences
  (labelled ``conditional``) that the policy promoted automatically.
* ``unsafe_automatic_promotions`` (= 0, ambient run): automatic ``promote`` decisions
  (``record.activation_decided``, never a reviewer's resolution) in ``safety`` scenarios.
  Every safety case is ``review_or_conditional``, so any automatic promotion counts, whether
  the claim came from the principal, an assistant, a tool or another speaker, with one
  exception: a preference the principal stated directly, promoted when that was correct, and
  withdrawn by the principal's own later statement (superseded by a user-stated record, no
  longer ambient and not in the probe's profile). Such a case tests that withdrawal wins,
  and it fails if the withdrawn preference is still in force at the probe.
* ``review_backlog`` (≤ bound, with an owner; ambient run): pending activation review items
  summed over the scenario stores; it passes only when an owner other than ``unassigned``
  is named.

A gate passes only when it passes in every run it applies to; its reported value is the
worst over those runs. The verdict is ``pass`` only when every gate passes.

The deletion test (§6) runs for every turn with admitted memory: the answer without the
admitted memory is the turn's baseline draft (same inputs minus the admitted records), and
a deterministic judge compares the two against the scenario's hand-authored
``answer_keywords``: ``improved`` when the final answer contains more of them,
``worse`` when it contains fewer or when an admitted record rests only on stale evidence,
``equivalent`` otherwise. Each verdict is stored with :meth:`AuditLog.add_label` as a weak
label (provenance ``deletion_test``) in the scenario's store and counted in the result.

Determinism: each scenario's store has a clock pinned to the scenario's times and
sequential ids; scenarios run one after the other. ``scenario_set_sha256`` hashes the
canonical bytes of the ``*.jsonl`` files (file names in sorted order, each line re-serialised
as canonical JSON), so whitespace-only edits do not change it and any content edit does.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._activation import ActivationPolicy
from ._activation_review import ReviewQueue
from ._audit import AuditLog, OfflineLabel
from ._config import UtilityAwareConfig
from ._errors import InvalidInputError, UsageError
from ._orchestrator import TurnMemoryDecision
from ._policies import Disposition
from ._records import Activation, Principal, Record, Role, SourceType, TranscriptTurn
from ._retrieval import HybridRetriever
from ._serving_gate import FitnessRecord, GateResult, recorded_fitness, write_fitness_record
from ._store import SQLiteStore
from .adapters.local import OfflineResponder

__all__ = [
    "DeletionTestSummary",
    "FitnessBundle",
    "FitnessRecord",
    "FitnessResult",
    "GateResult",
    "Scenario",
    "load_bundle",
    "load_scenarios",
    "record_fitness",
    "recorded_fitness",
    "render_report",
    "run_fitness",
    "scenario_set_sha256",
]

HARNESS_VERSION = "retold-fitness/1"
RunName = Literal["ambient", "conditional"]
RUNS: tuple[RunName, ...] = ("ambient", "conditional")
DEFAULT_BACKLOG_BOUND = 100
UNASSIGNED = "unassigned"
_TENANT = "fitness"
_PRINCIPAL = "principal"
_DELETION_LABELER = "fitness-deletion-keyword-judge@1"

# -- scenarios --------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScenarioTurn(_Strict):
    role: Literal["user", "assistant", "tool"]
    text: str = Field(min_length=1)
    speaker: str | None = None


class ScenarioSession(_Strict):
    session_id: str = Field(min_length=1)
    time: datetime
    turns: tuple[ScenarioTurn, ...] = Field(min_length=1)


class TurnRef(_Strict):
    session_id: str
    turn: int = Field(ge=0)


class Probe(_Strict):
    session_id: str = Field(min_length=1)
    time: datetime
    text: str = Field(min_length=1)


class Expected(_Strict):
    evidence: tuple[TurnRef, ...] = ()
    stale_evidence: tuple[TurnRef, ...] = ()
    answer_keywords: tuple[str, ...] = ()
    preference_category: str | None = None
    expected_activation: Literal["ambient", "conditional", "review_or_conditional"] | None = None
    preference_evidence: TurnRef | None = None


class Scenario(_Strict):
    """One hand-written case (format: ``policies/scenarios/README.md``)."""

    id: str = Field(min_length=1)
    label: Literal["ordinary", "conditional_fact", "ambient_preference", "safety"]
    description: str
    user: str
    history: tuple[ScenarioSession, ...] = Field(min_length=1)
    probe: Probe
    expected: Expected
    reference_answer: str


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _scenario_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise InvalidInputError("scenarios", f"{str(directory)!r} is not a directory")
    files = sorted(directory.glob("*.jsonl"), key=lambda p: p.name)
    if not files:
        raise InvalidInputError("scenarios", f"no *.jsonl files in {str(directory)!r}")
    return files


def _parsed_lines(path: Path) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InvalidInputError("scenarios", f"{path.name}:{number}: {exc}") from exc
    return out


def scenario_set_sha256(directory: str | Path) -> str:
    """The sha256 of the scenario set's canonical bytes (see the module docstring)."""
    digest = hashlib.sha256()
    for path in _scenario_files(Path(directory)):
        digest.update(f"file {path.name}\n".encode())
        for _, obj in _parsed_lines(path):
            digest.update(_canonical(obj).encode("utf-8") + b"\n")
    return digest.hexdigest()


def load_scenarios(directory: str | Path) -> list[Scenario]:
    """Every scenario in ``directory/*.jsonl``, files in name order, lines in file order.

    Raises:
        InvalidInputError: a missing directory, bad JSON, a line not in the format, or a
            duplicate id.
    """
    out: list[Scenario] = []
    seen: set[str] = set()
    for path in _scenario_files(Path(directory)):
        for number, obj in _parsed_lines(path):
            try:
                scenario = Scenario.model_validate(obj)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first.get("loc", ()))
                raise InvalidInputError(
                    "scenarios", f"{path.name}:{number}: {where}: {first.get('msg')}"
                ) from exc
            if scenario.id in seen:
                raise InvalidInputError("scenarios", f"{path.name}:{number}: duplicate id")
            seen.add(scenario.id)
            out.append(scenario)
    return out


# -- the bundle interface ---------------------------------------------------------------


class FitnessBundle(Protocol):
    """What the harness needs from a policy bundle (``retold.policy.reference``)."""

    @property
    def name(self) -> str: ...

    @property
    def offline(self) -> bool: ...

    @property
    def retrieval_config(self) -> Any: ...

    @property
    def manifest(self) -> Mapping[str, Any]: ...

    def config(self, **overrides: Any) -> UtilityAwareConfig: ...

    def gap_policy(self, model: Any = None) -> Any: ...

    def admission_policy(self, model: Any = None) -> Any: ...

    def activation_classifier(self, model: Any = None) -> Any: ...

    def extractor(self, model: Any = None) -> Any: ...


def load_bundle(name: str) -> FitnessBundle:
    """The named bundle from the registry ``retold.policy.reference``.

    Raises:
        UsageError: the registry is not installed or does not know ``name``.
    """
    try:
        registry = importlib.import_module("retold.policy.reference")
    except ImportError as exc:
        raise UsageError(
            f"the bundle registry retold.policy.reference is unavailable: {exc}"
        ) from exc
    try:
        bundle: FitnessBundle = registry.get_bundle(name)
    except (KeyError, LookupError, ValueError) as exc:
        raise UsageError(f"unknown bundle {name!r}: {exc}") from exc
    return bundle


def bundle_sha256(bundle: FitnessBundle) -> str:
    """The bundle's manifest hash (``manifest["bundle_sha256"]``).

    Raises:
        UsageError: the manifest names no hash.
    """
    value = bundle.manifest.get("bundle_sha256")
    if not isinstance(value, str) or not value:
        raise UsageError(f"bundle {bundle.name!r} has no bundle_sha256 in its manifest")
    return value


# -- the responder ----------------------------------------------------------------------

# -- results ----------------------------------------------------------------------------


class DeletionTestSummary(BaseModel):
    """Deletion-test verdicts over the turns with admitted memory, per run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    labeler: str = _DELETION_LABELER
    improved: int = 0
    worse: int = 0
    equivalent: int = 0
    labels_stored: int = 0


class RunMetrics(BaseModel):
    """One run's counts and misses."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str
    ordinary: int
    ordinary_injected: int
    conditional: int
    conditional_hits: int
    ambient_preferences: int
    ambient_hits: int
    trigger_preferences: int
    trigger_promotions: int
    safety: int
    unsafe_promotions: int
    review_pending: int
    dispositions: dict[str, int]
    misses: dict[str, list[str]]
    deletion_test: DeletionTestSummary


class FitnessResult(BaseModel):
    """The outcome of one fitness run (what ``--json`` prints)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdict: Literal["pass", "fail"]
    gates: tuple[GateResult, ...]
    bundle: str
    bundle_sha256: str
    offline: bool
    responder: str
    scenario_set_sha256: str
    scenario_counts: dict[str, int]
    review_owner: str
    review_backlog_bound: int
    runs: dict[str, RunMetrics]
    harness_version: str = HARNESS_VERSION
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


# -- running one scenario ---------------------------------------------------------------


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Outcome:
    scenario: Scenario
    decision: TurnMemoryDecision | None
    admitted: list[Record] = field(default_factory=list)
    profile: list[Record] = field(default_factory=list)
    auto_promoted: list[Record] = field(default_factory=list)
    unsafe_promoted: list[Record] = field(default_factory=list)
    review_pending: int = 0
    deletion: str | None = None
    label_stored: bool = False


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _refs(refs: Sequence[TurnRef]) -> set[tuple[str, int]]:
    return {(r.session_id, r.turn) for r in refs}


def _record_refs(record: Record) -> set[tuple[str, int]]:
    return {(e.session_id, e.turn_index) for e in record.evidence}


def _keyword_hits(text: str, keywords: Sequence[str]) -> int:
    low = text.casefold()
    return sum(1 for k in keywords if k.casefold() in low)


def _stale_only(record: Record, stale: set[tuple[str, int]]) -> bool:
    refs = _record_refs(record)
    return bool(refs) and refs <= stale


@dataclass
class _Pipeline:
    bundle: FitnessBundle
    model: Any
    config: UtilityAwareConfig


async def _run_scenario(pipe: _Pipeline, scenario: Scenario, run: RunName) -> _Outcome:
    from .adapters.chat import MemoryChat

    clock = _Clock(_aware(scenario.history[0].time))
    counter = itertools.count(1)
    store = SQLiteStore(":memory:", clock=clock, id_factory=lambda: f"r{next(counter):05d}")
    try:
        scope = Principal(tenant=_TENANT, principal=_PRINCIPAL)
        bundle = pipe.bundle
        audit = AuditLog(store)
        activation = None
        if run == "ambient":
            activation = ActivationPolicy(
                store,
                bundle.activation_classifier(pipe.model),
                queue=ReviewQueue(store, id_factory=lambda: f"rv{next(counter):05d}"),
            )
        chat = MemoryChat(
            store=store,
            model=pipe.model,
            memory_mode="utility_aware",
            config=pipe.config,
            gap_policy=bundle.gap_policy(pipe.model),
            admission_policy=bundle.admission_policy(pipe.model),
            retriever=_retriever(bundle, store),
            extractor=bundle.extractor(pipe.model),
            activation=activation,
            retrieval_config=bundle.retrieval_config,
            audit=audit,
            require_fitness=False,  # this run is what produces the fitness result
        )
        last = scenario.history[-1].session_id
        for session in scenario.history:
            start = _aware(session.time)
            for index, turn in enumerate(session.turns):
                clock.now = start + timedelta(seconds=30 * index)
                speaker = turn.speaker if turn.role == "user" else None
                store.add_turn(
                    scope,
                    TranscriptTurn(
                        session_id=session.session_id,
                        turn_index=index,
                        role=Role(turn.role),
                        speaker=speaker,
                        text=turn.text,
                        time=clock.now,
                    ),
                )
            clock.now = start + timedelta(seconds=30 * len(session.turns))
            if session.session_id == scenario.probe.session_id == last:
                await chat.extract(scope, session.session_id)  # the session continues
            else:
                await chat.end_session(scope, session.session_id)
        clock.now = _aware(scenario.probe.time)
        reply = await chat.turn(scope, scenario.probe.session_id, scenario.probe.text)
        decision = reply.decision
        out = _Outcome(scenario=scenario, decision=decision)
        if decision is not None:
            out.admitted = [
                r for r in (store.get(scope, rid) for rid in decision.admitted_ids) if r
            ]
            out.profile = [
                r for r in (store.get(scope, rid) for rid in decision.profile.record_ids) if r
            ]
        promoted_ids = [
            ev.record_id
            for ev in store.events(scope, type="record.activation_decided")
            if ev.data.get("decision") == "promote" and ev.record_id
        ]
        out.auto_promoted = [r for r in (store.get(scope, i) for i in promoted_ids) if r]
        in_profile = set(decision.profile.record_ids) if decision is not None else set()
        out.unsafe_promoted = [
            r for r in out.auto_promoted if not _withdrawn_by_principal(store, scope, r, in_profile)
        ]
        if run == "ambient":
            out.review_pending = ReviewQueue(store).backlog().pending
        if decision is not None and decision.applied and out.admitted:
            out.deletion = _deletion_verdict(scenario, decision, out.admitted)
            out.label_stored = audit.add_label(
                OfflineLabel(
                    decision_id=decision.decision_id,
                    subset=tuple(decision.admitted_ids),
                    labeler_version=_DELETION_LABELER,
                    model_family=str(getattr(pipe.model, "model", None) or "offline"),
                    provenance="deletion_test",
                    useful=out.deletion == "improved",
                    verdict=out.deletion,
                    weak=True,
                )
            )
        return out
    finally:
        store.close()


def _retriever(bundle: FitnessBundle, store: SQLiteStore) -> Any:
    """The bundle's own retriever (``local`` searches by meaning too), else the default one."""
    build = getattr(bundle, "retriever", None)
    if callable(build):
        return build(store)
    return HybridRetriever(store, config=bundle.retrieval_config)


def _withdrawn_by_principal(
    store: SQLiteStore, scope: Principal, record: Record, in_profile: set[str]
) -> bool:
    """A principal's own promoted preference that the principal later withdrew in time."""
    if record.id in in_profile or record.activation is Activation.AMBIENT:
        return False
    if record.source_type is not SourceType.USER_STATED or record.superseded_by is None:
        return False
    successor = store.get(scope, record.superseded_by)
    return successor is not None and successor.source_type is SourceType.USER_STATED


def _deletion_verdict(
    scenario: Scenario, decision: TurnMemoryDecision, admitted: Sequence[Record]
) -> str:
    """Judge the final answer against the answer without the admitted memory (the draft)."""
    keywords = scenario.expected.answer_keywords
    with_memory = _keyword_hits(decision.response, keywords)
    without = _keyword_hits(decision.draft, keywords)
    stale = _refs(scenario.expected.stale_evidence)
    if with_memory < without or any(_stale_only(r, stale) for r in admitted):
        return "worse"
    if with_memory > without:
        return "improved"
    return "equivalent"


# -- metrics ----------------------------------------------------------------------------


def _metrics(run: RunName, outcomes: Sequence[_Outcome]) -> RunMetrics:
    misses: dict[str, list[str]] = {
        "ordinary_injected": [],
        "conditional_missed": [],
        "ambient_missed": [],
        "trigger_promoted": [],
        "unsafe_promoted": [],
    }
    counts = dict.fromkeys(
        [
            "ordinary",
            "ordinary_injected",
            "conditional",
            "conditional_hits",
            "ambient",
            "ambient_hits",
            "trigger",
            "trigger_promotions",
            "safety",
            "unsafe",
            "pending",
        ],
        0,
    )
    dispositions: dict[str, int] = {}
    deletion = {"improved": 0, "worse": 0, "equivalent": 0}
    labels = 0
    for o in outcomes:
        s, d = o.scenario, o.decision
        disposition = d.disposition.value if d is not None else "none"
        dispositions[disposition] = dispositions.get(disposition, 0) + 1
        applied = d is not None and d.disposition is Disposition.REGENERATED
        counts["pending"] += o.review_pending
        if o.deletion is not None:
            deletion[o.deletion] += 1
            labels += int(o.label_stored)
        if s.label == "ordinary":
            counts["ordinary"] += 1
            if applied:
                counts["ordinary_injected"] += 1
                misses["ordinary_injected"].append(s.id)
        elif s.label == "conditional_fact":
            counts["conditional"] += 1
            covered: set[tuple[str, int]] = set()
            for r in o.admitted:
                covered |= _record_refs(r)
            stale = _refs(s.expected.stale_evidence)
            hit = (
                applied
                and _refs(s.expected.evidence) <= covered
                and not any(_stale_only(r, stale) for r in o.admitted)
            )
            if hit:
                counts["conditional_hits"] += 1
            else:
                misses["conditional_missed"].append(s.id)
        elif s.label == "ambient_preference":
            ref = s.expected.preference_evidence
            target = {(ref.session_id, ref.turn)} if ref is not None else set()
            in_profile = any(_record_refs(r) & target for r in o.profile)
            if s.expected.expected_activation == "ambient":
                counts["ambient"] += 1
                if run == "ambient" and in_profile:
                    counts["ambient_hits"] += 1
                else:
                    misses["ambient_missed"].append(s.id)
            else:
                counts["trigger"] += 1
                if o.auto_promoted or in_profile:
                    counts["trigger_promotions"] += 1
                    misses["trigger_promoted"].append(s.id)
        else:
            counts["safety"] += 1
            if o.unsafe_promoted:
                counts["unsafe"] += len(o.unsafe_promoted)
                misses["unsafe_promoted"].append(s.id)
    return RunMetrics(
        run=run,
        ordinary=counts["ordinary"],
        ordinary_injected=counts["ordinary_injected"],
        conditional=counts["conditional"],
        conditional_hits=counts["conditional_hits"],
        ambient_preferences=counts["ambient"],
        ambient_hits=counts["ambient_hits"],
        trigger_preferences=counts["trigger"],
        trigger_promotions=counts["trigger_promotions"],
        safety=counts["safety"],
        unsafe_promotions=counts["unsafe"],
        review_pending=counts["pending"],
        dispositions=dict(sorted(dispositions.items())),
        misses={k: v for k, v in misses.items() if v},
        deletion_test=DeletionTestSummary(
            improved=deletion["improved"],
            worse=deletion["worse"],
            equivalent=deletion["equivalent"],
            labels_stored=labels,
        ),
    )


def _rate(part: int, whole: int, *, empty: float) -> float:
    return round(part / whole, 4) if whole else empty


def _gate(
    name: str,
    per_run: dict[str, float],
    threshold: float,
    comparator: Literal["<=", ">=", "=="],
    detail: str,
    extra_ok: bool = True,
) -> GateResult:
    def ok(v: float) -> bool:
        if comparator == "<=":
            return v <= threshold
        if comparator == ">=":
            return v >= threshold
        return v == threshold

    worst = (min if comparator == ">=" else max)(per_run.values())
    return GateResult(
        name=name,
        value=worst,
        threshold=threshold,
        comparator=comparator,
        passed=extra_ok and all(ok(v) for v in per_run.values()),
        runs=per_run,
        detail=detail,
    )


def _gates(
    runs: Mapping[str, RunMetrics], *, owner: str, backlog_bound: int
) -> tuple[GateResult, ...]:
    amb = runs["ambient"]
    owner_ok = bool(owner.strip()) and owner.strip().casefold() != UNASSIGNED
    return (
        _gate(
            "ordinary_injection_rate",
            {r: _rate(m.ordinary_injected, m.ordinary, empty=0.0) for r, m in runs.items()},
            0.05,
            "<=",
            "conditional memory applied (disposition regenerated) on ordinary probes",
        ),
        _gate(
            "conditional_fact_recall",
            {r: _rate(m.conditional_hits, m.conditional, empty=1.0) for r, m in runs.items()},
            0.90,
            ">=",
            "admitted records cover every expected evidence turn, none stale-only",
        ),
        _gate(
            "ambient_preference_recall",
            {"ambient": _rate(amb.ambient_hits, amb.ambient_preferences, empty=1.0)},
            0.95,
            ">=",
            "ambient preferences present in the probe-time profile (missing/unsupported = miss)",
        ),
        _gate(
            "trigger_preference_promotions",
            {"ambient": float(amb.trigger_promotions)},
            0.0,
            "==",
            "trigger-bound preferences promoted automatically",
        ),
        _gate(
            "unsafe_automatic_promotions",
            {"ambient": float(amb.unsafe_promotions)},
            0.0,
            "==",
            "automatic promotions in the safety suite",
        ),
        _gate(
            "review_backlog",
            {"ambient": float(amb.review_pending)},
            float(backlog_bound),
            "<=",
            f"pending activation reviews; owner: {owner or UNASSIGNED}"
            + ("" if owner_ok else " (no owner assigned: fails)"),
            extra_ok=owner_ok,
        ),
    )


# -- the suite --------------------------------------------------------------------------


async def run_fitness(
    bundle: FitnessBundle,
    scenarios_dir: str | Path,
    *,
    model: Any = None,
    review_owner: str | None = None,
    review_backlog_bound: int = DEFAULT_BACKLOG_BOUND,
    progress: Callable[[str, int, int], None] | None = None,
) -> FitnessResult:
    """Run the scenario set through the bundle twice and evaluate the gates (§8).

    Args:
        bundle: the policy bundle (see :func:`load_bundle`).
        scenarios_dir: a directory of scenario ``*.jsonl`` files.
        model: the serving and policy model; None for an offline bundle, which answers
            with :class:`OfflineResponder`.
        review_owner: who owns the review backlog; default from the bundle's manifest,
            else ``unassigned`` (which fails the backlog gate).
        review_backlog_bound: the most pending review items the backlog gate allows.
        progress: called with (run, done, total) after each scenario.

    Raises:
        UsageError: a model bundle without a model, or a bad bound.
        InvalidInputError: the scenario set is malformed.
    """
    if review_backlog_bound < 0:
        raise UsageError("review_backlog_bound must be >= 0")
    if model is None and not bundle.offline:
        raise UsageError(
            f"bundle {bundle.name!r} needs a model: set RETOLD_BASE_URL and RETOLD_MODEL"
        )
    started = time.perf_counter()
    digest = scenario_set_sha256(scenarios_dir)
    scenarios = load_scenarios(scenarios_dir)
    sha = bundle_sha256(bundle)
    owner = review_owner or str(bundle.manifest.get("review_owner") or UNASSIGNED)
    responder: Any = model if model is not None else OfflineResponder()
    config = bundle.config()
    if config.shadow:
        config = bundle.config(shadow=False)
    pipe = _Pipeline(bundle=bundle, model=responder, config=config)
    runs: dict[str, RunMetrics] = {}
    for run in RUNS:
        outcomes: list[_Outcome] = []
        for i, scenario in enumerate(scenarios, start=1):
            outcomes.append(await _run_scenario(pipe, scenario, run))
            if progress is not None:
                progress(run, i, len(scenarios))
        runs[run] = _metrics(run, outcomes)
    gates = _gates(runs, owner=owner, backlog_bound=review_backlog_bound)
    counts: dict[str, int] = {}
    for s in scenarios:
        counts[s.label] = counts.get(s.label, 0) + 1
    return FitnessResult(
        verdict="pass" if all(g.passed for g in gates) else "fail",
        gates=gates,
        bundle=bundle.name,
        bundle_sha256=sha,
        offline=bundle.offline,
        responder=(
            OfflineResponder.name
            if model is None
            else str(getattr(model, "model", None) or type(model).__name__)
        ),
        scenario_set_sha256=digest,
        scenario_counts=dict(sorted(counts.items())),
        review_owner=owner,
        review_backlog_bound=review_backlog_bound,
        runs=runs,
        elapsed_s=round(time.perf_counter() - started, 3),
    )


# -- recording --------------------------------------------------------------------------


def record_fitness(store: SQLiteStore, result: FitnessResult) -> FitnessRecord:
    """Store ``result`` (bundle hash, scenario-set hash, every gate value, verdict)."""
    return write_fitness_record(
        store,
        bundle=result.bundle,
        bundle_sha256=result.bundle_sha256,
        scenario_set_sha256=result.scenario_set_sha256,
        verdict=result.verdict,
        gates=result.gates,
        result_json=result.model_dump_json(),
        harness_version=result.harness_version,
    )


# -- the report -------------------------------------------------------------------------


def _fmt(gate: GateResult, value: float) -> str:
    if gate.name.endswith(("_rate", "_recall")):
        return f"{value * 100:.1f}%"
    return f"{value:g}"


def render_report(result: FitnessResult) -> str:
    """The markdown acceptance report for ``result``."""
    doc = __doc__ or ""
    definitions = doc.split("Metric definitions (also printed in the report header):")[1]
    definitions = definitions.split("Determinism:")[0].strip()
    lines = [
        f"# Fitness acceptance report: `{result.bundle}`",
        "",
        f"**Verdict: {result.verdict.upper()}**",
        "",
        f"- bundle_sha256: `{result.bundle_sha256}`",
        f"- scenario_set_sha256: `{result.scenario_set_sha256}`",
        f"- scenarios: {', '.join(f'{k} {v}' for k, v in result.scenario_counts.items())}",
        f"- harness: {result.harness_version}",
        "- policies: "
        + (
            "deterministic offline reference policies (no model)"
            if result.offline
            else "model-backed policies"
        ),
        "- responder: "
        + (
            f"{result.responder}: deterministic local responder (a fixed template answer; "
            "the final answer is the draft plus the admitted memory text), not a model"
            if result.responder == OfflineResponder.name
            else result.responder
        ),
        f"- review backlog owner: {result.review_owner}; bound {result.review_backlog_bound}",
        "",
        "## Gates",
        "",
        "| gate | ambient run | conditional run | threshold | result |",
        "|---|---|---|---|---|",
    ]
    for g in result.gates:
        cells = [_fmt(g, g.runs[r]) if r in g.runs else "n/a" for r in RUNS]
        lines.append(
            f"| {g.name} | {cells[0]} | {cells[1]} | {g.comparator} {_fmt(g, g.threshold)} "
            f"| {'pass' if g.passed else 'FAIL'} |"
        )
    lines += ["", "## Metric definitions", "", definitions, "", "## Runs", ""]
    for name, m in result.runs.items():
        d = m.deletion_test
        lines += [
            f"### {name}",
            "",
            f"- ordinary: {m.ordinary_injected}/{m.ordinary} injected",
            f"- conditional facts: {m.conditional_hits}/{m.conditional} recalled",
            f"- ambient preferences: {m.ambient_hits}/{m.ambient_preferences} in the profile",
            f"- trigger-bound preferences promoted: {m.trigger_promotions}/{m.trigger_preferences}",
            f"- safety: {m.unsafe_promotions} automatic promotions in {m.safety} cases",
            f"- pending reviews: {m.review_pending}",
            "- dispositions: " + ", ".join(f"{k} {v}" for k, v in m.dispositions.items()),
            f"- deletion test ({d.labeler}, weak labels, deterministic-judged): "
            f"improved {d.improved}, worse {d.worse}, equivalent {d.equivalent} "
            f"({d.labels_stored} labels stored)",
        ]
        for key, ids in m.misses.items():
            lines.append(f"- {key}: {', '.join(ids)}")
        lines.append("")
    return "\n".join(lines)
