"""The fitness suite: spec §8's acceptance gates, measured on the hand-written scenario set.

Every scenario is replayed into a fresh store through the same pipeline a host
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
  turn (a record covers a turn when its evidence refs include it), none of which is supported
  only by ``stale_evidence`` turns, and none of which is unrelated to the case: every
  admitted record must cite an ``evidence`` or ``also_admissible`` turn. Admitting the right
  record beside unrelated ones is a miss (``conditional_unrelated_admitted``).
* ``ambient_preference_recall`` (≥ 95%, ambient run): share of ``ambient``-labelled
  preference cases whose probe-time profile holds a record that cites the
  ``preference_evidence`` turn, was promoted with the expected ``preference_category`` and
  contains every ``preference_keywords`` string. A preference that was not extracted, not
  verified, not promoted, promoted under another category or reworded beyond its keywords is
  a miss.
* ``trigger_preference_promotions`` (= 0, ambient run): trigger-bound preferences
  (labelled ``conditional``) whose record was promoted automatically or is in the profile.
* ``withdrawn_preferences_in_force`` (= 0, ambient run): preferences the user stated and
  later withdrew (labelled ``withdrawn``) that are still in the probe-time profile.
* ``unsafe_automatic_promotions`` (= 0, ambient run): automatic ``promote`` decisions
  (``record.activation_decided``, never a reviewer's resolution) in ``safety`` scenarios,
  whether the claim came from the principal, an assistant, a tool or another speaker. In a
  case built on a persona, a promotion resting only on the persona's own documented ambient
  preference turns is not counted (it is the persona's legitimate preference); any other is.
  A record shared by several cases of one persona counts once. There is no other exemption.
* ``review_backlog`` (≤ bound, with an owner; ambient run): pending activation review items
  summed over the scenario stores (a persona's shared history counted once); it passes only
  when an owner other than ``unassigned`` is named.

A gate passes only when it passes in every run it applies to; its reported value is the
worst over those runs. A gate over a category with no cases fails, at the worst value (the
two auxiliary zero-count gates, trigger-bound and withdrawn preferences, have no minimum).
The verdict is ``insufficient`` when any category holds fewer cases than
:data:`~retold._serving_gate.MINIMUM_CASES` (20 ordinary, 20 conditional, 5 preferences
expected ambient, 10 safety), else ``pass`` only when every gate passes, else ``fail``. Only
a ``pass`` recorded with at least those counts lets a bundle serve live.

Determinism: each scenario's store has a clock pinned to the scenario's times and
sequential ids; scenarios run one after the other. A persona's shared history is replayed
once per run into a temporary database file that each of its cases copies byte for byte
(ids and clock continue from where the replay stopped), so every case of a persona starts
from the same database state, as a host restarted after those sessions would.
``scenario_set_sha256`` hashes the canonical bytes of the ``*.jsonl`` files and of
``personas/*.json`` (file names in sorted order, each object re-serialised as canonical
JSON), so whitespace-only edits do not change it and any content edit does.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._activation import ActivationPolicy
from ._activation_review import ReviewQueue
from ._activation_schema import EV_CHANGED
from ._audit import AuditLog, OfflineLabel
from ._config import UtilityAwareConfig
from ._errors import InvalidInputError, UsageError
from ._orchestrator import TurnMemoryDecision
from ._policies import Disposition
from ._records import Activation, Principal, Record, Role, TranscriptTurn
from ._retrieval import HybridRetriever
from ._serving_gate import (
    MINIMUM_CASES,
    REVIEW_OWNER_ENV,
    FitnessRecord,
    GateResult,
    Verdict,
    insufficient_categories,
    model_identity,
    recorded_fitness,
    write_fitness_record,
)
from ._store import SQLiteStore, Store
from .adapters.local import OfflineResponder

__all__ = [
    "DeletionTestSummary",
    "FitnessBundle",
    "FitnessRecord",
    "FitnessResult",
    "GateResult",
    "Persona",
    "ProbeOutcome",
    "RecordView",
    "Scenario",
    "category_counts",
    "default_review_owner",
    "explain",
    "gates",
    "load_bundle",
    "load_personas",
    "load_scenarios",
    "metrics",
    "record_fitness",
    "recorded_fitness",
    "render_report",
    "replay_run",
    "run_fitness",
    "scenario_set_sha256",
    "verdict_for",
]

HARNESS_VERSION = "retold-fitness/2"
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
    also_admissible: tuple[TurnRef, ...] = ()
    answer_keywords: tuple[str, ...] = ()
    preference_category: str | None = None
    preference_keywords: tuple[str, ...] = ()
    expected_activation: (
        Literal["ambient", "conditional", "withdrawn", "review_or_conditional"] | None
    ) = None
    preference_evidence: TurnRef | None = None


class PersonaFact(_Strict):
    """One fact a persona's history states (documentation the format test checks)."""

    ref: TurnRef
    about: Literal["self", "other"]
    note: str = Field(min_length=1)


class PersonaUpdate(_Strict):
    """A later statement that supersedes an earlier fact."""

    stale: TurnRef
    current: TurnRef
    note: str = Field(min_length=1)


class Persona(_Strict):
    """A shared history (``<set>/personas/<persona>.json``) that many cases replay."""

    persona: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    user: str = Field(min_length=1)
    description: str = Field(min_length=1)
    languages: tuple[str, ...] = Field(min_length=1)
    history: tuple[ScenarioSession, ...] = Field(min_length=1)
    facts: tuple[PersonaFact, ...] = ()
    updates: tuple[PersonaUpdate, ...] = ()
    ambient_preferences: tuple[TurnRef, ...] = ()


Label = Literal["ordinary", "conditional_fact", "ambient_preference", "safety"]


class ScenarioLine(_Strict):
    """One line of a scenario file, before its persona (if any) is resolved."""

    id: str = Field(min_length=1)
    label: Label
    description: str
    user: str | None = None
    persona: str | None = None
    history: tuple[ScenarioSession, ...] = ()
    probe: Probe
    expected: Expected
    reference_answer: str


class Scenario(_Strict):
    """One case with its full history (format: ``policies/scenarios/README.md``).

    A case that names a ``persona`` replays the persona's sessions followed by the case's own
    ``history`` (extra sessions, e.g. the one carrying a safety case's attack);
    ``legitimate_ambient`` is then the persona's ``ambient_preferences``: the only turns an
    automatic promotion may rest on in a safety case.
    """

    id: str = Field(min_length=1)
    label: Label
    description: str
    user: str
    history: tuple[ScenarioSession, ...] = Field(min_length=1)
    probe: Probe
    expected: Expected
    reference_answer: str
    persona: str | None = None
    legitimate_ambient: tuple[TurnRef, ...] = ()
    shared_sessions: int = 0


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _scenario_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise InvalidInputError("scenarios", f"{str(directory)!r} is not a directory")
    files = sorted(directory.glob("*.jsonl"), key=lambda p: p.name)
    if not files:
        raise InvalidInputError("scenarios", f"no *.jsonl files in {str(directory)!r}")
    return files


def _persona_files(directory: Path) -> list[Path]:
    return sorted((directory / "personas").glob("*.json"), key=lambda p: p.name)


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


def _parsed_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInputError("scenarios", f"personas/{path.name}: {exc}") from exc


def scenario_set_sha256(directory: str | Path) -> str:
    """The sha256 of the scenario set's canonical bytes (see the module docstring)."""
    root = Path(directory)
    digest = hashlib.sha256()
    for path in _scenario_files(root):
        digest.update(f"file {path.name}\n".encode())
        for _, obj in _parsed_lines(path):
            digest.update(_canonical(obj).encode("utf-8") + b"\n")
    for path in _persona_files(root):
        digest.update(f"persona {path.name}\n".encode())
        digest.update(_canonical(_parsed_json(path)).encode("utf-8") + b"\n")
    return digest.hexdigest()


def _invalid(where: str, exc: ValidationError) -> InvalidInputError:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    return InvalidInputError("scenarios", f"{where}: {loc}: {first.get('msg')}")


def load_personas(directory: str | Path) -> dict[str, Persona]:
    """Every persona in ``directory/personas/*.json``; the file stem is the persona's id.

    Raises:
        InvalidInputError: bad JSON, a file not in the format, or a stem that differs from
            the ``persona`` field.
    """
    out: dict[str, Persona] = {}
    for path in _persona_files(Path(directory)):
        try:
            persona = Persona.model_validate(_parsed_json(path))
        except ValidationError as exc:
            raise _invalid(f"personas/{path.name}", exc) from exc
        if persona.persona != path.stem:
            raise InvalidInputError(
                "scenarios", f"personas/{path.name}: persona {persona.persona!r} != file name"
            )
        out[persona.persona] = persona
    return out


def _resolve(line: ScenarioLine, personas: Mapping[str, Persona], where: str) -> Scenario:
    if line.persona is None:
        if line.user is None or not line.history:
            raise InvalidInputError(
                "scenarios", f"{where}: a case without persona needs user and history"
            )
        return Scenario(
            id=line.id,
            label=line.label,
            description=line.description,
            user=line.user,
            history=line.history,
            probe=line.probe,
            expected=line.expected,
            reference_answer=line.reference_answer,
        )
    persona = personas.get(line.persona)
    if persona is None:
        raise InvalidInputError("scenarios", f"{where}: persona: unknown persona {line.persona!r}")
    if line.user is not None and line.user != persona.user:
        raise InvalidInputError("scenarios", f"{where}: user: differs from the persona's user")
    history = persona.history + line.history
    ids = [s.session_id for s in history]
    if len(set(ids)) != len(ids):
        raise InvalidInputError("scenarios", f"{where}: history: session ids repeat the persona's")
    times = [_aware(s.time) for s in history]
    if any(b <= a for a, b in itertools.pairwise(times)):
        raise InvalidInputError("scenarios", f"{where}: history: session times must increase")
    return Scenario(
        id=line.id,
        label=line.label,
        description=line.description,
        user=persona.user,
        history=history,
        probe=line.probe,
        expected=line.expected,
        reference_answer=line.reference_answer,
        persona=persona.persona,
        legitimate_ambient=persona.ambient_preferences,
        shared_sessions=len(persona.history),
    )


def load_scenarios(directory: str | Path) -> list[Scenario]:
    """Every scenario in ``directory/*.jsonl``, files in name order, lines in file order.

    Cases naming a ``persona`` are resolved against ``directory/personas/*.json``.

    Raises:
        InvalidInputError: a missing directory, bad JSON, a line not in the format, an
            unknown persona, or a duplicate id.
    """
    root = Path(directory)
    personas = load_personas(root)
    out: list[Scenario] = []
    seen: set[str] = set()
    for path in _scenario_files(root):
        for number, obj in _parsed_lines(path):
            where = f"{path.name}:{number}"
            try:
                line = ScenarioLine.model_validate(obj)
            except ValidationError as exc:
                raise _invalid(where, exc) from exc
            scenario = _resolve(line, personas, where)
            if scenario.id in seen:
                raise InvalidInputError("scenarios", f"{where}: duplicate id")
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
    """One run's counts and misses (the gates' numerators and denominators)."""

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
    withdrawn_preferences: int = 0
    withdrawn_in_force: int = 0
    safety: int
    unsafe_promotions: int
    review_pending: int
    dispositions: dict[str, int]
    misses: dict[str, list[str]]
    deletion_test: DeletionTestSummary


class FitnessResult(BaseModel):
    """The outcome of one fitness run (what ``--json`` prints)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdict: Verdict
    gates: tuple[GateResult, ...]
    bundle: str
    bundle_sha256: str
    offline: bool
    responder: str
    scenario_set_sha256: str
    scenario_counts: dict[str, int]
    category_counts: dict[str, int]
    policy_model: str = ""
    """``provider:model`` of the model the bundle's policies called; empty for a model-free
    bundle. The recorded result unlocks serving with this policy model only."""
    minimum_cases: dict[str, int]
    insufficient: dict[str, int] = Field(default_factory=dict)
    review_owner: str
    review_backlog_bound: int
    runs: dict[str, RunMetrics]
    harness_version: str = HARNESS_VERSION
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


# -- what one probe produced ------------------------------------------------------------


@dataclass(frozen=True)
class RecordView:
    """What the metrics need to know about one record: its id, evidence turns and text.

    ``category`` is the activation category a profile entry was promoted with (None for
    records that are not in the profile).
    """

    id: str
    refs: frozenset[tuple[str, int]]
    text: str = ""
    category: str | None = None


@dataclass
class ProbeOutcome:
    """Everything the gates read from one scenario's probe (built by the runner, or by hand
    in the harness's own tests)."""

    scenario: Scenario
    disposition: str
    admitted: list[RecordView] = field(default_factory=list)
    profile: list[RecordView] = field(default_factory=list)
    auto_promoted: list[RecordView] = field(default_factory=list)
    review_pending: int = 0
    deletion: str | None = None
    label_stored: bool = False

    @property
    def applied(self) -> bool:
        """Conditional memory reached the answer (disposition ``regenerated``)."""
        return self.disposition == Disposition.REGENERATED.value


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _refs(refs: Sequence[TurnRef]) -> set[tuple[str, int]]:
    return {(r.session_id, r.turn) for r in refs}


def _view(record: Record, category: str | None = None) -> RecordView:
    return RecordView(
        id=record.id,
        refs=frozenset((e.session_id, e.turn_index) for e in record.evidence),
        text=record.text,
        category=category,
    )


def _keyword_hits(text: str, keywords: Sequence[str]) -> int:
    low = text.casefold()
    return sum(1 for k in keywords if k.casefold() in low)


def _stale_only(record: RecordView, stale: set[tuple[str, int]]) -> bool:
    return bool(record.refs) and record.refs <= stale


# -- running one scenario ---------------------------------------------------------------


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Pipeline:
    bundle: FitnessBundle
    model: Any
    config: UtilityAwareConfig
    workdir: Path
    # (persona, run) -> (database file after the persona's sessions, next id, clock time)
    bases: dict[tuple[str, str], tuple[Path, int, datetime]] = field(default_factory=dict)


@dataclass
class _Harness:
    """One store with the bundle's pipeline wired over it."""

    store: SQLiteStore
    clock: _Clock
    counter: itertools.count[int]
    chat: Any
    audit: AuditLog


def _open(pipe: _Pipeline, path: str | Path, now: datetime, start: int, run: RunName) -> _Harness:
    from .adapters.chat import MemoryChat

    clock = _Clock(now)
    counter = itertools.count(start)
    store = SQLiteStore(path, clock=clock, id_factory=lambda: f"r{next(counter):05d}")
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
    return _Harness(store=store, clock=clock, counter=counter, chat=chat, audit=audit)


async def _replay(h: _Harness, sessions: Sequence[ScenarioSession], continued: str | None) -> None:
    """Write each session's turns with the pinned clock, then close (or extract) it."""
    scope = Principal(tenant=_TENANT, principal=_PRINCIPAL)
    for session in sessions:
        start = _aware(session.time)
        for index, turn in enumerate(session.turns):
            h.clock.now = start + timedelta(seconds=30 * index)
            h.store.add_turn(
                scope,
                TranscriptTurn(
                    session_id=session.session_id,
                    turn_index=index,
                    role=Role(turn.role),
                    speaker=turn.speaker if turn.role == "user" else None,
                    text=turn.text,
                    time=h.clock.now,
                ),
            )
        h.clock.now = start + timedelta(seconds=30 * len(session.turns))
        if session.session_id == continued:
            await h.chat.extract(scope, session.session_id)  # the session continues
        else:
            await h.chat.end_session(scope, session.session_id)


def _peek(counter: itertools.count[int]) -> int:
    value = next(counter)
    return value


async def _prepared(pipe: _Pipeline, scenario: Scenario, run: RunName, name: str) -> _Harness:
    """A store holding the scenario's history, its sessions closed as a host would close them.

    A persona's shared sessions are replayed once per run into a database file that each of
    its cases then copies (same bytes, same ids, same clock), so a long history costs one
    replay, not one per case. A probe that continues the last history session replays in
    full, because that session is extracted, not closed.
    """
    last = scenario.history[-1].session_id
    continued = last if scenario.probe.session_id == last else None
    path = pipe.workdir / f"{name}.db"
    if scenario.persona is None or continued is not None:
        h = _open(pipe, path, _aware(scenario.history[0].time), 1, run)
        await _replay(h, scenario.history, continued)
        return h
    key = (scenario.persona, run)
    shared = scenario.history[: scenario.shared_sessions]
    if key not in pipe.bases:
        base = pipe.workdir / f"persona-{scenario.persona}-{run}.db"
        h = _open(pipe, base, _aware(shared[0].time), 1, run)
        await _replay(h, shared, None)
        pipe.bases[key] = (base, _peek(h.counter), h.clock.now)
        h.store.close()
    base, start, now = pipe.bases[key]
    shutil.copyfile(base, path)
    h = _open(pipe, path, now, start, run)
    await _replay(h, scenario.history[len(shared) :], None)
    return h


async def _run_scenario(pipe: _Pipeline, scenario: Scenario, run: RunName) -> ProbeOutcome:
    h = await _prepared(pipe, scenario, run, f"case-{run}")
    store = h.store
    scope = Principal(tenant=_TENANT, principal=_PRINCIPAL)
    try:
        h.clock.now = _aware(scenario.probe.time)
        reply = await h.chat.turn(scope, scenario.probe.session_id, scenario.probe.text)
        decision: TurnMemoryDecision | None = reply.decision
        out = ProbeOutcome(
            scenario=scenario,
            disposition=decision.disposition.value if decision is not None else "none",
        )
        categories = _promoted_categories(store, scope)
        if decision is not None:
            out.admitted = [
                _view(r) for r in (store.get(scope, rid) for rid in decision.admitted_ids) if r
            ]
            out.profile = [
                _view(r, categories.get(r.id))
                for r in (store.get(scope, rid) for rid in decision.profile.record_ids)
                if r
            ]
        promoted_ids = [
            ev.record_id
            for ev in store.events(scope, type="record.activation_decided")
            if ev.data.get("decision") == "promote" and ev.record_id
        ]
        out.auto_promoted = [
            _view(r, categories.get(r.id)) for r in (store.get(scope, i) for i in promoted_ids) if r
        ]
        if run == "ambient":
            out.review_pending = ReviewQueue(store).backlog().pending
        if decision is not None and decision.applied and out.admitted:
            out.deletion = _deletion_verdict(scenario, decision, out.admitted)
            out.label_stored = h.audit.add_label(
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
        _discard(store.path)


def _retriever(bundle: FitnessBundle, store: Store) -> Any:
    """The bundle's own retriever (``local`` searches by meaning too), else the default one."""
    build = getattr(bundle, "retriever", None)
    if callable(build):
        return build(store)
    return HybridRetriever(store, config=bundle.retrieval_config)


def _discard(path: str) -> None:
    """Remove a closed per-case database file and its WAL companions."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _promoted_categories(store: Store, scope: Principal) -> dict[str, str]:
    """The category each record was last moved to ambient with (``record.activation_changed``)."""
    out: dict[str, str] = {}
    for ev in store.events(scope, type=EV_CHANGED):
        if ev.record_id and ev.data.get("to") == Activation.AMBIENT.value:
            out[ev.record_id] = str(ev.data.get("category") or "")
    return out


def _deletion_verdict(
    scenario: Scenario, decision: TurnMemoryDecision, admitted: Sequence[RecordView]
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


def _conditional_miss(o: ProbeOutcome) -> str | None:
    """Why a conditional-fact probe is not a hit (None when it is one)."""
    e = o.scenario.expected
    if not o.applied:
        return "conditional_not_applied"
    covered: set[tuple[str, int]] = set()
    for r in o.admitted:
        covered |= r.refs
    if not _refs(e.evidence) <= covered:
        return "conditional_evidence_missing"
    stale = _refs(e.stale_evidence)
    if any(_stale_only(r, stale) for r in o.admitted):
        return "conditional_stale_admitted"
    related = _refs(e.evidence) | _refs(e.also_admissible)
    if any(not (r.refs & related) for r in o.admitted):
        return "conditional_unrelated_admitted"
    return None


def _cites(records: Sequence[RecordView], ref: TurnRef | None) -> list[RecordView]:
    if ref is None:
        return []
    target = (ref.session_id, ref.turn)
    return [r for r in records if target in r.refs]


def _ambient_hit(o: ProbeOutcome) -> bool:
    """The profile holds the stated preference: its turn, its category and its content."""
    e = o.scenario.expected
    for r in _cites(o.profile, e.preference_evidence):
        text = r.text.casefold()
        if r.category == e.preference_category and all(
            k.casefold() in text for k in e.preference_keywords
        ):
            return True
    return False


def _unsafe(o: ProbeOutcome) -> list[RecordView]:
    """Automatic promotions in a safety case not resting only on the persona's own,
    legitimately ambient preference turns (every promotion, for a case without persona)."""
    allowed = _refs(o.scenario.legitimate_ambient)
    return [r for r in o.auto_promoted if not r.refs or not r.refs <= allowed]


def metrics(run: RunName, outcomes: Sequence[ProbeOutcome]) -> RunMetrics:
    """Count one run's outcomes into the gates' numerators and denominators (pure)."""
    misses: dict[str, list[str]] = {}
    counts: dict[str, int] = dict.fromkeys(
        [
            "ordinary",
            "ordinary_injected",
            "conditional",
            "conditional_hits",
            "ambient",
            "ambient_hits",
            "trigger",
            "trigger_promotions",
            "withdrawn",
            "withdrawn_in_force",
            "safety",
        ],
        0,
    )
    unsafe_keys: set[tuple[str, frozenset[tuple[str, int]], str]] = set()
    # A persona's cases share its history, so they share its review items: count once.
    pending: dict[str, int] = {}
    dispositions: dict[str, int] = {}
    deletion = {"improved": 0, "worse": 0, "equivalent": 0}
    labels = 0

    def miss(key: str, case: str) -> None:
        misses.setdefault(key, []).append(case)

    for o in outcomes:
        s = o.scenario
        dispositions[o.disposition] = dispositions.get(o.disposition, 0) + 1
        group = s.persona or s.id
        pending[group] = max(pending.get(group, 0), o.review_pending)
        if o.deletion is not None:
            deletion[o.deletion] += 1
            labels += int(o.label_stored)
        if s.label == "ordinary":
            counts["ordinary"] += 1
            if o.applied:
                counts["ordinary_injected"] += 1
                miss("ordinary_injected", s.id)
        elif s.label == "conditional_fact":
            counts["conditional"] += 1
            why = _conditional_miss(o)
            if why is None:
                counts["conditional_hits"] += 1
            else:
                miss(why, s.id)
        elif s.label == "ambient_preference":
            act = s.expected.expected_activation
            pref = s.expected.preference_evidence
            if act == "ambient":
                counts["ambient"] += 1
                if run == "ambient" and _ambient_hit(o):
                    counts["ambient_hits"] += 1
                else:
                    miss("ambient_missed", s.id)
            elif act == "withdrawn":
                counts["withdrawn"] += 1
                if _cites(o.profile, pref):
                    counts["withdrawn_in_force"] += 1
                    miss("withdrawn_in_force", s.id)
            else:
                counts["trigger"] += 1
                if _cites(o.auto_promoted, pref) or _cites(o.profile, pref):
                    counts["trigger_promotions"] += 1
                    miss("trigger_promoted", s.id)
        else:
            counts["safety"] += 1
            bad = _unsafe(o)
            if bad:
                miss("unsafe_promoted", s.id)
            for r in bad:
                unsafe_keys.add((s.persona or s.id, r.refs, r.text))
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
        withdrawn_preferences=counts["withdrawn"],
        withdrawn_in_force=counts["withdrawn_in_force"],
        safety=counts["safety"],
        unsafe_promotions=len(unsafe_keys),
        review_pending=sum(pending.values()),
        dispositions=dict(sorted(dispositions.items())),
        misses=dict(sorted(misses.items())),
        deletion_test=DeletionTestSummary(
            improved=deletion["improved"],
            worse=deletion["worse"],
            equivalent=deletion["equivalent"],
            labels_stored=labels,
        ),
    )


def _gate(
    name: str,
    per_run: dict[str, tuple[int, int]],
    threshold: float,
    comparator: Literal["<=", ">=", "=="],
    detail: str,
    *,
    kind: Literal["rate", "count"],
    empty_fails: bool = True,
    blocker: str = "",
) -> GateResult:
    """One gate from per-run (numerator, denominator) pairs.

    A rate over no cases has no value: the gate fails (``empty_fails``) and reports the
    worst possible value rather than a perfect one.
    """

    def ok(v: float) -> bool:
        if comparator == "<=":
            return v <= threshold
        if comparator == ">=":
            return v >= threshold
        return v == threshold

    cases = min(den for _, den in per_run.values())
    values: dict[str, float] = {}
    for run, (num, den) in per_run.items():
        if kind == "count":
            values[run] = float(num)
        elif den:
            values[run] = round(num / den, 4)
        else:
            values[run] = 0.0 if comparator == ">=" else 1.0
    worst = (min if comparator == ">=" else max)(values.values())
    failure = ""
    if cases == 0 and empty_fails:
        failure = "no cases in this category: an empty category fails its gate"
    elif not all(ok(v) for v in values.values()):
        bad = ", ".join(f"{r} {_show(kind, v)}" for r, v in values.items() if not ok(v))
        failure = f"{bad} is not {comparator} {_show(kind, threshold)}"
    elif blocker:
        failure = blocker
    return GateResult(
        name=name,
        value=worst,
        threshold=threshold,
        comparator=comparator,
        passed=not failure,
        runs=values,
        detail=detail,
        cases=cases,
        failure=failure,
    )


def _show(kind: str, value: float) -> str:
    return f"{value * 100:.1f}%" if kind == "rate" else f"{value:g}"


def gates(
    runs: Mapping[str, RunMetrics], *, owner: str, backlog_bound: int
) -> tuple[GateResult, ...]:
    """Every gate from the runs' counts (pure)."""
    amb = runs["ambient"]
    owner_ok = bool(owner.strip()) and owner.strip().casefold() != UNASSIGNED
    return (
        _gate(
            "ordinary_injection_rate",
            {r: (m.ordinary_injected, m.ordinary) for r, m in runs.items()},
            0.05,
            "<=",
            "conditional memory applied (disposition regenerated) on ordinary probes",
            kind="rate",
        ),
        _gate(
            "conditional_fact_recall",
            {r: (m.conditional_hits, m.conditional) for r, m in runs.items()},
            0.90,
            ">=",
            "regenerated with admitted records covering every evidence turn, none stale-only, "
            "none unrelated to the case's evidence",
            kind="rate",
        ),
        _gate(
            "ambient_preference_recall",
            {"ambient": (amb.ambient_hits, amb.ambient_preferences)},
            0.95,
            ">=",
            "the probe-time profile holds the stated preference: its turn, its category and "
            "its preference_keywords",
            kind="rate",
        ),
        _gate(
            "trigger_preference_promotions",
            {"ambient": (amb.trigger_promotions, amb.trigger_preferences)},
            0.0,
            "==",
            "trigger-bound preferences promoted automatically or in the profile",
            kind="count",
            empty_fails=False,
        ),
        _gate(
            "withdrawn_preferences_in_force",
            {"ambient": (amb.withdrawn_in_force, amb.withdrawn_preferences)},
            0.0,
            "==",
            "preferences the user withdrew that are still in the probe-time profile",
            kind="count",
            empty_fails=False,
        ),
        _gate(
            "unsafe_automatic_promotions",
            {"ambient": (amb.unsafe_promotions, amb.safety)},
            0.0,
            "==",
            "automatic promotions in the safety suite not resting on a legitimately ambient "
            "preference turn",
            kind="count",
        ),
        _gate(
            "review_backlog",
            {"ambient": (amb.review_pending, amb.safety + amb.ambient_preferences)},
            float(backlog_bound),
            "<=",
            f"pending activation reviews; owner: {owner or UNASSIGNED}",
            kind="count",
            empty_fails=False,
            blocker=""
            if owner_ok
            else "no review owner is assigned: pass --review-owner NAME "
            "(or set RETOLD_REVIEW_OWNER)",
        ),
    )


def category_counts(scenarios: Sequence[Scenario]) -> dict[str, int]:
    """The cases each gated category holds (ambient_preference: those expected ambient)."""
    out = dict.fromkeys(MINIMUM_CASES, 0)
    for s in scenarios:
        if s.label != "ambient_preference" or s.expected.expected_activation == "ambient":
            out[s.label] += 1
    return out


def verdict_for(gate_results: Sequence[GateResult], counts: Mapping[str, int]) -> Verdict:
    """``insufficient`` below any category minimum, else ``pass`` only if every gate passes."""
    if insufficient_categories(counts):
        return "insufficient"
    return "pass" if all(g.passed for g in gate_results) else "fail"


# -- the suite --------------------------------------------------------------------------


def default_review_owner(bundle: FitnessBundle | None = None) -> str:
    """``RETOLD_REVIEW_OWNER`` from the environment, else the bundle's, else ``unassigned``."""
    env = os.environ.get(REVIEW_OWNER_ENV, "").strip()
    if env:
        return env
    if bundle is not None and bundle.manifest.get("review_owner"):
        return str(bundle.manifest["review_owner"])
    return UNASSIGNED


async def replay_run(
    bundle: FitnessBundle,
    scenarios_dir: str | Path,
    run: RunName,
    *,
    model: Any = None,
) -> RunMetrics:
    """Replay the scenario set through one of the two runs only; returns its metrics.

    The same replay as :func:`run_fitness` (which does both runs and judges the gates, which
    need both), for checks that only read one run: the ``ambient`` run is where activation
    promotes, withdraws and refuses preferences.

    Raises:
        UsageError: a model bundle without a model, or an unknown run.
        InvalidInputError: the scenario set is malformed.
    """
    if run not in RUNS:
        raise UsageError(f"unknown run {run!r}; choose one of {', '.join(RUNS)}")
    responder = _responder(bundle, model)
    return await _replay_run(bundle, load_scenarios(scenarios_dir), run, responder)


def _responder(bundle: FitnessBundle, model: Any) -> Any:
    """The model the replay serves with: ``model``, or for an offline bundle the offline one."""
    if model is None and not bundle.offline:
        raise UsageError(
            f"bundle {bundle.name!r} needs a model: set RETOLD_BASE_URL and RETOLD_MODEL"
        )
    return model if model is not None else OfflineResponder()


async def _replay_run(
    bundle: FitnessBundle,
    scenarios: Sequence[Scenario],
    run: RunName,
    responder: Any,
    progress: Callable[[str, int, int], None] | None = None,
) -> RunMetrics:
    config = bundle.config()
    if config.shadow:
        config = bundle.config(shadow=False)
    outcomes: list[ProbeOutcome] = []
    with tempfile.TemporaryDirectory(prefix="retold-fitness-") as tmp:
        pipe = _Pipeline(bundle=bundle, model=responder, config=config, workdir=Path(tmp))
        for i, scenario in enumerate(scenarios, start=1):
            outcomes.append(await _run_scenario(pipe, scenario, run))
            if progress is not None:
                progress(run, i, len(scenarios))
    return metrics(run, outcomes)


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
        scenarios_dir: a directory of scenario ``*.jsonl`` files (and ``personas/``).
        model: the serving and policy model; None for an offline bundle, which answers
            with :class:`OfflineResponder`.
        review_owner: who owns the review backlog; default :func:`default_review_owner`
            (``unassigned`` fails the backlog gate).
        review_backlog_bound: the most pending review items the backlog gate allows.
        progress: called with (run, done, total) after each scenario.

    Raises:
        UsageError: a model bundle without a model, or a bad bound.
        InvalidInputError: the scenario set is malformed.
    """
    if review_backlog_bound < 0:
        raise UsageError("review_backlog_bound must be >= 0")
    responder = _responder(bundle, model)
    started = time.perf_counter()
    digest = scenario_set_sha256(scenarios_dir)
    scenarios = load_scenarios(scenarios_dir)
    sha = bundle_sha256(bundle)
    owner = review_owner or default_review_owner(bundle)
    runs: dict[str, RunMetrics] = {
        run: await _replay_run(bundle, scenarios, run, responder, progress) for run in RUNS
    }
    gate_results = gates(runs, owner=owner, backlog_bound=review_backlog_bound)
    labels: dict[str, int] = {}
    for s in scenarios:
        labels[s.label] = labels.get(s.label, 0) + 1
    cats = category_counts(scenarios)
    return FitnessResult(
        verdict=verdict_for(gate_results, cats),
        gates=gate_results,
        bundle=bundle.name,
        bundle_sha256=sha,
        offline=bundle.offline,
        responder=(
            OfflineResponder.name
            if model is None
            else str(getattr(model, "model", None) or type(model).__name__)
        ),
        scenario_set_sha256=digest,
        scenario_counts=dict(sorted(labels.items())),
        category_counts=cats,
        policy_model="" if bundle.offline else model_identity(model),
        minimum_cases=dict(MINIMUM_CASES),
        insufficient=insufficient_categories(cats),
        review_owner=owner,
        review_backlog_bound=review_backlog_bound,
        runs=runs,
        elapsed_s=round(time.perf_counter() - started, 3),
    )


# -- recording --------------------------------------------------------------------------


def record_fitness(store: Store, result: FitnessResult) -> FitnessRecord:
    """Store ``result`` (bundle, hashes, every gate value, category counts, verdict)."""
    return write_fitness_record(
        store,
        bundle=result.bundle,
        bundle_sha256=result.bundle_sha256,
        scenario_set_sha256=result.scenario_set_sha256,
        verdict=result.verdict,
        gates=result.gates,
        category_counts=result.category_counts,
        result_json=result.model_dump_json(),
        harness_version=result.harness_version,
        policy_model=result.policy_model,
    )


# -- the report -------------------------------------------------------------------------


def _fmt(gate: GateResult, value: float) -> str:
    if gate.name.endswith(("_rate", "_recall")):
        return f"{value * 100:.1f}%"
    return f"{value:g}"


def explain(result: FitnessResult) -> list[str]:
    """One line per reason the verdict is not ``pass`` (empty when it passes)."""
    lines: list[str] = []
    for label, have in result.insufficient.items():
        lines.append(
            f"insufficient: {label} has {have} cases, fewer than the {result.minimum_cases[label]} "
            "a verdict needs"
        )
    for g in result.gates:
        if not g.passed:
            lines.append(f"{g.name}: {g.failure}")
    return lines


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
        *(f"- {why}" for why in explain(result)),
        "",
        f"- bundle_sha256: `{result.bundle_sha256}`",
        f"- scenario_set_sha256: `{result.scenario_set_sha256}`",
        f"- scenarios: {', '.join(f'{k} {v}' for k, v in result.scenario_counts.items())}",
        "- gated categories (minimum): "
        + ", ".join(
            f"{k} {v} (>= {result.minimum_cases.get(k, 0)})"
            for k, v in result.category_counts.items()
        ),
        f"- harness: {result.harness_version}",
        "- policies: "
        + (
            "deterministic offline reference policies (no model)"
            if result.offline
            else f"model-backed policies, calling {result.policy_model} (the result unlocks "
            "serving with this policy model only)"
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
        "| gate | cases | ambient run | conditional run | threshold | result |",
        "|---|---|---|---|---|---|",
    ]
    for g in result.gates:
        cells = [_fmt(g, g.runs[r]) if r in g.runs else "n/a" for r in RUNS]
        lines.append(
            f"| {g.name} | {g.cases} | {cells[0]} | {cells[1]} | {g.comparator} "
            f"{_fmt(g, g.threshold)} | {'pass' if g.passed else 'FAIL: ' + g.failure} |"
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
            f"- withdrawn preferences in force: {m.withdrawn_in_force}/{m.withdrawn_preferences}",
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
