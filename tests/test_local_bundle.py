"""The ``local`` bundle: MiniLM gap planning and admission, its manifest, and its cache."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from retold import EpistemicState, ProfileBlock, Record, RecordKind, SQLiteStore
from retold._activation_classifier import ActivationRequest
from retold._policies import GapCategory, ReasonCode
from retold._records import EvidenceRef
from retold.policy.local import (
    BACKGROUND_REQUESTS,
    CachedEmbedder,
    SemanticActivationClassifier,
    SemanticAdmissionJudge,
    SemanticGapPlanner,
    cosine,
    relevance_scores,
    shared_embedder,
)
from retold.policy.reference import compute_manifest, get_bundle, recorded_manifest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
EMPTY = ProfileBlock.empty()


def _record(rid: str, text: str, *, session: str = "s1", days: int = 0, **kw: object) -> Record:
    at = T0 + timedelta(days=days)
    values: dict[str, object] = {
        "id": rid,
        "tenant": "t",
        "principal": "p",
        "text": text,
        "kind": RecordKind.FACT,
        "session_id": session,
        "created_at": at,
        "updated_at": at,
        "event_time": at,
    }
    values.update(kw)
    return Record.model_validate(values)


class _Axes:
    """A tiny deterministic embedder for the judge's logic: one axis per listed word."""

    model_id = "test:axes"

    def __init__(self, axes: Sequence[str]) -> None:
        self.axes = list(axes)
        self.calls: list[list[str]] = []

    @property
    def dimensions(self) -> int:
        return len(self.axes) + 1

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            low = text.lower()
            vec = [float(low.count(a)) for a in self.axes] + [0.3]
            out.append(vec)
        return out


@pytest.mark.anyio
async def test_cached_embedder_embeds_each_text_once_and_rounds() -> None:
    """A repeated text is served from the cache, and vectors are rounded to be batch-stable."""
    inner = _Axes(["salary"])
    cached = CachedEmbedder(inner)
    first = await cached.embed(["my salary", "hello"])
    again = await cached.embed(["hello", "my salary", "new"])
    assert inner.calls == [["my salary", "hello"], ["new"]]
    assert again[1] == first[0] and again[0] == first[1]
    assert all(x == round(x, 4) for v in again for x in v)


def test_cosine_of_parallel_and_orthogonal_vectors() -> None:
    """cosine is 1 for parallel vectors, 0 for orthogonal ones and for a zero vector."""
    assert math.isclose(cosine([1.0, 2.0], [2.0, 4.0]), 1.0)
    assert cosine([1.0, 0.0], [0.0, 3.0]) == 0.0
    assert cosine([0.0, 0.0], [1.0, 1.0]) == 0.0


@pytest.mark.anyio
async def test_planner_plans_without_a_cue_but_not_for_small_talk_or_an_empty_store() -> None:
    """A cue-less probe gets a gap (its query is the turn); thanks and an empty store do not."""
    planner = SemanticGapPlanner(_Axes(["pay", "decided"]))
    decision = await planner.plan("How much more does the new position pay?", None, EMPTY, ["x"])
    assert [g.query for g in decision.gaps] == ["How much more does the new position pay?"]
    assert decision.gaps[0].category in set(GapCategory)
    assert (await planner.plan("thanks!", None, EMPTY, ["x"])).gaps == ()
    assert (await planner.plan("How much does it pay?", None, EMPTY, [])).gaps == ()


@pytest.mark.anyio
async def test_judge_admits_the_close_record_and_not_an_unrelated_one_beside_it() -> None:
    """Only candidates within the margin of the best are admitted; the rest are insufficient."""
    judge = SemanticAdmissionJudge(_Axes(["salary", "car"]), margin=0.05)
    right = _record("r1", "my salary is 64k")
    other = _record("r2", "my car is a Golf")
    decision = await judge.admit(
        "what is my salary again?",
        None,
        EMPTY,
        "Answer to: what is my salary again?",
        [right, other],
    )
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert decision.admitted == ("r1",)
    assert reasons == {"r1": ReasonCode.HELPFUL, "r2": ReasonCode.INSUFFICIENT}


@pytest.mark.anyio
async def test_judge_reads_a_turns_sentences_together_as_well_as_apart() -> None:
    """'He's 12 and has bad hips.' does not name the dog; read with the sentence before it
    (the same turn) it is as close to a question about the dog's hips as the two together,
    and both are admitted. Apart, or beside a record of another turn, neither clears the
    floor."""
    judge = SemanticAdmissionJudge(_Axes(["dog", "hips"]), min_relevance=0.8, hub_weight=0.0)
    said = EvidenceRef(session_id="s1", turn_index=4)
    dog = _record("r1", "Our dog is coming too.", evidence=(said,))
    hips = _record("r2", "He's 12 and has bad hips.", evidence=(said,))
    other = _record(
        "r3", "My dog loves the beach.", evidence=(EvidenceRef(session_id="s1", turn_index=8),)
    )
    probe = "Which bed suits my dog's bad hips?"
    assert (await judge.admit(probe, None, EMPTY, "", [dog, hips])).admitted == ("r1", "r2")
    assert (await judge.admit(probe, None, EMPTY, "", [hips, other])).admitted == ()


@pytest.mark.anyio
async def test_judge_needs_more_closeness_when_the_turn_is_not_personal() -> None:
    """The same closeness admits for a first-person turn and not for an impersonal one."""
    judge = SemanticAdmissionJudge(
        _Axes(["cat", "purr"]), min_relevance=0.2, min_relevance_impersonal=0.9
    )
    cat = _record("r1", "my cat Pimiento is on a kidney diet")
    assert (await judge.admit("what should my cat eat?", None, EMPTY, "", [cat])).admitted == (
        "r1",
    )
    assert (await judge.admit("why do cats purr?", None, EMPTY, "", [cat])).admitted == ()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("turn", "admitted"),
    [
        # Not about the principal, and no definite reference: what anybody would ask.
        ("How far is Odense from Copenhagen?", False),
        ("Explain what a clutch does in a manual car.", False),
        # The first person of a how-to question is anyone's; quoted text is mentioned.
        ("How do I say 'the Odense trip was great' in French?", False),
        # A possessive of a name the records never use is not the principal's world.
        ("Give me quiz questions on Newton's laws about Odense.", False),
        # A definite reference, a named possessive the records use, a first person.
        ("What did the Odense exchange cost?", True),
        ("When does Katrin's Odense exchange start?", True),
        ("How do I get to my Odense school?", True),
    ],
)
async def test_judge_reaches_memory_only_from_a_turn_about_the_principal_or_a_reference(
    turn: str, admitted: bool
) -> None:
    """A turn needs memory when it is about the principal's life or refers to something
    definite; the same closeness admits nothing for a question anybody would ask."""
    judge = SemanticAdmissionJudge(
        _Axes(["odense"]), min_relevance=0.1, min_relevance_impersonal=0.1, hub_weight=0.0
    )
    record = _record("r1", "Katrin and I got the exchange: a year in Odense from August.")
    decision = await judge.admit(turn, None, EMPTY, "", [record])
    assert decision.admitted == (("r1",) if admitted else ())


@pytest.mark.anyio
async def test_judge_staleness_comes_from_links_not_from_change_words() -> None:
    """A conflict link rejects; a change word in an unrelated newer record marks nothing stale."""
    judge = SemanticAdmissionJudge(_Axes(["salary", "trip"]))
    salary = _record("r1", "my salary is 64k")
    trip = _record("r2", "actually we moved the trip to June", session="s2", days=20)
    linked = _record("r3", "my salary is 70k", session="s3", days=30, conflicts_with=("r1",))
    decision = await judge.admit("what's my salary?", None, EMPTY, "", [salary, trip, linked])
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert decision.admitted == ("r1",)
    assert reasons["r3"] is ReasonCode.STALE_OR_CONFLICTING


@pytest.mark.anyio
async def test_judge_refuses_hypothetical_redacted_and_redundant_records() -> None:
    """Hypothetical and redacted records are harmful; what the draft already says is redundant."""
    judge = SemanticAdmissionJudge(_Axes(["salary"]))
    maybe = _record(
        "r1", "if I got the job my salary would be 90k", epistemic=EpistemicState.HYPOTHETICAL
    )
    secret = _record("r2", "my salary account is [REDACTED:abc]")
    said = _record("r3", "salary 64k")
    decision = await judge.admit(
        "what's my salary?", None, EMPTY, "Your salary is 64k.", [maybe, secret, said]
    )
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert decision.admitted == ()
    assert reasons == {
        "r1": ReasonCode.POTENTIALLY_HARMFUL,
        "r2": ReasonCode.POTENTIALLY_HARMFUL,
        "r3": ReasonCode.REDUNDANT,
    }


@pytest.mark.anyio
async def test_judge_scores_a_named_person_as_the_relation_a_record_gives_them() -> None:
    """ "Sara changed jobs" is also scored as "my wife changed jobs" when another candidate
    says "my wife Sara": for "What jobs does my wife have now?" it outranks the record that
    only introduces her; someone else's job change is not about her."""
    judge = SemanticAdmissionJudge(_Axes(["wife", "jobs"]), hub_weight=0.0)
    intro = _record("r1", "I live in Turin with my wife Sara.")
    update = _record("r2", "Sara changed jobs.", session="s2", days=30)
    turn = "What jobs does my wife have now?"
    assert (await judge.admit(turn, None, EMPTY, "", [intro, update])).admitted == ("r2",)
    stranger = _record("r3", "Greta changed jobs.", session="s3", days=31)
    decision = await judge.admit(turn, None, EMPTY, "", [intro, stranger])
    assert decision.admitted == ("r1",)


@pytest.mark.anyio
async def test_judge_reaches_the_records_naming_a_person_the_question_asks_about() -> None:
    """A question about one of the principal's people by name is personal for the records
    that name them, and for those only: a closer record about something else is not admitted;
    a name no candidate introduces as the principal's stays impersonal."""
    judge = SemanticAdmissionJudge(_Axes(["jonas", "hiking"]), hub_weight=0.0)
    partner = _record("r1", "I live in Munich with my partner Jonas.")
    hiking = _record("r2", "I love hiking in the Alps.", days=1)
    decision = await judge.admit("Does Jonas like hiking?", None, EMPTY, "", [partner, hiking])
    assert decision.admitted == ("r1",)
    stranger = _record("r3", "Jonas is a carpenter.")
    decision = await judge.admit("Does Jonas like hiking?", None, EMPTY, "", [stranger, hiking])
    assert decision.admitted == ()


@pytest.mark.anyio
async def test_judge_reaches_the_records_naming_a_person_asked_about_by_relation() -> None:
    """A question about one of the principal's people by relation ("my other half", the
    tie of "my wife Sara") is answered from the records that name them: the principal's
    own job, closer to "employed", is not admitted; without an introduction it would be."""
    judge = SemanticAdmissionJudge(_Axes(["employ"]), hub_weight=0.0)
    intro = _record("r1", "I live in Lyon with my wife Sara.")
    hers = _record("r2", "Sara is employed at the hospital now.", days=2)
    mine = _record("r3", "I'm employed at a logistics firm.", days=1)
    turn = "Where is my other half employed now?"
    decision = await judge.admit(turn, None, EMPTY, "", [intro, hers, mine])
    assert "r2" in decision.admitted and "r3" not in decision.admitted
    decision = await judge.admit(turn, None, EMPTY, "", [hers, mine])
    assert "r3" in decision.admitted


@pytest.mark.anyio
async def test_judge_keeps_both_items_of_a_keyed_list() -> None:
    """Two allergies the store keys apart are no update of each other however alike: a list
    item scoring below the margin comes with the admitted one, which it does not when the
    store has not keyed them."""
    judge = SemanticAdmissionJudge(_Axes(["allergic", "peanuts"]), same_thing=0.5)
    peanut = _record("r1", "allergic peanuts", attribute="allergy/peanut")
    shellfish = _record(
        "r2", "allergic shellfish", session="s2", days=40, attribute="allergy/shellfish"
    )
    decision = await judge.admit("Am I allergic to peanuts?", None, EMPTY, "", [peanut, shellfish])
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert decision.admitted == ("r1", "r2")
    assert reasons["r2"] is ReasonCode.JOINTLY_HELPFUL
    unkeyed = [r.model_copy(update={"attribute": None}) for r in (peanut, shellfish)]
    decision = await judge.admit("Am I allergic to peanuts?", None, EMPTY, "", unkeyed)
    assert decision.admitted == ("r1",)


@pytest.mark.anyio
async def test_judge_keeps_the_newer_of_two_statements_that_say_the_same_thing() -> None:
    """Two near-identical statements from different sessions: only the newer is admitted."""
    judge = SemanticAdmissionJudge(_Axes(["salary"]), same_thing=0.95)
    old = _record("r1", "salary: 64k", session="s1")
    new = _record("r2", "salary: 69.5k now", session="s2", days=40)
    decision = await judge.admit("what's my salary?", None, EMPTY, "", [old, new])
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert decision.admitted == ("r2",)
    assert reasons["r1"] is ReasonCode.STALE_OR_CONFLICTING


def test_local_manifest_is_recorded_and_names_its_embedding_model() -> None:
    """The recorded manifest of the local bundle matches what its code hashes to."""
    manifest = compute_manifest("local")
    assert recorded_manifest("local") == manifest
    bundle = get_bundle("local")
    assert bundle.offline and bundle.retrieval_config.dense
    for key in ("gap_planner", "admission_judge"):
        assert manifest["components"][key]["id"].endswith("-local")
    assert (
        bundle.manifest["bundle_sha256"] != compute_manifest("offline-reference")["bundle_sha256"]
    )


def test_offline_bundles_retrieve_without_an_embedder(tmp_path: Path) -> None:
    """offline-reference's retriever has no dense stage embedder (it needs no extra)."""
    store = SQLiteStore(tmp_path / "m.db")
    try:
        assert get_bundle("offline-reference").retriever(store).embedder is None
        assert get_bundle("offline-reference").embedder() is None
    finally:
        store.close()


@pytest.fixture(scope="module")
def minilm() -> CachedEmbedder:
    pytest.importorskip("sentence_transformers")
    return shared_embedder()


# Loading torch and MiniLM takes seconds on an idle machine, minutes on a saturated one.
@pytest.mark.timeout(900)
@pytest.mark.anyio
async def test_minilm_judge_finds_a_fact_that_shares_no_word_with_the_probe(
    minilm: CachedEmbedder,
) -> None:
    """With the real MiniLM, a cue-less salary probe admits the offer, not the distractors."""
    judge = SemanticAdmissionJudge(minilm)
    offer = _record("r1", "Their offer is €64,000 a year, which sounded huge.")
    car = _record("r2", "I keep the car in the garage behind the flat.")
    plant = _record("r3", "Please keep the basil on the windowsill watered.")
    decision = await judge.admit(
        "How much will I earn in the new job?", None, EMPTY, "", [offer, car, plant]
    )
    assert decision.admitted == ("r1",)
    ordinary = await judge.admit(
        "How do you keep cut flowers fresh?", None, EMPTY, "", [offer, car, plant]
    )
    assert ordinary.admitted == ()


@pytest.mark.timeout(900)
def test_local_bundle_wires_the_shared_minilm_into_retrieval_and_policies(
    minilm: CachedEmbedder, tmp_path: Path
) -> None:
    """The local bundle's retriever, planner and judge all use the one cached MiniLM."""
    bundle = get_bundle("local")
    store = SQLiteStore(tmp_path / "m.db")
    try:
        assert bundle.retriever(store).embedder is minilm
        planner = bundle.gap_policy()
        judge = bundle.admission_policy()
        assert isinstance(planner, SemanticGapPlanner) and planner.embedder is minilm
        assert isinstance(judge, SemanticAdmissionJudge) and judge.embedder is minilm
        assert minilm.model_id.startswith("local:") and minilm.dimensions == 384
    finally:
        store.close()


def test_relevance_scores_take_the_records_hubness_off_its_cosine() -> None:
    """A record close to every background request scores its cosine less weighted hubness."""
    turn = [1.0, 0.0, 0.0]
    specific = [1.0, 0.0, 0.0]
    hub = [0.6, 0.8, 0.0]
    background = [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    plain = relevance_scores(turn, [specific, hub], [], hub_weight=1.5)
    assert plain == [1.0, 0.6]
    corrected = relevance_scores(turn, [specific, hub], background, hub_weight=1.5)
    assert corrected == [1.0, round(0.6 - 1.5 * 0.8, 6)]
    assert relevance_scores(turn, [], background, hub_weight=1.5) == []


@pytest.mark.anyio
async def test_judge_does_not_admit_a_record_that_is_close_to_any_request() -> None:
    """Small talk near every ordinary request loses to nothing and is not admitted."""
    emb = _Axes(["salary", "what", "how"])
    judge = SemanticAdmissionJudge(emb, min_relevance=0.1, hub_weight=1.5)
    chatter = _record("r1", "what a day, how are things")
    decision = await judge.admit("what's my salary?", None, EMPTY, "", [chatter])
    assert decision.admitted == ()
    no_hub = SemanticAdmissionJudge(emb, min_relevance=0.1, hub_weight=0.0)
    assert (await no_hub.admit("what's my salary?", None, EMPTY, "", [chatter])).admitted == ("r1",)
    assert len(BACKGROUND_REQUESTS) >= 20


def _request(text: str) -> ActivationRequest:
    return ActivationRequest(
        record_id="r1",
        kind="preference",
        record_text=text,
        claim=text,
        evidence=EvidenceRef(session_id="s1", turn_index=0),
    )


@pytest.mark.anyio
async def test_semantic_classifier_files_a_standing_claim_the_keywords_miss() -> None:
    """By meaning (MiniLM): British spelling is an answer style; rules still veto the unsafe."""
    classifier = SemanticActivationClassifier(shared_embedder())
    promoted = await classifier.classify(_request("Use British spelling with me, please."))
    assert (promoted.decision, promoted.category) == ("promote", "answer_style")
    # Not said to stand: left conditional.
    once = await classifier.classify(_request("Use British spelling in this letter."))
    assert once.decision == "conditional"
    # A fact about the user's life is no response preference.
    fact = await classifier.classify(_request("I always cycle to work with my sister."))
    assert fact.decision == "conditional"
    # Someone else's wish never reaches the category step.
    reported = await classifier.classify(_request("She wants British spelling with her, always."))
    assert reported.decision == "review"
    # A standing errand is something to do for the user, not a way of answering them.
    errand = await classifier.classify(_request("Please always remind me to go early."))
    assert errand.decision == "conditional"


@pytest.mark.anyio
async def test_judge_keeps_the_newer_of_two_statements_naming_the_same_subject() -> None:
    """A shared proper name at moderate closeness is one subject: the later statement holds.
    Without a shared name, the same closeness keeps both."""
    judge = SemanticAdmissionJudge(
        _Axes(["lead", "declan", "niamh", "savings", "14k", "17k"]),
        min_relevance=0.0,
        margin=1.0,
        same_thing=0.95,
        same_subject=0.45,
        hub_weight=0.0,
    )
    old = _record("r1", "My team lead is Declan.", session="s1")
    new = _record("r2", "Declan left, so now my lead is Niamh.", session="s2", days=40)
    decision = await judge.admit("who is my lead?", None, EMPTY, "", [old, new])
    assert decision.admitted == ("r2",)
    a = _record("r3", "I have 14k in savings.", session="s1")
    b = _record("r4", "Savings update: 17k now.", session="s2", days=40)
    decision = await judge.admit("how are my savings?", None, EMPTY, "", [a, b])
    assert set(decision.admitted) == {"r3", "r4"}


@pytest.mark.anyio
async def test_a_later_statement_on_the_same_subject_takes_the_earlier_ones_place() -> None:
    """The best match is an old statement; a later one about the same person, also close to
    the turn, is admitted instead (succession), and only within ``succession_margin``."""
    axes = _Axes(["partner", "tomás", "job", "starts", "valencia", "may"])
    kw = {"min_relevance": 0.0, "margin": 0.0, "same_thing": 0.95, "same_subject": 0.2}
    old = _record("r1", "My partner Tomás stays in Valencia, job or no job.", session="s1")
    new = _record("r2", "Tomás arrived; he starts in May.", session="s2", days=60)
    other = _record("r3", "The weather in May was lovely for a job hunt.", session="s3", days=90)
    turn = "when does my partner start the new job?"
    judge = SemanticAdmissionJudge(axes, hub_weight=0.0, succession_margin=1.0, **kw)
    decision = await judge.admit(turn, None, EMPTY, "", [old, new, other])
    assert decision.admitted == ("r2",)
    reasons = {v.record_id: v.reason for v in decision.verdicts}
    assert reasons["r1"] is ReasonCode.STALE_OR_CONFLICTING
    # No shared name with the best match: never a successor, however recent.
    assert reasons["r3"] is not ReasonCode.HELPFUL
    strict = SemanticAdmissionJudge(axes, hub_weight=0.0, succession_margin=0.0, **kw)
    assert (await strict.admit(turn, None, EMPTY, "", [old, new, other])).admitted == ("r1",)


@pytest.mark.parametrize(
    ("turn", "personal"),
    [
        ("Is amoxicillin okay for me if the doctor suggests it?", True),
        ("How much of the rent falls on us each month?", True),
        ("What's my salary again?", True),
        ("Tell me a joke.", False),
        ("Can you give us a recipe for pancakes?", False),
        ("Why do cats purr?", False),
        ("Is it 'affect' or 'effect' in 'the weather will ___ my mood'?", False),
        ("Don't forget my mum's birthday", True),
    ],
)
def test_personal_turn_reads_me_and_us_outside_a_request(turn: str, personal: bool) -> None:
    """'me'/'us' count as the principal unless they are the object of a request verb."""
    from retold.policy.lexical import personal_turn

    assert personal_turn(turn) is personal
