"""The hand-written fitness scenario sets in policies/scenarios/ follow their documented format.

Three sets live there (policies/scenarios/README.md): ``legacy/`` (the 259 original short cases,
tuned on, so development material only), ``dev/`` (persona histories, the only split a bundle may
be tuned on) and ``test/`` (held-out personas, the split that gates live serving).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from retold import _fitness
from retold._serving_gate import MINIMUM_CASES

ROOT = Path(__file__).resolve().parents[1] / "policies" / "scenarios"
SPLITS = ("dev", "test")
LEGACY_FILES = {
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
TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

Label = Literal["ordinary", "conditional_fact", "ambient_preference", "safety"]
Category = Literal["answer_style", "response_language", "accessibility"]
Activation = Literal["ambient", "conditional", "withdrawn", "review_or_conditional"]

# A general function-word list (English plus the other languages the personas speak). It is
# not derived from any scenario: it is what "content word" excludes.
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either
    else ever every few for from further get gets getting got had has have having he her here
    hers herself him himself his how i if in into is it its itself just least less let like ll
    may me might mine more most much must my myself need no nor not now of off on once one only
    or other our ours ourselves out over own re same shall she should so some still such than
    that the their theirs them themselves then there these they this those through to too under
    until up upon us ve very was we were what when where whether which while who whom whose why
    will with would yet you your yours yourself yourselves s t d m o y ok okay please thanks
    again anyway really quite new next last many any there's what's it's i'm i've i'd i'll
    you're we're they're don't doesn't can't won't isn't aren't wasn't weren't shouldn't
    el la los las un una unos unas de del y o que en por para con sin es son ser está estoy muy
    lo le les se su sus mi mis tu tus al como pero más ya yo
    il lo gli le di da e è un una che per con non si mi ti ci del della dei al alla sono
    le la les un une des de du et ou que qui en pour avec ne pas je tu il elle nous vous est
    der die das ein eine und oder ist nicht ich du er sie wir ihr mit von zu den dem mir mich
    dir dich uns euch ihm ihn auf auch wenn wie was kann kannst
    o a e é um uma os as do da dos das no na em para com não eu você ele ela nós meu minha
    ve bir bu şu ne ben sen o biz ile için mi mı
    i w z na do się nie jest to że jak ale o a mnie mi
    """.split()
)
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)


def _stem(word: str) -> str:
    """A light suffix stripper (applied twice: "evenings" -> "evening" -> "even")."""
    w = word.casefold().removesuffix("'s")
    for _ in range(2):
        for suffix in ("ing", "ed", "es", "s"):
            if w.endswith(suffix) and len(w) - len(suffix) >= 3:
                w = w[: -len(suffix)]
                break
    return w


def content_words(text: str) -> set[str]:
    """The stemmed words of ``text`` that are not function words."""
    return {_stem(w) for w in _WORD.findall(text.casefold()) if w not in STOPWORDS and len(w) > 1}


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
    turns: list[Turn] = Field(min_length=2, max_length=40)

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
    also_admissible: list[TurnRef] | None = None
    preference_category: Category | None = None
    preference_keywords: list[str] | None = None
    expected_activation: Activation | None = None
    preference_evidence: TurnRef | None = None


class Fact(_Strict):
    ref: TurnRef
    about: Literal["self", "other"]
    note: str = Field(min_length=1)


class Update(_Strict):
    stale: TurnRef
    current: TurnRef
    note: str = Field(min_length=1)


class Persona(_Strict):
    persona: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    user: str = Field(min_length=1)
    description: str = Field(min_length=1)
    languages: list[str] = Field(min_length=2)
    history: list[Session] = Field(min_length=3)
    facts: list[Fact] = Field(min_length=10)
    updates: list[Update] = Field(min_length=2)
    ambient_preferences: list[TurnRef]


class Scenario(_Strict):
    id: str = Field(pattern=r"^(ord|cond|pref|safe)-([a-z]+-)?\d{3}$")
    label: Label
    description: str = Field(min_length=1)
    user: str | None = Field(default=None, min_length=1)
    persona: str | None = None
    history: list[Session] = Field(default_factory=list, max_length=3)
    probe: Probe
    expected: Expected
    reference_answer: str = Field(min_length=1)

    @model_validator(mode="after")
    def _label_rules(self) -> Scenario:
        if not self.id.startswith(ID_PREFIX[self.label] + "-"):
            raise ValueError(f"id {self.id} does not carry the prefix for label {self.label}")
        if self.persona is None and (self.user is None or not self.history):
            raise ValueError("a case without a persona needs user and history")
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
            if not given <= {"evidence", "answer_keywords", "stale_evidence", "also_admissible"}:
                raise ValueError(f"conditional_fact has preference keys: {sorted(given)}")
            stale = {(r.session_id, r.turn) for r in self.expected.stale_evidence or []}
            if stale & {(r.session_id, r.turn) for r in self.expected.evidence}:
                raise ValueError("a turn cannot be both evidence and stale_evidence")
        else:
            if {"evidence", "stale_evidence", "also_admissible"} & given:
                raise ValueError("preference and safety cases use preference_evidence")
            if not {"preference_category", "expected_activation"} <= given:
                raise ValueError("preference_category and expected_activation are required")
            act = self.expected.expected_activation
            if self.label == "safety" and act != "review_or_conditional":
                raise ValueError("safety cases must expect review_or_conditional, never ambient")
            if self.label == "ambient_preference":
                if act not in ("ambient", "conditional", "withdrawn"):
                    raise ValueError("ambient_preference expects ambient, conditional or withdrawn")
                if self.expected.preference_evidence is None:
                    raise ValueError("ambient_preference cases need preference_evidence")
                if act == "ambient" and self.expected.preference_category is None:
                    raise ValueError("an ambient expectation needs a preference_category")
        return self


Row = tuple[str, str, int, Scenario]  # split, file name, line number, case


def _load_personas(split: str) -> dict[str, Persona]:
    out = {}
    for path in sorted((ROOT / split / "personas").glob("*.json")):
        persona = Persona.model_validate_json(path.read_text(encoding="utf-8"))
        assert persona.persona == path.stem, path
        out[persona.persona] = persona
    return out


def _load(split: str) -> list[Row]:
    rows = []
    for path in sorted((ROOT / split).glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                assert line.strip(), f"{split}/{path.name}:{lineno} is blank"
                rows.append((split, path.name, lineno, Scenario.model_validate_json(line)))
    return rows


@pytest.fixture(scope="module")
def personas() -> dict[str, dict[str, Persona]]:
    """Every persona file of the dev and test splits, parsed and validated."""
    return {split: _load_personas(split) for split in SPLITS}


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    """Every scenario line of every set, parsed and validated."""
    return [row for split in ("legacy", *SPLITS) for row in _load(split)]


def _history(sc: Scenario, split: str, personas: dict[str, dict[str, Persona]]) -> list[Session]:
    if sc.persona is None:
        return sc.history
    return [*personas[split][sc.persona].history, *sc.history]


def _user(sc: Scenario, split: str, personas: dict[str, dict[str, Persona]]) -> str:
    return personas[split][sc.persona].user if sc.persona else str(sc.user)


def _turn(history: list[Session], ref: TurnRef) -> Turn:
    session = next(s for s in history if s.session_id == ref.session_id)
    return session.turns[ref.turn]


def test_layout(rows: list[Row]) -> None:
    """legacy/ holds the four label files; dev/ and test/ hold one file per persona."""
    for split, name, lineno, sc in rows:
        if split == "legacy":
            assert name in LEGACY_FILES, name
            assert sc.label == LEGACY_FILES[name], f"{name}:{lineno} {sc.id}"
            assert sc.persona is None and len(sc.history) <= 3
        else:
            assert sc.persona == name.removesuffix(".jsonl"), f"{split}/{name}:{lineno}"
            assert sc.user is None, f"{sc.id}: the user comes from the persona"
            assert sc.id.split("-")[1] == sc.persona, sc.id
    assert (ROOT / "README.md").is_file()


def test_ids_are_unique(rows: list[Row]) -> None:
    """No scenario id appears twice across all sets."""
    dupes = [i for i, c in Counter(sc.id for *_, sc in rows).items() if c > 1]
    assert not dupes, dupes


def test_each_split_meets_the_category_minimums(rows: list[Row]) -> None:
    """dev and test each hold at least the harness minimums; together at least 300 cases."""
    total = 0
    for split in SPLITS:
        scenarios = [sc for s, _, _, sc in rows if s == split]
        total += len(scenarios)
        counts = _fitness.category_counts(_fitness.load_scenarios(ROOT / split))
        for label, minimum in MINIMUM_CASES.items():
            assert counts[label] >= minimum, (split, label, counts[label])
        labels = Counter(sc.label for sc in scenarios)
        acts = Counter(sc.expected.expected_activation for sc in scenarios)
        assert acts["conditional"] >= 1 and acts["withdrawn"] >= 1, (split, acts)
        assert labels["safety"] >= MINIMUM_CASES["safety"]
    assert total >= 300


def test_personas_are_realistic(personas: dict[str, dict[str, Persona]]) -> None:
    """Each persona: >= 25 principal turns over >= 3 sessions, >= 10 facts (some about other
    people), >= 2 updates, small talk, and more than one language per split."""
    for split, found in personas.items():
        assert len(found) >= 3, split
        languages: set[str] = set()
        for p in found.values():
            user_turns = [
                t for s in p.history for t in s.turns if t.role == "user" and not t.speaker
            ]
            assert len(user_turns) >= 25, (p.persona, len(user_turns))
            assert any(f.about == "other" for f in p.facts), p.persona
            fact_turns = {(f.ref.session_id, f.ref.turn) for f in p.facts}
            assert len(user_turns) - len(fact_turns) >= 8, f"{p.persona}: no small talk/tasks"
            for ref in (
                [f.ref for f in p.facts]
                + [u.stale for u in p.updates]
                + [u.current for u in p.updates]
                + p.ambient_preferences
            ):
                turn = _turn(p.history, ref)
                assert turn.role == "user" and turn.speaker is None, (p.persona, ref)
            for u in p.updates:
                times = {s.session_id: i for i, s in enumerate(p.history)}
                assert (times[u.stale.session_id], u.stale.turn) < (
                    times[u.current.session_id],
                    u.current.turn,
                ), (p.persona, u)
            times = [_parse_time(s.time) for s in p.history]
            assert times == sorted(times) and len(set(times)) == len(times), p.persona
            languages |= set(p.languages)
        assert len(languages) >= 3, (split, languages)


def test_dev_and_test_use_different_personas(personas: dict[str, dict[str, Persona]]) -> None:
    """No persona (by id or by user name) is shared between the dev and test splits."""
    dev, test = personas["dev"], personas["test"]
    assert not set(dev) & set(test)
    assert not {p.user for p in dev.values()} & {p.user for p in test.values()}


def test_references_point_at_principal_user_turns(
    rows: list[Row], personas: dict[str, dict[str, Persona]]
) -> None:
    """Every evidence reference names an existing user turn spoken by the principal user."""
    for split, _, _, sc in rows:
        history = _history(sc, split, personas)
        ids = [s.session_id for s in history]
        assert len(set(ids)) == len(ids), f"{sc.id}: duplicate session ids"
        e = sc.expected
        refs = [*(e.evidence or []), *(e.stale_evidence or []), *(e.also_admissible or [])]
        if e.preference_evidence is not None:
            refs.append(e.preference_evidence)
        for ref in refs:
            assert ref.session_id in ids, f"{sc.id}: no session {ref.session_id}"
            session = history[ids.index(ref.session_id)]
            assert ref.turn < len(session.turns), f"{sc.id}: {ref} out of range"
            turn = session.turns[ref.turn]
            assert turn.role == "user", f"{sc.id}: {ref} is a {turn.role} turn"
            assert turn.speaker in (None, _user(sc, split, personas)), f"{sc.id}: {ref}"


def test_probe_is_after_history(rows: list[Row], personas: dict[str, dict[str, Persona]]) -> None:
    """Sessions run oldest first and the probe comes after all of them."""
    for split, _, _, sc in rows:
        history = _history(sc, split, personas)
        times = [_parse_time(s.time) for s in history]
        assert times == sorted(times) and len(set(times)) == len(times), sc.id
        assert _parse_time(sc.probe.time) > times[-1], sc.id
        earlier = {s.session_id for s in history[:-1]}
        assert sc.probe.session_id not in earlier, f"{sc.id}: probe reopens an old session"
        if split != "legacy":
            for s in sc.history:
                assert len(s.turns) <= 8, f"{sc.id}: a case's own session is short"


def test_keywords_appear_where_they_must(
    rows: list[Row], personas: dict[str, dict[str, Persona]]
) -> None:
    """Answer keywords are in the reference answer; preference keywords in the preference turn
    (and every ambient case names at least one)."""
    for split, _, _, sc in rows:
        answer = sc.reference_answer.casefold()
        for kw in sc.expected.answer_keywords or []:
            assert kw.casefold() in answer, f"{sc.id}: {kw!r} not in reference answer"
        ref = sc.expected.preference_evidence
        pkws = sc.expected.preference_keywords or []
        if ref is not None and pkws:
            text = _turn(_history(sc, split, personas), ref).text.casefold()
            for kw in pkws:
                assert kw.casefold() in text, f"{sc.id}: {kw!r} not in the preference turn"
        if sc.expected.expected_activation == "ambient":
            assert pkws, f"{sc.id}: an ambient case names its preference_keywords"


def test_probes_share_no_content_word_with_their_evidence(
    rows: list[Row], personas: dict[str, dict[str, Persona]]
) -> None:
    """In dev and test, a probe shares no content word with the turns it depends on, so only
    meaning (not surface overlap) links them."""
    for split, _, _, sc in rows:
        if split == "legacy":
            continue
        history = _history(sc, split, personas)
        e = sc.expected
        refs = list(e.evidence or [])
        if sc.label == "ambient_preference" and e.preference_evidence is not None:
            refs.append(e.preference_evidence)
        probe = content_words(sc.probe.text)
        for ref in refs:
            shared = probe & content_words(_turn(history, ref).text)
            assert not shared, f"{sc.id}: probe shares {sorted(shared)} with {ref}"


def test_stale_evidence_matches_the_personas_updates(
    rows: list[Row], personas: dict[str, dict[str, Persona]]
) -> None:
    """A persona case's stale turn is one its persona documents as superseded."""
    for split, _, _, sc in rows:
        if sc.persona is None:
            continue
        stale = {(u.stale.session_id, u.stale.turn) for u in personas[split][sc.persona].updates}
        for ref in sc.expected.stale_evidence or []:
            assert (ref.session_id, ref.turn) in stale, f"{sc.id}: {ref} is not a documented update"


def test_no_withdrawn_preference_is_labelled_safety(rows: list[Row]) -> None:
    """Withdrawn preferences are preference cases (relabelled from safety), never safety."""
    for *_, sc in rows:
        if sc.label == "safety":
            assert sc.expected.expected_activation == "review_or_conditional"
        if sc.expected.expected_activation == "withdrawn":
            assert sc.label == "ambient_preference"


def test_the_harness_loads_every_set(rows: list[Row]) -> None:
    """retold's loader resolves every set, persona histories included, case for case."""
    for split in ("legacy", *SPLITS):
        loaded = _fitness.load_scenarios(ROOT / split)
        assert [s.id for s in loaded] == [sc.id for s, _, _, sc in rows if s == split]
        for s in loaded:
            if s.persona is not None:
                assert s.shared_sessions >= 3 and s.legitimate_ambient is not None


def test_content_words_ignore_function_words_and_inflection() -> None:
    """The content-word check drops function words and matches simple inflections."""
    assert content_words("How much more does the new position pay?") == {"position", "pay"}
    assert content_words("I was training") & content_words("my trains")
    assert not content_words("What is it about?")


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
