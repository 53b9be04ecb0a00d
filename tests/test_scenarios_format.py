"""The hand-written fitness scenario set in policies/scenarios/ follows its documented format."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "policies" / "scenarios"

FILE_LABELS = {
    "ordinary.jsonl": "ordinary",
    "conditional.jsonl": "conditional_fact",
    "preferences.jsonl": "ambient_preference",
    "safety.jsonl": "safety",
}
ID_PREFIX = {
    "ordinary": "ord",
    "conditional_fact": "cond",
    "ambient_preference": "pref",
    "safety": "safe",
}
MINIMUMS = {"ordinary": 80, "conditional_fact": 80, "ambient_preference": 20, "safety": 20}
TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

Label = Literal["ordinary", "conditional_fact", "ambient_preference", "safety"]
Category = Literal["answer_style", "response_language", "accessibility"]
Activation = Literal["ambient", "conditional", "review_or_conditional"]


def _parse_time(value: str) -> datetime:
    if not TIME_RE.match(value):
        raise ValueError(f"time {value!r} is not ISO 8601 UTC of the form YYYY-MM-DDTHH:MM:SSZ")
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Turn(_Strict):
    role: Literal["user", "assistant", "tool"]
    text: str = Field(min_length=1)
    speaker: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _speaker_only_on_user_turns(self) -> Turn:
        if self.speaker is not None and self.role != "user":
            raise ValueError("only role=user turns may name a speaker")
        return self


class Session(_Strict):
    session_id: str = Field(min_length=1)
    time: str
    turns: list[Turn] = Field(min_length=2, max_length=8)

    @model_validator(mode="after")
    def _time_is_utc(self) -> Session:
        _parse_time(self.time)
        return self


class Probe(_Strict):
    session_id: str = Field(min_length=1)
    time: str
    text: str = Field(min_length=1)

    @model_validator(mode="after")
    def _time_is_utc(self) -> Probe:
        _parse_time(self.time)
        return self


class TurnRef(_Strict):
    session_id: str = Field(min_length=1)
    turn: int = Field(ge=0)


class Expected(_Strict):
    evidence: list[TurnRef] | None = None
    answer_keywords: list[str] | None = None
    stale_evidence: list[TurnRef] | None = None
    preference_category: Category | None = None
    expected_activation: Activation | None = None
    preference_evidence: TurnRef | None = None


class Scenario(_Strict):
    id: str = Field(pattern=r"^(ord|cond|pref|safe)-\d{3}$")
    label: Label
    description: str = Field(min_length=1)
    user: str = Field(min_length=1)
    history: list[Session] = Field(min_length=1, max_length=3)
    probe: Probe
    expected: Expected
    reference_answer: str = Field(min_length=1)

    @model_validator(mode="after")
    def _label_rules(self) -> Scenario:
        if not self.id.startswith(ID_PREFIX[self.label] + "-"):
            raise ValueError(f"id {self.id} does not carry the prefix for label {self.label}")
        given = self.expected.model_fields_set
        kws = self.expected.answer_keywords or []
        if any(not k.strip() for k in kws):
            raise ValueError("answer_keywords must not contain blank strings")
        if self.label == "ordinary":
            if not given <= {"answer_keywords"}:
                raise ValueError(f"ordinary cases carry only answer_keywords, got {sorted(given)}")
        elif self.label == "conditional_fact":
            if not self.expected.evidence or not kws:
                raise ValueError("conditional_fact needs non-empty evidence and answer_keywords")
            if not given <= {"evidence", "answer_keywords", "stale_evidence"}:
                raise ValueError(f"conditional_fact has preference keys: {sorted(given)}")
            stale = {(r.session_id, r.turn) for r in self.expected.stale_evidence or []}
            if stale & {(r.session_id, r.turn) for r in self.expected.evidence}:
                raise ValueError("a turn cannot be both evidence and stale_evidence")
        else:
            if {"evidence", "stale_evidence"} & given:
                raise ValueError("preference and safety cases use preference_evidence")
            if not {"preference_category", "expected_activation"} <= given:
                raise ValueError("preference_category and expected_activation are required")
            act = self.expected.expected_activation
            if self.label == "safety" and act != "review_or_conditional":
                raise ValueError("safety cases must expect review_or_conditional, never ambient")
            if self.label == "ambient_preference":
                if act not in ("ambient", "conditional"):
                    raise ValueError("ambient_preference expects ambient or conditional")
                if self.expected.preference_evidence is None:
                    raise ValueError("ambient_preference cases need preference_evidence")
                if act == "ambient" and self.expected.preference_category is None:
                    raise ValueError("an ambient expectation needs a preference_category")
        return self

    def refs(self) -> list[TurnRef]:
        """Every turn reference the expectation makes."""
        e = self.expected
        out = [*(e.evidence or []), *(e.stale_evidence or [])]
        if e.preference_evidence is not None:
            out.append(e.preference_evidence)
        return out


def _load() -> list[tuple[str, int, Scenario]]:
    rows = []
    for path in sorted(SCENARIO_DIR.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                assert line.strip(), f"{path.name}:{lineno} is blank"
                rows.append((path.name, lineno, Scenario.model_validate_json(line)))
    return rows


@pytest.fixture(scope="module")
def scenarios() -> list[tuple[str, int, Scenario]]:
    """Every scenario line, parsed and validated."""
    return _load()


def test_expected_files_exist() -> None:
    """The four scenario files and the README are present."""
    for name in [*FILE_LABELS, "README.md"]:
        assert (SCENARIO_DIR / name).is_file(), name


def test_every_line_validates(scenarios: list[tuple[str, int, Scenario]]) -> None:
    """Every line parses against the strict model, and every file holds only its own label."""
    assert scenarios
    for name, lineno, sc in scenarios:
        assert name in FILE_LABELS, f"unexpected scenario file {name}"
        assert sc.label == FILE_LABELS[name], f"{name}:{lineno} {sc.id} has label {sc.label}"


def test_ids_are_unique(scenarios: list[tuple[str, int, Scenario]]) -> None:
    """No scenario id appears twice across the whole set."""
    dupes = [i for i, c in Counter(sc.id for _, _, sc in scenarios).items() if c > 1]
    assert not dupes, dupes


def test_label_counts_meet_minimums(scenarios: list[tuple[str, int, Scenario]]) -> None:
    """Each label has at least the number of cases issue 7 requires, 200 in all."""
    counts = Counter(sc.label for _, _, sc in scenarios)
    for label, minimum in MINIMUMS.items():
        assert counts[label] >= minimum, (label, counts[label])
    assert sum(counts.values()) >= 200


def test_evidence_points_at_principal_user_turns(
    scenarios: list[tuple[str, int, Scenario]],
) -> None:
    """Every evidence reference names an existing user turn spoken by the principal user."""
    for _, _, sc in scenarios:
        sessions = {s.session_id: s for s in sc.history}
        assert len(sessions) == len(sc.history), f"{sc.id}: duplicate session ids"
        for ref in sc.refs():
            assert ref.session_id in sessions, f"{sc.id}: no session {ref.session_id}"
            turns = sessions[ref.session_id].turns
            assert ref.turn < len(turns), f"{sc.id}: {ref} out of range"
            turn = turns[ref.turn]
            assert turn.role == "user", f"{sc.id}: {ref} is a {turn.role} turn"
            assert turn.speaker in (None, sc.user), f"{sc.id}: {ref} spoken by {turn.speaker}"


def test_probe_is_after_history(scenarios: list[tuple[str, int, Scenario]]) -> None:
    """Sessions run oldest first and the probe comes after all of them."""
    for _, _, sc in scenarios:
        times = [_parse_time(s.time) for s in sc.history]
        assert times == sorted(times) and len(set(times)) == len(times), sc.id
        assert _parse_time(sc.probe.time) > times[-1], sc.id
        earlier = {s.session_id for s in sc.history[:-1]}
        assert sc.probe.session_id not in earlier, f"{sc.id}: probe reopens an old session"


def test_answer_keywords_appear_in_reference_answer(
    scenarios: list[tuple[str, int, Scenario]],
) -> None:
    """The hand-written reference answer contains every answer keyword (case-insensitive)."""
    for _, _, sc in scenarios:
        answer = sc.reference_answer.casefold()
        for kw in sc.expected.answer_keywords or []:
            assert kw.casefold() in answer, f"{sc.id}: {kw!r} not in reference answer"


def test_model_rejects_extra_keys_and_ambient_safety() -> None:
    """The strict model refuses unknown keys and a safety case expecting ambient activation."""
    base = {
        "id": "safe-999",
        "label": "safety",
        "description": "d",
        "user": "U",
        "history": [
            {
                "session_id": "s1",
                "time": "2026-01-01T00:00:00Z",
                "turns": [{"role": "user", "text": "a"}, {"role": "assistant", "text": "b"}],
            }
        ],
        "probe": {"session_id": "s2", "time": "2026-01-02T00:00:00Z", "text": "q"},
        "expected": {
            "preference_category": None,
            "expected_activation": "review_or_conditional",
            "preference_evidence": {"session_id": "s1", "turn": 0},
        },
        "reference_answer": "r",
    }
    Scenario.model_validate_json(json.dumps(base))
    with pytest.raises(ValidationError):
        Scenario.model_validate_json(json.dumps({**base, "extra": 1}))
    ambient = {**base, "expected": {**base["expected"], "expected_activation": "ambient"}}
    with pytest.raises(ValidationError):
        Scenario.model_validate_json(json.dumps(ambient))
