"""The ``local`` bundle's policies: gap planning and admission on meaning, with no LLM.

They need only the ``local-embeddings`` extra: every decision compares MiniLM sentence
vectors (loaded from disk by :class:`retold.LocalEmbedder`, never downloaded), so a probe
that shares no word with the fact it needs ("How much more does the new position pay?" /
"I got the offer: 96k") is still matched, and a shared common word ("keep") is not a match.

* :class:`SemanticGapPlanner` plans one gap for any turn that could use the principal's
  memory (the store holds something for them, and the turn is more than a greeting or an
  acknowledgement); its query is the turn itself, searched by meaning (the dense stage). It
  does not need a first-person or recall cue: whether a stored record is close enough to
  matter is the judge's call, on the vectors.
* :class:`SemanticAdmissionJudge` scores each candidate by the cosine similarity between the
  turn and the record (or, when higher, the record read together with the other candidates
  extracted from the same turn: "My cat Pimiento is coming too." says what "He's 9 and on a
  kidney diet." is about), less the record's *hubness*: its mean similarity to a fixed
  background of ordinary requests (:data:`BACKGROUND_REQUESTS`). A record that resembles
  any question ("Anyway, I have to go.", "Long day.") is close to every turn and would be
  admitted everywhere; the correction keeps what is close to *this* turn. A candidate is
  ``helpful`` when its score clears ``min_relevance`` and comes within ``margin`` of the
  best candidate (so an unrelated record is not admitted beside the right one);
  ``redundant`` when the draft, the public
  context or the ambient profile already says it; ``stale_or_conflicting`` when the store
  links it to a conflicting record. Staleness comes only from the store: a superseded
  record is not live, so it never reaches the judge; no cue word in the session marks
  anything stale. Two admitted statements from different sessions about the same subject
  keep only the newer one: they say nearly the same thing (``same_thing``), or they name
  the same person, place or thing (a shared proper name) and are close (``same_subject``):
  "My team lead is Declan" and, later, "Declan left, so now my lead is Niamh".

The thresholds were calibrated on the development scenario set only (see
``tools/calibrate_local.py``); the held-out test split is never used to set them.

Vectors are cached per text for the life of the embedder wrapper (:class:`CachedEmbedder`)
and rounded so that a text's vector does not depend on what it was batched with: the same
inputs give the same decisions.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from retold._activation_classifier import (
    ActivationProposal,
    ActivationRequest,
    OfflineActivationClassifier,
    instruction_clauses,
    standing_claim,
)
from retold._errors import UsageError
from retold._policies import (
    AdmissionDecision,
    CandidateVerdict,
    Gap,
    GapCategory,
    GapDecision,
    ReasonCode,
)
from retold._records import EpistemicState, ProfileBlock, Record
from retold._text_caches import register as register_text_cache
from retold._typing import Embedder

from .lexical import (
    content_terms,
    distinct_things,
    items_of_one_list,
    names_any,
    people_asked_about,
    people_asked_by_relation,
    people_introduced,
    relation_aliases,
    turn_reach,
)

__all__ = [
    "BACKGROUND_REQUESTS",
    "CachedEmbedder",
    "SemanticActivationClassifier",
    "SemanticAdmissionJudge",
    "SemanticGapPlanner",
    "cosine",
    "hubness",
    "relevance_scores",
    "same_turn_groups",
    "shared_embedder",
]

# The gap categories, described in the spec's own words (§3.1): a turn is filed under the
# category whose description it is closest to in meaning. General text, not scenario words.
_CATEGORY_DESCRIPTIONS: dict[GapCategory, str] = {
    GapCategory.PREFERENCE: "what I like, prefer or usually choose",
    GapCategory.PRIOR_DECISION: "what I decided, chose or planned earlier",
    GapCategory.CONSTRAINT: "my limits and needs: budget, health, diet, allergies, access",
    GapCategory.RELATIONSHIP_OR_EVENT: "the people in my life and what happened to me",
    GapCategory.TASK_STATE: "where I am with a task or project I am working on",
}
# A turn that is only a greeting, thanks or a sign-off never needs the user's memory. These
# are conversation formulas, not topics.
_SMALL_TALK = re.compile(
    r"^\W*(?:thanks|thank you|thx|good (?:morning|night|evening|afternoon)|hi|hello|hey|"
    r"ok|okay|bye|goodbye|see you|cool|great|nice|got it)\W*(?:\w+\W*)?$",
    re.I,
)


_DIGITS = 4

#: The background the judge measures a record's hubness against: ordinary requests an
#: assistant gets from anybody, across everyday domains, that need nobody's memory. Written
#: as a general sample of assistant traffic, not from any scenario; what matters is their
#: spread, not any one of them.
BACKGROUND_REQUESTS: tuple[str, ...] = (
    "What's the capital of France?",
    "How do I boil an egg?",
    "Explain how photosynthesis works.",
    "Can you recommend a good book?",
    "What time is it in Tokyo right now?",
    "Write a short poem about the sea.",
    "How do I fix a slow laptop?",
    "What is the difference between a virus and bacteria?",
    "Give me some tips for a job interview.",
    "How does a mortgage work?",
    "Translate 'good morning' into German.",
    "What should I cook for dinner tonight?",
    "How far away is the moon?",
    "Summarise the plot of Hamlet.",
    "How do I start running?",
    "What are good exercises for back pain?",
    "How can I make my code run faster?",
    "What's a good gift for a friend?",
    "Tell me a joke.",
    "How does inflation affect savings?",
    "Who painted the Mona Lisa?",
    "What's the best way to learn a new language?",
    "How many calories are in a banana?",
    "Write an email asking for a day off.",
    "What is a black hole?",
    "How do I change a flat tyre?",
    "Can you help me plan a weekend trip?",
    "What's the weather usually like in spring?",
    "Explain the rules of chess.",
    "How do vaccines work?",
    "What are some healthy breakfast ideas?",
    "How do I improve my sleep?",
)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is all zeros)."""
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class CachedEmbedder:
    """An :class:`~retold.Embedder` that remembers every text's vector for its lifetime.

    Missing texts are embedded in one batch and each vector is rounded to ``_DIGITS``
    decimals, well above the float noise that batching (padding) adds, so a text's vector
    does not depend on what it was batched with. At most ``max_entries`` are kept (the
    oldest are dropped first). The wrapped
    embedder's ``model_id`` and ``dimensions`` are passed through, so the retriever's stored
    vectors are shared with the policies.
    """

    def __init__(self, inner: Embedder, *, max_entries: int = 50_000) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self._cache: dict[str, list[float]] = {}
        register_text_cache(self)  # its keys are people's words: an erasure empties it

    def clear_text_cache(self) -> None:
        """Forget every text's vector."""
        self._cache = {}

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # No lock: two concurrent callers may embed the same text twice, with the same result
        # (and an erasure may swap the dict out meanwhile: this call keeps the one it read).
        cache = self._cache
        found = {t: cache[t] for t in texts if t in cache}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            vectors = await self.inner.embed(missing)
            if len(vectors) != len(missing):
                raise UsageError(
                    f"embedder {self.model_id!r} returned {len(vectors)} vectors "
                    f"for {len(missing)} texts"
                )
            for text, vector in zip(missing, vectors, strict=True):
                # Rounded: a text's vector must not depend on the batch it came in.
                found[text] = [round(float(x), _DIGITS) for x in vector]
                while len(cache) >= self.max_entries:
                    cache.pop(next(iter(cache)))
                cache[text] = found[text]
        return [found[t] for t in texts]


@functools.cache
def shared_embedder() -> CachedEmbedder:
    """The process-wide MiniLM embedder of the ``local`` bundle (loaded once, from disk).

    Raises:
        UsageError: the ``local-embeddings`` extra is not installed.
    """
    from retold._embedding import LocalEmbedder

    return CachedEmbedder(LocalEmbedder())


class SemanticGapPlanner:
    """Gap planner of the ``local`` bundle: plans by meaning, needs no cue word.

    One gap whose query is the turn, for every turn that is more than a greeting or an
    acknowledgement, provided the store holds something for the principal. Its category is
    the one whose description (spec §3.1) the turn is closest to in meaning.
    """

    policy_id = "semantic-gap-planner-local@1"

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision:
        if not inventory or not turn.strip() or _SMALL_TALK.match(turn):
            return GapDecision(policy=self.policy_id)
        names = list(_CATEGORY_DESCRIPTIONS)
        vectors = await self.embedder.embed([turn, *(_CATEGORY_DESCRIPTIONS[n] for n in names)])
        scores = [cosine(vectors[0], v) for v in vectors[1:]]
        best = max(range(len(names)), key=lambda i: (scores[i], -i))
        gap = Gap(category=names[best], query=turn)
        return GapDecision(gaps=(gap,), policy=self.policy_id)


def relevance_scores(
    turn: Sequence[float],
    records: Sequence[Sequence[float]],
    background: Sequence[Sequence[float]],
    *,
    hub_weight: float,
) -> list[float]:
    """The judge's score of each record for ``turn``: cosine less weighted hubness.

    ``hubness`` is a record's mean cosine to the ``background`` vectors (0 without any).
    Scores are rounded to 6 decimals so that they do not depend on the BLAS kernel.
    """
    if not records:
        return []
    rec = _unit(np.asarray(records, dtype=np.float64))
    out = rec @ _unit(np.asarray([turn], dtype=np.float64))[0]
    if len(background) and hub_weight:
        out = out - hub_weight * _hubness(rec, background)
    return [round(float(x), 6) for x in out]


def hubness(
    records: Sequence[Sequence[float]], background: Sequence[Sequence[float]]
) -> list[float]:
    """Each record's mean cosine to the ``background`` vectors (rounded to 6 decimals)."""
    if not records or not len(background):
        return [0.0] * len(records)
    rec = _unit(np.asarray(records, dtype=np.float64))
    return [round(float(x), 6) for x in _hubness(rec, background)]


def _hubness(unit_records: np.ndarray, background: Sequence[Sequence[float]]) -> np.ndarray:
    sims: np.ndarray = unit_records @ _unit(np.asarray(background, dtype=np.float64)).T
    return np.asarray(sims.mean(axis=1), dtype=np.float64)


def _unit(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)


# A capitalised word ("I" and its forms aside). One that does not open its sentence is a
# proper name; one that does is a name only when the other statement also writes it
# capitalised inside a sentence ("Declan left ..." beside "My team lead is Declan").
_CAPITALISED = re.compile(r"(^|[.!?:;]\s+|\s)([A-Z\u00c0-\u00de][\w\u00c0-\u024f'-]*)")
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'd", "i'll"})


def _capitalised(text: str) -> tuple[set[str], set[str]]:
    """(names inside sentences, capitalised sentence openers) of ``text``, case-folded."""
    inside: set[str] = set()
    openers: set[str] = set()
    for m in _CAPITALISED.finditer(text.strip()):
        word = m.group(2).casefold()
        if word in _NOT_NAMES:
            continue
        (inside if m.group(1).isspace() else openers).add(word)
    return inside, openers


def _share_a_name(a: str, b: str) -> bool:
    inside_a, open_a = _capitalised(a)
    inside_b, open_b = _capitalised(b)
    shared = (inside_a | open_a) & (inside_b | open_b)
    return bool(shared & (inside_a | inside_b))


def _when(record: Record) -> datetime:
    return record.event_time or record.created_at


def same_turn_groups(records: Sequence[Record]) -> list[list[Record]]:
    """The records (two or more) extracted from one turn, by the turn they cite first, each
    group in id order (the order the extractor wrote them)."""
    groups: dict[tuple[str, int], list[Record]] = {}
    for record in records:
        if record.evidence:
            first = record.evidence[0]
            groups.setdefault((first.session_id, first.turn_index), []).append(record)
    return [sorted(g, key=lambda r: r.id) for g in groups.values() if len(g) > 1]


def _pieces(text: str) -> list[str]:
    """Sentences of ``text`` (lines and sentence ends), for the redundancy check."""
    parts = re.split(r"(?<=[.!?])\s+|\n+", text)
    return [p.strip() for p in parts if len(p.strip()) >= 8]


class SemanticAdmissionJudge:
    """Admission judge of the ``local`` bundle: relevance by meaning, staleness by links.

    A turn about the principal's own life (a first-person pronoun or possessive, a named
    person's possessive, or a recall phrase: the general vocabulary of
    :mod:`retold.policy.lexical`, no topic words) asks for their memory, so its best
    candidate needs only ``min_relevance``. The first person of a how-to question ("How do
    I say ... in French?") is anyone's, and a possessive counts only for a name the
    candidates use ("Newton's laws" does not). Any other turn reaches memory only through a
    definite reference ("What did the removals cost?") and needs
    ``min_relevance_impersonal``, a closeness that general questions sharing a topic with a
    stored fact ("Why do cats purr?" beside "my cat Pimiento") do not reach.
    Only candidates within ``margin`` of the best are admitted, so an unrelated record is
    not admitted beside the right one. Candidates extracted from one turn are also scored
    read together, and each keeps the higher of its own score and theirs: a sentence whose
    subject is in the sentence before it ("He's 9 and on a kidney diet.") is matched on
    what it is about. A question about one of the principal's people by name ("What does
    Jonas do?", once a candidate says "my partner Jonas") is personal for the records that
    name them, and only they may be admitted. A record naming one of the principal's people
    is also scored with the relation a candidate gives them ("Sara changed jobs" as "my wife
    changed jobs", given "my wife Sara"). Records the store keys as different things
    (``allergy/peanut``, ``allergy/shellfish``) never succeed each other, and the other items
    of an admitted record's list of constraints come with it.

    Args:
        embedder: the sentence embedder (the bundle's shared MiniLM).
        min_relevance: the score (cosine(turn, record) less ``hub_weight`` times the
            record's hubness) a candidate of a personal turn needs.
        min_relevance_impersonal: the same for a turn with no personal cue.
        hub_weight: how much of a record's mean similarity to :data:`BACKGROUND_REQUESTS`
            is taken off its score (0 turns the correction off).
        margin: a helpful candidate must score within this of the best one.
        redundant_at: cosine(record, a sentence of draft/context/profile) at which the
            record is already said.
        same_thing: cosine(record, record) at which two admitted statements from different
            sessions say the same thing and only the newer is kept.
        same_subject: the lower cosine at which two such statements that share a proper
            name are about the same subject (only the newer is kept).
        max_admitted: at most this many records are admitted.
        succession_margin: a helpful record gives way to a later statement about the same
            subject (``same_subject``/``same_thing``, another session) among the candidates
            when that one also clears the floor and scores within this of the best: what
            was said later about a subject is what holds now.
    """

    policy_id = "semantic-admission-judge-local@9"

    def __init__(
        self,
        embedder: Embedder,
        *,
        min_relevance: float = 0.125,
        min_relevance_impersonal: float = 0.45,
        margin: float = 0.02,
        hub_weight: float = 1.5,
        redundant_at: float = 0.92,
        same_thing: float = 0.7,
        same_subject: float = 0.45,
        max_admitted: int = 3,
        succession_margin: float = 0.3,
    ) -> None:
        self.embedder = embedder
        self.min_relevance = min_relevance
        self.min_relevance_impersonal = min_relevance_impersonal
        self.margin = margin
        self.hub_weight = hub_weight
        self.redundant_at = redundant_at
        self.same_thing = same_thing
        self.same_subject = same_subject
        self.max_admitted = max_admitted
        self.succession_margin = succession_margin

    def _same_subject(self, a: Record, b: Record, similarity: float) -> bool:
        if distinct_things(a, b):
            return False  # the store's keys tell them apart: a second allergy, not an update
        if similarity >= self.same_thing:
            return True
        return similarity >= self.same_subject and _share_a_name(a.text, b.text)

    async def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> AdmissionDecision:
        reasons: dict[str, ReasonCode] = {}
        usable: list[Record] = []
        for record in candidates:
            if record.conflicts_with:
                reasons[record.id] = ReasonCode.STALE_OR_CONFLICTING
            elif record.epistemic is EpistemicState.HYPOTHETICAL or "[REDACTED:" in record.text:
                reasons[record.id] = ReasonCode.POTENTIALLY_HARMFUL
            else:
                usable.append(record)
        # What the answer already has: the draft (less its echo of the turn), the public
        # context and the profile, sentence by sentence.
        echo_free = draft.replace(turn.strip(), " ")
        known = [
            p
            for p in _pieces("\n".join([echo_free, public_context or "", ambient_profile.text]))
            if p not in turn
        ]
        background = BACKGROUND_REQUESTS if self.hub_weight else ()
        # Sentences of one turn say more together than apart ("My cat Pimiento is coming
        # too." / "He's 9 and on a kidney diet."): each is also scored as its turn's
        # candidates read together.
        siblings = same_turn_groups(usable)
        joined = [" ".join(r.text for r in g) for g in siblings]
        # A record that names one of the principal's people ("Sara changed jobs") is also
        # scored with the relation another candidate gives them ("my wife Sara"): it is
        # about "my wife" as much as about Sara.
        texts_of = [r.text for r in usable]
        people = people_introduced(texts_of)
        aliased = relation_aliases(usable, people)
        texts = [turn, *(r.text for r in usable), *joined, *aliased.values(), *known, *background]
        vectors = await self.embedder.embed(texts)
        turn_vec = vectors[0]
        rec_vecs = {r.id: vectors[1 + i] for i, r in enumerate(usable)}
        at = 1 + len(usable)
        joined_vecs = vectors[at : at + len(joined)]
        at += len(joined)
        aliased_vecs = vectors[at : at + len(aliased)]
        at += len(aliased)
        known_vecs = vectors[at : at + len(known)]
        background_vecs = vectors[len(vectors) - len(background) :] if background else []
        known_terms = set(content_terms(" ".join(known)))
        scores = relevance_scores(
            turn_vec,
            [rec_vecs[r.id] for r in usable],
            background_vecs,
            hub_weight=self.hub_weight,
        )
        relevance = {r.id: score for r, score in zip(usable, scores, strict=True)}
        together = relevance_scores(
            turn_vec, joined_vecs, background_vecs, hub_weight=self.hub_weight
        )
        for group, score in zip(siblings, together, strict=True):
            for record in group:
                relevance[record.id] = max(relevance[record.id], score)
        as_relation = relevance_scores(
            turn_vec, aliased_vecs, background_vecs, hub_weight=self.hub_weight
        )
        for rid, score in zip(aliased, as_relation, strict=True):
            relevance[rid] = max(relevance[rid], score)
        personal, reach = turn_reach(turn, texts_of)
        # A question about one of the principal's people by name ("What does Jonas do?") or
        # by relation ("What does my wife do now?", given "my wife Sara") is personal for the
        # records that name them, and for those only.
        asked = (
            people_asked_about(turn, people)
            if not personal
            else people_asked_by_relation(turn, people)
        )
        personal, reach = personal or bool(asked), reach or bool(asked)
        # The candidates that may be admitted (all, unless the turn asks about someone by
        # name) and the best score among them, which the others must come within.
        named = {r.id for r in usable if not asked or names_any(r.text, asked)}
        best = max((relevance[rid] for rid in named), default=0.0)
        floor = self.min_relevance if personal else self.min_relevance_impersonal
        helpful: list[Record] = []
        for record in usable:
            rel = relevance[record.id]
            terms = set(content_terms(record.text))
            said = any(cosine(rec_vecs[record.id], v) >= self.redundant_at for v in known_vecs)
            if (terms and terms <= known_terms) or said:
                reasons[record.id] = ReasonCode.REDUNDANT
            elif reach and rel >= floor and rel >= best - self.margin and record.id in named:
                reasons[record.id] = ReasonCode.HELPFUL
                helpful.append(record)
            else:
                reasons[record.id] = ReasonCode.INSUFFICIENT
        # A later statement about the same subject, close enough to the turn, is what holds
        # now: it takes the place of the earlier one it follows ("my partner Tomás stays in
        # Valencia until June" -> "Tomás arrived last week; he starts in May").
        newer = sorted(usable, key=lambda r: (_when(r), r.id), reverse=True)
        for i, record in enumerate(helpful):
            for later in newer:
                if _when(later) <= _when(record):
                    break
                if (
                    later not in helpful
                    and later.session_id != record.session_id
                    and reasons[later.id] is not ReasonCode.REDUNDANT
                    and relevance[later.id] >= max(floor, best - self.succession_margin)
                    and self._same_subject(
                        record, later, cosine(rec_vecs[record.id], rec_vecs[later.id])
                    )
                ):
                    reasons[record.id] = ReasonCode.STALE_OR_CONFLICTING
                    reasons[later.id] = ReasonCode.HELPFUL
                    relevance[later.id] = max(relevance[later.id], relevance[record.id])
                    helpful[i] = later
                    break
        # Two statements from different sessions that say nearly the same thing: the newer
        # one is what holds now.
        newest_first = sorted(helpful, key=lambda r: (_when(r), r.id), reverse=True)
        kept: list[Record] = []
        for record in newest_first:
            if any(
                k.session_id != record.session_id
                and self._same_subject(k, record, cosine(rec_vecs[k.id], rec_vecs[record.id]))
                for k in kept
            ):
                reasons[record.id] = ReasonCode.STALE_OR_CONFLICTING
                continue
            kept.append(record)
        kept.sort(key=lambda r: (-relevance[r.id], r.id))
        for record in kept[self.max_admitted :]:
            reasons[record.id] = ReasonCode.INSUFFICIENT
        admitted = [r.id for r in kept[: self.max_admitted]]
        # The other items of a list an admitted record is an item of (a second allergy of
        # the same person) come with it: half a list misleads.
        chosen = kept[: self.max_admitted]
        for record in usable:
            if (
                record.id not in admitted
                and reasons[record.id] in (ReasonCode.INSUFFICIENT, ReasonCode.HELPFUL)
                and len(admitted) < self.max_admitted + 2
                and any(items_of_one_list(record, c) for c in chosen)
            ):
                reasons[record.id] = ReasonCode.JOINTLY_HELPFUL
                admitted.append(record.id)
        verdicts = tuple(CandidateVerdict(record_id=r.id, reason=reasons[r.id]) for r in candidates)
        return AdmissionDecision(admitted=tuple(admitted), verdicts=verdicts, policy=self.policy_id)


# What each promotable category is about, described in general terms (spec §4: response
# style, response language, accessibility), and what a statement that is none of them looks
# like: facts about one's life and one-off requests. A claim the keyword rules do not place
# is filed by meaning against both.
_ACTIVATION_CATEGORY_DESCRIPTIONS: dict[str, tuple[str, ...]] = {
    "answer_style": (
        "how you should format and structure your answers to me",
        "the length, tone and wording I want in your replies",
        "the units, spelling and conventions to use when you answer me",
        "what you should put first in every answer you give me",
    ),
    "response_language": ("which language you should answer me in",),
    "accessibility": (
        "my disability and how your answers must accommodate it",
        "my reading, vision or hearing needs when you answer",
    ),
}
_NOT_A_PREFERENCE: tuple[str, ...] = (
    "a fact about my life, my family, my work or my plans",
    "something that happened to me recently",
    "a one-off task I am asking you to do now",
    "what I like to eat, watch or do in my free time",
    "something you should remind me of or keep doing for me",
)


class SemanticActivationClassifier:
    """Activation classifier of the ``local`` bundle: the offline rules, categories by meaning.

    The rule chain of :class:`~retold.OfflineActivationClassifier` decides everything
    (injection, first person, withdrawal, one-off, hedge, trigger, explicit instruction).
    Only when its keyword lists place the claim in no category is the claim filed by meaning:
    under the category whose description it is closest to, when that is at least
    ``min_similarity`` and ``margin`` above the closest non-preference description; and
    only a claim that says it stands (``always``, ``from now on``, ``with me``, a stated
    preference) is promoted on such a category, the rest stays conditional.
    """

    policy_version = "semantic-activation-local/1"
    prompt_version: str | None = None

    def __init__(
        self, embedder: Embedder, *, min_similarity: float = 0.3, margin: float = 0.05
    ) -> None:
        self.embedder = embedder
        self.rules = OfflineActivationClassifier()
        self.min_similarity = min_similarity
        self.margin = margin

    async def classify(self, request: ActivationRequest) -> ActivationProposal:
        proposal = self.rules.decide(request)
        if proposal.reason != "not_a_response_preference" or not standing_claim(request.claim):
            return proposal
        category = await self._category(request.claim)
        if category is None:
            return proposal
        return self.rules.decide(request, category_hint=category)

    async def _category(self, claim: str) -> str | None:
        """The category of the claim, or else of its instruction alone (the chat around it,
        "small request:", "my memory is terrible", can pull the whole claim elsewhere)."""
        names = [n for n, texts in _ACTIVATION_CATEGORY_DESCRIPTIONS.items() for _ in texts]
        described = [t for texts in _ACTIVATION_CATEGORY_DESCRIPTIONS.values() for t in texts]
        texts = [claim]
        instruction = ", ".join(instruction_clauses(claim))
        if instruction and instruction != claim.casefold():
            texts.append(instruction)
        vectors = await self.embedder.embed([*texts, *described, *_NOT_A_PREFERENCE])
        for i in range(len(texts)):
            scores = relevance_scores(vectors[i], vectors[len(texts) :], [], hub_weight=0.0)
            best = max(range(len(names)), key=lambda j: (scores[j], -j))
            other = max(scores[len(names) :])
            if scores[best] >= self.min_similarity and scores[best] >= other + self.margin:
                return names[best]
        return None
