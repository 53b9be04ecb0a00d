"""Deterministic reference policies: a lexical gap planner and a lexical admission judge.

They need no model, so the demo, the fitness suite and the tests run offline. They are
honest baselines, labelled as such in their ``policy_id`` ("lexical-…-offline"): the gap
planner looks for requests that depend on what the user told us before (memory cues,
questions about the user's own people, things and plans, requests whose answer depends on
the user's constraints), and the judge admits a candidate only when it shares specific
terms with the turn and adds something the draft does not already say.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from retold._policies import (
    AdmissionDecision,
    CandidateVerdict,
    Gap,
    GapCategory,
    GapDecision,
    ReasonCode,
)
from retold._records import EpistemicState, ProfileBlock, Record

__all__ = ["LexicalAdmissionJudge", "LexicalGapPlanner", "content_terms", "stem"]

_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further had hadn't has hasn't have haven't having
    he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm
    i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor not
    of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them themselves
    then there there's these they they'd they'll they're they've this those through to too under
    until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves also just please thanks thank hi hello hey ok okay yeah
    yes really quite any anything something tell know think want need like get got go going make
    give can could would will shall may might must one two lot lots thing things way ever still
    again remind remember recall name again told said mention mentioned us
    """.split()
)

_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")


def stem(word: str) -> str:
    """A light, deterministic suffix stripper (plural, -ing, -ed) for matching terms."""
    w = word.lower().strip("'-")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and not w.endswith("ss"):
            return w[: len(w) - len(suffix)] + keep
    return w


def content_terms(text: str) -> list[str]:
    """Stemmed content words of ``text`` in order of first appearance (stopwords removed)."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower()):
        if raw in _STOPWORDS or len(raw) < 2:
            continue
        s = stem(raw)
        if s and s not in out:
            out.append(s)
    return out


# Cues that the user is asking about something they told us before.
_RECALL_CUES = re.compile(
    r"\b(again|remind me|remember|recall|i told you|i mentioned|as i said|last time|we discussed|"
    r"we talked|you know my|did i|have i|when did i|where did i|what did i|how long ago|how long have i|"
    r"what was (?:my|the name)|what's my|what is my|who is my|who's my|where do i|where does my|"
    r"when is my|when's my|how old is my|how many .{1,30} do i|which .{1,30} did i|my usual|"
    r"still|anymore|these days|currently|my current)\b",
    re.I,
)
# Requests whose best answer depends on the user's own constraints and circumstances.
_PERSONALISE_CUES = re.compile(
    r"\b(recommend|suggest|suggestion|ideas? for|what should i|should i|can you plan|plan (?:a|my|our)|"
    r"help me (?:plan|pick|choose|decide)|pick (?:a|one|something)|recipe|dinner|lunch|breakfast|meal|"
    r"restaurant|gift|present|trip|vacation|holiday|weekend|workout|book (?:a|me)|for me|for us|"
    r"my (?:next|upcoming)|tonight|tomorrow|this weekend)\b",
    re.I,
)
_PERSONAL_NOUNS = frozenset(
    stem(w)
    for w in """
    wife husband partner boyfriend girlfriend fiance fiancee son daughter kid kids child children
    baby mom mother dad father parents sister brother sibling grandma grandmother grandpa
    grandfather aunt uncle cousin niece nephew friend friends boss manager colleague coworker
    team roommate neighbor neighbour landlord dog cat pet puppy kitten dentist doctor therapist
    vet trainer teacher tutor coach car bike apartment flat house home rent mortgage salary job
    work office company employer school university college class course project deadline
    appointment meeting flight trip vacation holiday wedding birthday anniversary party plan
    plans budget diet allergy allergies medication garden band gym hobby
    """.split()
)
# Words in the turn that point at a category of stored information.
_CATEGORY_CUES: tuple[tuple[GapCategory, re.Pattern[str]], ...] = (
    (
        GapCategory.CONSTRAINT,
        re.compile(
            r"\b(allerg\w*|diet|vegan|vegetarian|budget|afford|cheap|price|cost|recipe|dinner|lunch|breakfast|meal|eat|food|restaurant|snack)\b",
            re.I,
        ),
    ),
    (
        GapCategory.PRIOR_DECISION,
        re.compile(
            r"\b(decid\w*|chose|choose|picked|settled|go with|went with|plan(?:ned)?|agreed)\b",
            re.I,
        ),
    ),
    (
        GapCategory.TASK_STATE,
        re.compile(
            r"\b(progress|status|where was i|next step|todo|to-do|finish\w*|working on|deadline|due)\b",
            re.I,
        ),
    ),
    (
        GapCategory.PREFERENCE,
        re.compile(r"\b(prefer\w*|favou?rite|like|love|enjoy|hate|usual|style)\b", re.I),
    ),
)
# Expansions from a request type to the kind of stored facts that would change the answer.
_EXPANSIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"\b(recipe|dinner|lunch|breakfast|meal|cook\w*|eat|food|snack|restaurant|bake|baking)\b",
            re.I,
        ),
        "vegan vegetarian allergic allergy diet eat food cook",
    ),
    (
        re.compile(r"\b(trip|vacation|holiday|travel\w*|flight|weekend)\b", re.I),
        "trip travel flight vacation budget",
    ),
    (
        re.compile(r"\b(gift|present|birthday|anniversary)\b", re.I),
        "gift birthday like love favorite",
    ),
    (
        re.compile(r"\b(workout|exercise|gym|run|running|training)\b", re.I),
        "injury knee back workout gym run",
    ),
    (re.compile(r"\b(budget|afford|price|cost|spend)\b", re.I), "budget afford spend"),
)


class LexicalGapPlanner:
    """Deterministic lexical gap planner (offline reference policy, no model).

    Plans at most one gap per category cue, up to three, only when the turn asks about the
    user's own past, people or things, or asks for a recommendation that depends on their
    constraints, and only when the store holds anything for the principal (``inventory``).
    """

    policy_id = "lexical-gap-planner-offline@1"

    def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision:
        if not inventory:
            return GapDecision(policy=self.policy_id)
        terms = content_terms(turn)
        personal = bool(re.search(r"\b(my|our|i|i'm|i've|we|me)\b", turn, re.I))
        recall = bool(_RECALL_CUES.search(turn)) and personal
        personal_noun = (
            personal
            and any(t in _PERSONAL_NOUNS for t in terms)
            and bool(re.search(r"\b(my|our)\s+(?:\w+\s+)?(\w+)", turn, re.I))
        )
        personalise = bool(_PERSONALISE_CUES.search(turn))
        if not (recall or personal_noun or personalise):
            return GapDecision(policy=self.policy_id)
        expansions = [extra for pattern, extra in _EXPANSIONS if pattern.search(turn)]
        query = " ".join(dict.fromkeys([*terms, *" ".join(expansions).split()]))
        if not query.strip():
            return GapDecision(policy=self.policy_id)
        categories = [cat for cat, pattern in _CATEGORY_CUES if pattern.search(turn)]
        if not categories:
            categories = [GapCategory.RELATIONSHIP_OR_EVENT]
        gaps = tuple(Gap(category=cat, query=query) for cat in categories[:1])
        return GapDecision(gaps=gaps, policy=self.policy_id)


class LexicalAdmissionJudge:
    """Deterministic lexical admission judge (offline reference policy, no model).

    A candidate is ``helpful`` when it shares at least ``min_shared`` specific terms with the
    turn (or with the turn's constraint expansions) and most of its terms are not already in
    the draft, the public context or the profile; ``redundant`` when they are; ``stale_or_
    conflicting`` when it carries unresolved conflict links; ``potentially_harmful`` when
    it is hypothetical or redacted; ``insufficient`` otherwise. At most ``max_admitted``
    records are admitted, best overlap first; an inconclusive set is EMPTY.
    """

    policy_id = "lexical-admission-judge-offline@1"

    def __init__(self, *, min_shared: int = 1, max_admitted: int = 3) -> None:
        self.min_shared = min_shared
        self.max_admitted = max_admitted

    def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> AdmissionDecision:
        wanted = set(content_terms(turn))
        for pattern, extra in _EXPANSIONS:
            if pattern.search(turn):
                wanted.update(stem(w) for w in extra.split())
        known = set(content_terms(" ".join([draft, public_context or "", ambient_profile.text])))
        scored: list[tuple[int, str]] = []
        reasons: dict[str, ReasonCode] = {}
        for record in candidates:
            terms = set(content_terms(record.text))
            shared = terms & wanted
            novel = terms - known - wanted
            if record.conflicts_with:
                reasons[record.id] = ReasonCode.STALE_OR_CONFLICTING
            elif record.epistemic is EpistemicState.HYPOTHETICAL or "[REDACTED:" in record.text:
                reasons[record.id] = ReasonCode.POTENTIALLY_HARMFUL
            elif len(shared) < self.min_shared:
                reasons[record.id] = ReasonCode.INSUFFICIENT
            elif terms and not novel and terms <= known | wanted and terms & known >= shared:
                reasons[record.id] = ReasonCode.REDUNDANT
            else:
                reasons[record.id] = ReasonCode.HELPFUL
                scored.append((len(shared), record.id))
        scored.sort(key=lambda item: (-item[0], item[1]))
        admitted = [rid for _, rid in scored[: self.max_admitted]]
        for _, rid in scored[self.max_admitted :]:
            reasons[rid] = ReasonCode.INSUFFICIENT
        verdicts = tuple(CandidateVerdict(record_id=r.id, reason=reasons[r.id]) for r in candidates)
        return AdmissionDecision(admitted=tuple(admitted), verdicts=verdicts, policy=self.policy_id)
