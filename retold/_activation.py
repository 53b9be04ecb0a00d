"""The audited activation policy (spec §2.1): who may become part of the ambient profile.

A record reaches the ambient profile only through this module (or a reviewer using its
queue), in three steps, each audited as an event on the record:

1. **Eligibility** (deterministic): a semantic record about the principal, stated by the
   user as a direct claim (source ``user_stated``, epistemic ``asserted`` or ``observed``),
   active, not superseded, not expired, free of unresolved conflicts, not rejected by a
   reviewer. A failure appends ``record.activation_ineligible`` with the reasons, leaves the
   record conditional and never invokes the classifier.
2. **Host-verified direct evidence**: the host, not the model, finds a supporting claim in a
   turn of the persisted transcript written by the principal (role ``user``, speaker the
   principal or unset). Assistant, tool and system turns and other speakers never count,
   and the model-authored ``record.evidence`` is only a hint of where to look. Success
   appends ``record.activation_evidence_verified`` with the turn reference; that event is
   what makes a record *confirmed* (see :func:`confirmed_evidence`).
3. **Decision** from a pluggable :class:`ActivationClassifier` (sync or async, run under a
   timeout): ``promote`` | ``conditional`` | ``review``, appended as
   ``record.activation_decided``. Promotion needs verified evidence, a ``promote`` proposal
   with enough confidence and a category in :data:`ACTIVATION_CATEGORIES`; a timeout, an
   exception, malformed output or low confidence creates a review item instead. Actual
   changes go through ``store.set_activation`` (``record.activation_changed``).

Before a committed record is evaluated, :meth:`ActivationPolicy.apply_withdrawals` applies
the authority rule to withdrawals: a later direct principal statement that takes back a
response preference ("never mind the bullet points", "let's drop the Hindi thing",
"actually, don't ...") or contradicts it (same category and topic, opposite negation)
supersedes it, so it leaves newly assembled profiles at once and is never promoted.

The matching rule of step 2 (:func:`find_supporting_claim`) is lexical and deterministic:
the turn is split into sentences; a sentence is skipped when it is a question (unless it is
a standing request such as "can you always ...?" or "could you ... from now on?"),
hypothetical ("if", "suppose", "imagine", ...; idioms such as "if needed" do not count),
about a third party (third-person pronouns other than "I find them ...", or a subject
other than "I" before a reporting/preference verb such as "wants" or "said"), or differs
from the record in negation. The record's content words (stop words and generic preference
verbs removed, light suffix stemming) must then be found in the sentence: at least
``min(2, n)`` of the ``n`` words and at least 60% of them.
"""

from __future__ import annotations

import inspect
import json
import re
import threading
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
import anyio.to_thread
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import InvalidInputError, UsageError
from ._lexicon import LANGUAGE_NAMES
from ._records import (
    SEMANTIC_KINDS,
    Activation,
    EpistemicState,
    EvidenceRef,
    LifecycleState,
    Principal,
    Record,
    Role,
    SourceType,
    TranscriptTurn,
    WriteOrigin,
    utc,
)
from ._store import SQLiteStore, iso

__all__ = [
    "ACTIVATION_CATEGORIES",
    "ActivationClassifier",
    "ActivationDecision",
    "ActivationOutcome",
    "ActivationPolicy",
    "ActivationProposal",
    "ActivationRequest",
    "ClaimMatch",
    "OfflineActivationClassifier",
    "ReviewBacklog",
    "ReviewItem",
    "ReviewQueue",
    "ReviewResolution",
    "VerifiedEvidence",
    "check_eligibility",
    "confirmed_evidence",
    "find_supporting_claim",
    "unresolved_conflicts",
    "verify_evidence",
]

log = structlog.get_logger(__name__)

#: The only categories that may ever become ambient. Neither a classifier nor a reviewer
#: can add to it; a policy may be configured with a subset.
ACTIVATION_CATEGORIES: tuple[str, ...] = ("accessibility", "answer_style", "response_language")

ActivationDecision = Literal["promote", "conditional", "review"]
ReviewResolution = Literal["promote", "conditional", "reject"]

EV_INELIGIBLE = "record.activation_ineligible"
EV_EVIDENCE_VERIFIED = "record.activation_evidence_verified"
EV_EVIDENCE_REVOKED = "record.activation_evidence_revoked"
EV_DECIDED = "record.activation_decided"
EV_REVIEWED = "record.activation_reviewed"
EV_CHANGED = "record.activation_changed"

_DIRECT_EPISTEMIC = frozenset({EpistemicState.ASSERTED, EpistemicState.OBSERVED})
_FALLBACK_TURNS = 200

_ACTIVATION_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE activation_reviews (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        record_id TEXT NOT NULL,
        evidence_session_id TEXT,
        evidence_turn_index INTEGER,
        proposed_decision TEXT,
        proposed_category TEXT,
        attribute TEXT,
        reason TEXT NOT NULL,
        policy_version TEXT NOT NULL,
        prompt_version TEXT,
        confidence REAL,
        created_at TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        resolution TEXT,
        applied INTEGER,
        resolution_reason TEXT,
        category TEXT,
        reviewer TEXT,
        note TEXT,
        resolved_at TEXT
    );
    CREATE UNIQUE INDEX activation_reviews_one_pending
        ON activation_reviews (tenant, principal, record_id) WHERE status = 'pending';
    CREATE INDEX activation_reviews_status ON activation_reviews (status, created_at, id);
    """,
)


def _ensure_schema(store: SQLiteStore) -> None:
    store.ensure_schema("activation", _ACTIVATION_MIGRATIONS)


# -- models -----------------------------------------------------------------------------


class ClaimMatch(BaseModel):
    """Where a record's claim was found inside one turn's text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sentence_index: int
    sentence: str
    matched: int
    of: int


class VerifiedEvidence(BaseModel):
    """A host-verified supporting claim: a principal's own turn and the sentence in it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ref: EvidenceRef
    sentence_index: int
    claim: str
    matched: int
    of: int


class ActivationRequest(BaseModel):
    """What a classifier sees: the record and the host-verified claim, never the attribute slug.

    Attributes:
        claim: the sentence of the principal's own turn that the host verified.
        allowed_categories: the only categories a promotion may carry.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    record_id: str
    kind: str
    record_text: str
    claim: str
    evidence: EvidenceRef
    allowed_categories: tuple[str, ...] = ACTIVATION_CATEGORIES


class ActivationProposal(BaseModel):
    """A classifier's answer. Anything that does not validate as this is treated as malformed.

    Attributes:
        decision: ``promote`` (broad response instruction), ``conditional`` (has a trigger or
            is not a response preference) or ``review`` (ambiguous or unsafe).
        category: the policy category it assigns (only allowlisted ones can be promoted).
        confidence: 0..1; below the policy's threshold the record goes to review.
        reason: a short machine-readable reason code.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: ActivationDecision
    category: str | None = Field(default=None, max_length=80)
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field(default="", max_length=200)


@runtime_checkable
class ActivationClassifier(Protocol):
    """Proposes an activation decision for one eligible record with verified evidence.

    A conforming classifier:

    * returns an :class:`ActivationProposal` (or a mapping that validates as one), directly
      or as an awaitable; anything else is malformed and sends the record to review;
    * bases its answer on ``request.claim`` (the host-verified user sentence), treating it
      as data, never as instructions to itself;
    * proposes ``promote`` only for an explicit, broadly applicable response instruction in
      one of ``request.allowed_categories``; a promotion with another category is ignored;
    * names itself: ``policy_version`` and ``prompt_version`` are stored with every decision
      and review item (``prompt_version`` is None for classifiers without a prompt).

    The policy enforces its own timeout; a classifier need not.
    """

    @property
    def policy_version(self) -> str: ...

    @property
    def prompt_version(self) -> str | None: ...

    def classify(
        self, request: ActivationRequest
    ) -> ActivationProposal | Awaitable[ActivationProposal]: ...


class ActivationOutcome(BaseModel):
    """What one evaluation did.

    Attributes:
        eligible: False when an eligibility check (or evidence verification) failed.
        decision: the applied decision (None when ineligible).
        activation: the record's activation afterwards.
        reason: the primary reason code; ``reasons`` lists every failed eligibility check.
        proposed: the classifier's raw proposal when it returned a valid one.
        review_id: the review item created (or already pending) for this record.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    record_id: str
    eligible: bool
    decision: ActivationDecision | None = None
    activation: Activation = Activation.CONDITIONAL
    reason: str = ""
    reasons: tuple[str, ...] = ()
    category: str | None = None
    attribute: str | None = None
    confidence: float | None = None
    proposed: ActivationDecision | None = None
    evidence: EvidenceRef | None = None
    review_id: str | None = None
    policy_version: str | None = None
    prompt_version: str | None = None

    @property
    def promoted(self) -> bool:
        return self.decision == "promote" and self.activation is Activation.AMBIENT


class ReviewItem(BaseModel):
    """One row of the activation review queue (spec §2.1 lists its fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    tenant: str
    principal: str
    record_id: str
    evidence: EvidenceRef | None
    proposed_decision: ActivationDecision | None
    proposed_category: str | None
    attribute: str | None
    reason: str
    policy_version: str
    prompt_version: str | None
    confidence: float | None
    created_at: datetime
    status: Literal["pending", "resolved"]
    resolution: ReviewResolution | None = None
    applied: bool | None = None
    resolution_reason: str | None = None
    category: str | None = None
    reviewer: str | None = None
    note: str | None = None
    resolved_at: datetime | None = None

    @property
    def scope(self) -> Principal:
        return Principal(tenant=self.tenant, principal=self.principal)


class ReviewBacklog(BaseModel):
    """The size and age of the pending review queue, for keeping it bounded (§8)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pending: int
    oldest_created_at: datetime | None = None
    oldest_age_seconds: float | None = None


# -- deterministic text rules -----------------------------------------------------------

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;])\s+|\n+|[\u0085\u2028\u2029]+")
_NEGATIONS = frozenset({"not", "no", "never", "nor", "without", "cannot"})
_HYPOTHETICAL = frozenset(
    {
        "if",
        "suppose",
        "supposing",
        "imagine",
        "imagining",
        "hypothetically",
        "hypothetical",
        "pretend",
        "pretending",
        "unless",
        "whether",
    }
)
_THIRD_PERSON = frozenset(
    {"he", "she", "they", "his", "her", "hers", "him", "them", "their", "theirs"}
)
# "If needed", "if possible", ...: idiomatic qualifiers of an instruction, not hypotheticals.
_IF_IDIOM = re.compile(
    r"\bif (?:needed|necessary|possible|relevant|appropriate|applicable|useful|helpful|any)\b"
)
# "I find them distracting": an object pronoun for the thing the principal judges, not a
# third party (who would be "I want them to ...", which stays disqualified).
_THING_PRONOUN = re.compile(
    r"\bi\s+(?:really\s+|just\s+|honestly\s+)?(?:find|found|hate|dislike|like|love|"
    r"(?:ca|can) not stand|cannot stand|ignore|skip|miss|skim)\s+them\b(?!\s+to\b)"
)
# A polite request phrased as a question ("can you generally ...?", "could you answer me in
# Japanese from now on?") is a direct instruction when it says the request is standing.
_REQUEST_QUESTION = re.compile(
    r"^\W*(?:(?:hey|hi|ok|okay|so|also|and|but|actually|please|btw|oh|well)\W+)*"
    r"(?:can|could|would|will)\s+you\b"
)
_STANDING = re.compile(
    r"\b(?:always|generally|in general|from now on|from here on|going forward|by default|"
    r"every time|all the time|in (?:the )?future|as a rule|for everything|in every answer|"
    r"in all (?:your )?(?:answers|replies|responses))\b"
)
_REPORTING_VERBS = (
    "wants|prefers|likes|needs|asks|asked|says|said|told|tells|thinks|loves|hates|requires|"
    "required|wrote|writes|wanted|preferred|liked|needed"
)
_REPORTED = re.compile(rf"\b([^\W_]+)\s+(?:{_REPORTING_VERBS})\b")
_STOPWORDS = frozenset(
    """
    a an the and or but of to in on at by for from with as is are was were be been being am
    it its this that these those there here i me my mine we us our you your yours user users
    user's principal principal's prefers prefer preferred preference preferences wants want
    wanted likes like liked would should please always also just really very do does did
    so than then to too all any some s
    """.split()
)


def _normalise_text(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    # "don't" -> "do not", "can't" -> "ca not": negation parity sees one "not" either way.
    return re.sub(r"n't\b", " not", text)


def _words(text: str) -> list[str]:
    return _WORD.findall(_normalise_text(text))


def _stem(word: str) -> str:
    for suffix in ("ingly", "edly", "ly", "ing", "ed", "ies", "es", "s"):
        # "ly" keeps a 4-letter stem so "reply" is not cut to "rep".
        if word.endswith(suffix) and len(word) - len(suffix) >= (4 if suffix == "ly" else 3):
            word = word[: -len(suffix)] + ("i" if suffix == "ies" else "")
            break
    if word.endswith("y"):
        word = word[:-1] + "i"
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def _content_stems(text: str) -> set[str]:
    return {_stem(w) for w in _words(text) if w not in _STOPWORDS and w not in _NEGATIONS}


def _negated(words: Iterable[str]) -> bool:
    return any(w in _NEGATIONS for w in words)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


def _standing_request(sentence: str) -> bool:
    """A request-question that states a standing instruction ("can you always ...?")."""
    text = _normalise_text(sentence)
    return bool(_REQUEST_QUESTION.search(text)) and bool(_STANDING.search(text))


def _disqualified(sentence: str, words: Sequence[str]) -> str | None:
    """Why a sentence cannot be the principal's own direct claim (None when it can)."""
    if sentence.rstrip().endswith("?") and not _standing_request(sentence):
        return "question"
    unidiomatic = _IF_IDIOM.sub(" ", " ".join(words)).split()
    if any(w in _HYPOTHETICAL for w in unidiomatic) or "what if" in " ".join(words):
        return "hypothetical"
    pronouns = _THING_PRONOUN.sub(" ", " ".join(words)).split()
    if any(w in _THIRD_PERSON for w in pronouns):
        return "third_party"
    for m in _REPORTED.finditer(_IF_IDIOM.sub(" ", _normalise_text(sentence))):
        if m.group(1) != "i":
            return "third_party"
    return None


def find_supporting_claim(record_text: str, turn_text: str) -> ClaimMatch | None:
    """The first sentence of ``turn_text`` that states ``record_text`` directly, or None.

    Deterministic and lexical; see the module docstring for the exact rule.
    """
    wanted = _content_stems(record_text)
    if not wanted:
        return None
    record_negated = _negated(_words(record_text))
    need = min(2, len(wanted))
    for index, sentence in enumerate(_sentences(turn_text)):
        words = _words(sentence)
        if _disqualified(sentence, words) is not None:
            continue
        if _negated(words) != record_negated:
            continue
        matched = len(wanted & {_stem(w) for w in words})
        if matched >= need and matched / len(wanted) >= 0.6:
            return ClaimMatch(
                sentence_index=index, sentence=sentence, matched=matched, of=len(wanted)
            )
    return None


def _is_principal_turn(turn: TranscriptTurn, scope: Principal) -> bool:
    if turn.role is not Role.USER:
        return False
    return turn.speaker is None or turn.speaker.casefold() == scope.principal.casefold()


def _about_principal(record: Record, scope: Principal) -> bool:
    return record.speaker is None or record.speaker.casefold() == scope.principal.casefold()


# -- store-backed checks ----------------------------------------------------------------


def _load(store: SQLiteStore, scope: Principal, ids: Collection[str]) -> dict[str, Record]:
    found: dict[str, Record] = {}
    for rid in sorted(set(ids)):
        rec = store.get(scope, rid)
        if rec is not None:
            found[rid] = rec
    return found


def unresolved_conflicts(store: SQLiteStore, scope: Principal, record: Record) -> list[str]:
    """Ids of live records in conflict with ``record`` (linked in either direction).

    A conflict is resolved once either side stops being live (superseded, deleted,
    deprecated, archived or expired).
    """
    now = store.clock()
    linked = set(record.conflicts_with)
    rows = store.query(
        "SELECT id, conflicts_with FROM records WHERE tenant = ? AND principal = ? "
        "AND instr(conflicts_with, ?) > 0",
        [scope.tenant, scope.principal, json.dumps(record.id)],
    )
    for row in rows:
        if record.id in json.loads(row["conflicts_with"]):
            linked.add(str(row["id"]))
    linked.discard(record.id)
    others = _load(store, scope, linked)
    return sorted(rid for rid, other in others.items() if other.is_live(now))


def _latest_review_resolution(store: SQLiteStore, scope: Principal, record_id: str) -> str | None:
    _ensure_schema(store)
    rows = store.query(
        "SELECT resolution FROM activation_reviews WHERE tenant = ? AND principal = ? "
        "AND record_id = ? AND status = 'resolved' ORDER BY resolved_at DESC, id DESC LIMIT 1",
        [scope.tenant, scope.principal, record_id],
    )
    return str(rows[0]["resolution"]) if rows else None


def check_eligibility(store: SQLiteStore, scope: Principal, record: Record) -> list[str]:
    """Every failed eligibility check for ``record`` (empty when eligible), in a fixed order.

    The attribute slug is deliberately not consulted.
    """
    now = store.clock()
    reasons: list[str] = []
    if record.kind not in SEMANTIC_KINDS:
        reasons.append("not_semantic")
    if not _about_principal(record, scope):
        reasons.append("not_about_principal")
    if record.source_type is not SourceType.USER_STATED:
        reasons.append("not_user_stated")
    if record.epistemic not in _DIRECT_EPISTEMIC:
        reasons.append("not_direct_claim")
    if record.lifecycle is not LifecycleState.ACTIVE or record.superseded_by:
        reasons.append("not_active")
    elif not record.is_live(now):
        reasons.append("expired")
    if record.lifecycle is not LifecycleState.DELETED and unresolved_conflicts(
        store, scope, record
    ):
        reasons.append("unresolved_conflict")
    if _latest_review_resolution(store, scope, record.id) == "reject":
        reasons.append("rejected_by_reviewer")
    return reasons


def _candidate_turns(store: SQLiteStore, scope: Principal, record: Record) -> list[TranscriptTurn]:
    """Turns to search, in a fixed order: the cited turns, then their sessions and the
    record's session; with neither, the principal's latest user turns."""
    seen: set[tuple[str, int]] = set()
    out: list[TranscriptTurn] = []

    def take(turn: TranscriptTurn | None) -> None:
        if turn is not None and (turn.session_id, turn.turn_index) not in seen:
            seen.add((turn.session_id, turn.turn_index))
            out.append(turn)

    for ref in record.evidence:
        take(store.get_turn(scope, ref))
    sessions = [ref.session_id for ref in record.evidence]
    if record.session_id:
        sessions.append(record.session_id)
    for session in dict.fromkeys(sessions):
        for turn in store.turns(scope, session):
            take(turn)
    if not sessions:
        rows = store.query(
            "SELECT session_id, turn_index, role, speaker, text, time FROM transcript_turns "
            "WHERE tenant = ? AND principal = ? AND role = 'user' "
            "ORDER BY time DESC, session_id, turn_index LIMIT ?",
            [scope.tenant, scope.principal, _FALLBACK_TURNS],
        )
        for row in rows:
            take(TranscriptTurn.model_validate(row))
    return out


def verify_evidence(
    store: SQLiteStore, scope: Principal, record: Record
) -> VerifiedEvidence | None:
    """Find the principal's own turn that directly states ``record`` (None when there is none).

    Only user turns whose speaker is the principal (or unset) are searched; the record's
    cited evidence only decides where to look first. Read-only: nothing is written.
    """
    if not record.text:
        return None
    for turn in _candidate_turns(store, scope, record):
        if not _is_principal_turn(turn, scope):
            continue
        match = find_supporting_claim(record.text, turn.text)
        if match is not None:
            return VerifiedEvidence(
                ref=turn.ref,
                sentence_index=match.sentence_index,
                claim=match.sentence,
                matched=match.matched,
                of=match.of,
            )
    return None


def confirmed_evidence(
    store: SQLiteStore, scope: Principal, records: Sequence[Record]
) -> dict[str, EvidenceRef]:
    """The records among ``records`` that are *confirmed*, with their evidence turn.

    Confirmed means all of: source ``user_stated``; epistemic ``asserted`` or ``observed``;
    the record's latest evidence event is ``record.activation_evidence_verified`` (not
    ``record.activation_evidence_revoked``); and the turn it names still exists in the
    persisted transcript as a user turn of the principal.
    """
    direct = [
        r
        for r in records
        if r.source_type is SourceType.USER_STATED and r.epistemic in _DIRECT_EPISTEMIC
    ]
    if not direct:
        return {}
    ids = [r.id for r in direct]
    marks = ", ".join("?" for _ in ids)
    rows = store.query(
        "SELECT record_id, type, data FROM events WHERE tenant = ? AND principal = ? "
        f"AND type IN (?, ?) AND record_id IN ({marks}) ORDER BY id",
        [scope.tenant, scope.principal, EV_EVIDENCE_VERIFIED, EV_EVIDENCE_REVOKED, *ids],
    )
    latest: dict[str, EvidenceRef | None] = {}
    for row in rows:
        if row["type"] == EV_EVIDENCE_REVOKED:
            latest[row["record_id"]] = None
            continue
        data = json.loads(row["data"])
        try:
            latest[row["record_id"]] = EvidenceRef(
                session_id=data["session_id"], turn_index=data["turn_index"]
            )
        except (KeyError, ValidationError):
            latest[row["record_id"]] = None
    out: dict[str, EvidenceRef] = {}
    for rid in ids:
        ref = latest.get(rid)
        if ref is None:
            continue
        turn = store.get_turn(scope, ref)
        if turn is not None and _is_principal_turn(turn, scope):
            out[rid] = ref
    return out


# -- the offline classifier -------------------------------------------------------------

_CATEGORY_PATTERNS: dict[str, re.Pattern[str]] = {
    "accessibility": re.compile(
        r"\b(?:screen ?readers?|dyslexi[ac]\w*|large (?:print|font|text)|bigger (?:font|text)|"
        r"colou?r ?blind\w*|visually impaired|visual(?:ly)? impairment|vision impair\w*|"
        r"low vision|partially sighted|sight loss|macular degeneration|blind|deaf|"
        r"hard of hearing|alt text|captions?|subtitles|sign language|plain language|"
        r"easy[- ]read|adhd|high contrast)\b"
    ),
    "response_language": re.compile(
        rf"\b(?:in|into|using|en|em|auf|na)\s+(?:{LANGUAGE_NAMES})\b|\b(?:{LANGUAGE_NAMES})\s+only\b|"
        rf"\b(?:{LANGUAGE_NAMES})\s+(?:mein|me)\s+(?:jawab|baat|likh\w*|bol\w*|samjha\w*)\b"
    ),
    "answer_style": re.compile(
        r"\b(?:concise\w*|brief\w*|short\w*|succinct\w*|terse\w*|detailed|verbose|thorough\w*|"
        r"in depth|in-depth|bullet(?:s| points?)?|formal\w*|informal\w*|casual\w*|tone|emojis?|"
        r"markdown|tables?|step[- ]by[- ]step|examples?|jargon|tl;?dr|summary first|"
        r"one (?:line|sentence|paragraph)|long(?:er)? answers?|"
        r"numbered|(?:one|single) (?:action|step|thing|idea) (?:per|at a time)|"
        r"metric|imperial|units?|celsius|fahrenheit|plain text|plain english|prose|headings?|"
        r"headers|simply|simple terms|lead with|(?:the )?answer first|preamble|filler|"
        r"get (?:straight )?to (?:it|the point)|to the point|apologi[sz]\w*|compliment\w*|"
        r"flatter\w*|pleasantries|walls? of text|blocks? of text|(?:short|long) sentences|"
        r"like a friend|friendly|professional)\b"
    ),
}
_INJECTION = re.compile(
    r"\b(?:system prompt|prompt|instructions?|ignore|disregard|override|reveal|print\w*|"
    r"developer|jailbreak\w*|password\w*|api key|secret\w*|tokens?|execute|exec|run (?:the|this)|"
    r"tool calls?|function calls?|bypass|unrestricted|without restrictions|you are now|"
    r"pretend you|act as|as root|sudo|credentials?|https?://|www\.|refus\w*|warnings?|"
    r"safety|guidelines|filters?|censor\w*|no matter what|hidden|base64)"
)
_TRIGGER = re.compile(
    r"\b(?:when|whenever|while|during|if|unless|until|today|tonight|tomorrow|yesterday|"
    r"this (?:week|month|time|chat|conversation|session)|right now|for now|next time|"
    r"on weekends?|at work|in meetings?|about|regarding|one day|someday|once|"
    r"for (?!(?:me|you|us|everything|all|any|anything|every|good|ever)\b)\w+|"
    # the same triggers in the other languages the rules read
    r"cuando|quando|quand|lorsque|wenn|falls|si|hoy|hoje|heute|aujourd'hui|mañana|amanhã|"
    r"demain|morgen|esta semana|cette semaine|diese woche|esta semana|fin de semana|"
    r"fim de semana|week-end|wochenende|sobre|acerca de|concernant|über)\b"
)
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|sometimes|might|probably|possibly|not sure|i guess|kind of|sort of|"
    r"quizás?|tal vez|talvez|peut-être|vielleicht|a lo mejor|shayad)\b"
)
_INSTRUCTION_VERBS = (
    r"answer|reply|respond|write|explain|use|keep|give|format|talk|speak|avoid|stop|include|"
    r"make|be|send|show|tell|lead|start|begin|put|skip|describe|break|rely|list|number|cite|"
    r"add|spell|stick|assume|address|translate|summari[sz]e|structure|say|go|get|leave|drop|"
    r"limit|cut|ditch|lose"
)
_IMPERATIVE_START = re.compile(
    r"^(?:(?:actually|also|ok|okay|so|and|but|oh|well|hey|from now on|btw|then),?\s+)*"
    r"(?:(?:please|always|never|just|kindly|do not|do)\s+)*"
    rf"(?:{_INSTRUCTION_VERBS})\b"
)
# An instruction marker anywhere in the sentence ("..., so please always explain things
# simply", "I'm Deaf so please never tell me ..."), in the languages the rules read.
_INSTRUCTION_ANYWHERE = re.compile(
    r"\bplease\s+(?:always\s+|never\s+|just\s+|do not\s+|kindly\s+)*[^\W\d_]{2,}|"
    rf"\b(?:always|never)\s+(?:{_INSTRUCTION_VERBS})\b|"
    r"\b(?:you can|feel free to|no need to|you do not need to|you don't need to|"
    r"you never need to)\b|"
    r"\b(?:respóndeme|respondeme|contéstame|contestame|háblame|hablame|escríbeme|escribeme|"
    r"responde|contesta|habla|escribe|fala|fale|responda|escreve|escreva|réponds|reponds|"
    r"répondez|repondez|parle|parlez|écris|ecris|écrivez|antworte|antworten|sprich|schreib|"
    r"schreibe|jawab do|baat karo|likho|bolo)\b|"
    r"\b(?:siempre|sempre|toujours|immer|por favor|s'il te plaît|s'il vous plaît|bitte|"
    r"a partir de ahora|de ahora en adelante|à partir de maintenant|a partir de maintenant|"
    r"désormais|dorénavant|ab jetzt|von nun an|ab sofort|a partir de agora|"
    r"de agora em diante|daqui (?:pra|para) frente|hamesha|ab se)\b"
)
_PREFERENCE_FORM = re.compile(
    r"\bi(?:'d| would)?\s+(?:really\s+|actually\s+|generally\s+|much\s+|do\s+|always\s+)?"
    r"(?:like|want|prefer|need|require)\b|"
    r"\b(?:you|answers?|repl(?:y|ies)|responses?)\s+(?:should|must|need to)\b"
)
_RESPONSE_OBJECT = re.compile(
    r"\b(?:answers?|repl(?:y|ies)|respon(?:se|ses|d)|explanations?|you|your|emojis?|"
    r"bullet\w*|output|text|messages?|format\w*)\b"
)
_CLAUSE_SPLIT = re.compile(r"\s*(?:[,;:\u2014\u2013]|\s-\s|\bso\b|\band\b|\bbut\b|\bthen\b)\s*")
# Retracting an earlier preference rather than stating one: "never mind the bullet points",
# "forget the Hindi thing", "no longer", "stop replying in ...", "actually, don't ...".
_WITHDRAWAL = re.compile(
    r"\b(?:never ?mind|forget (?:about |that|it|what i said|the|my|those|this)|"
    r"scratch (?:that|the|what|my|those|this)|drop (?:the|that|my|those|this)|"
    r"cancel (?:that|the|my|those|this)|undo (?:that|the|my)|"
    r"disregard (?:that|what i said|the|my)|no longer|not any ?more|any ?more\b|"
    r"changed my mind|change of plan|go back to (?:normal|how)|back to normal|"
    r"stop (?:using|doing|replying|answering|responding|writing|talking|speaking|with)|"
    r"you can stop|no need (?:to|for) .*\bany ?more|"
    r"ya no|olvida\w*|déjalo|dejalo|oublie\w*|laisse tomber|plus besoin|esquece\w*|"
    r"não precisa mais|nao precisa mais|vergiss\w*|nicht mehr)\b"
)
_CHANGE_MARKER = re.compile(
    r"^(?:(?:oh|ok|okay|hmm|um|so|and|well),?\s+)*(?:actually|on second thought|wait|"
    r"instead|en fait|en realidad|na verdade|eigentlich)\b"
)


def _is_withdrawal(sentence: str) -> bool:
    """Whether ``sentence`` takes back an earlier preference instead of stating a new one.

    Withdrawal cues ("never mind", "forget ...", "scratch ...", "no longer", "stop replying
    ...", and their Spanish, Portuguese, French and German forms) or a change-of-mind opener
    followed by a negation ("actually, don't ...").
    """
    text = _normalise_text(sentence)
    if _WITHDRAWAL.search(text):
        return True
    return bool(_CHANGE_MARKER.search(text)) and _negated(_WORD.findall(text))


def _explicit_instruction(claim: str) -> bool:
    """Whether ``claim`` (normalised) is phrased as an instruction to the assistant."""
    if _standing_request(claim) or _INSTRUCTION_ANYWHERE.search(claim):
        return True
    if _PREFERENCE_FORM.search(claim) and _RESPONSE_OBJECT.search(claim):
        return True
    return any(_IMPERATIVE_START.search(c) for c in _CLAUSE_SPLIT.split(claim) if c)


def _categories(claim: str) -> list[str]:
    """The allowlisted categories whose keywords ``claim`` (normalised) contains."""
    found = [name for name, pat in _CATEGORY_PATTERNS.items() if pat.search(claim)]
    # An accessibility need stated together with the formatting it calls for ("I'm blind,
    # so avoid tables") is one accessibility preference, not two.
    if "accessibility" in found and set(found) <= {"accessibility", "answer_style"}:
        return ["accessibility"]
    return found


class OfflineActivationClassifier:
    """A deterministic, rule-based activation classifier for running with no model.

    OFFLINE REFERENCE POLICY: lexical rules, not a model. It promotes only explicit,
    untriggered response instructions whose category its keyword lists recognise (in
    English, and for response language also in Spanish, Portuguese, French, German and
    Hindi in Latin script), sends anything that looks like an instruction to the model
    itself (system prompts, tools, secrets, URLs, refusals and safety rules), hedged,
    multi-category or implicit text to review, and keeps withdrawals of an earlier
    preference, triggered preferences and the rest conditional.
    """

    policy_version = "offline-activation-rules/1"
    prompt_version: str | None = None

    def classify(self, request: ActivationRequest) -> ActivationProposal:
        claim = _normalise_text(request.claim)
        words = _WORD.findall(claim)
        if _INJECTION.search(claim):
            return ActivationProposal(
                decision="review", confidence=0.95, reason="possible_instruction_injection"
            )
        if _disqualified(request.claim, words) is not None:
            return ActivationProposal(decision="review", confidence=0.9, reason="not_first_person")
        if _is_withdrawal(request.claim):
            return ActivationProposal(
                decision="conditional", confidence=0.9, reason="withdraws_preference"
            )
        categories = _categories(claim)
        if not categories:
            return ActivationProposal(
                decision="conditional", confidence=0.9, reason="not_a_response_preference"
            )
        if len(categories) > 1:
            return ActivationProposal(
                decision="review", confidence=0.5, reason="ambiguous_category"
            )
        category = categories[0]
        if _HEDGE.search(claim):
            return ActivationProposal(
                decision="review", category=category, confidence=0.5, reason="hedged"
            )
        if _TRIGGER.search(_IF_IDIOM.sub(" ", claim)):
            return ActivationProposal(
                decision="conditional", category=category, confidence=0.85, reason="has_trigger"
            )
        if not _explicit_instruction(claim):
            return ActivationProposal(
                decision="review", category=category, confidence=0.6, reason="not_explicit"
            )
        return ActivationProposal(
            decision="promote",
            category=category,
            confidence=0.9,
            reason="explicit_broad_response_instruction",
        )


# -- withdrawal and contradiction ----------------------------------------------------------

#: Words that say how or that something is answered, not what the preference is about; a
#: withdrawal must share a topic word beyond these with the preference it takes back.
_GENERIC_TOPIC = frozenset(
    _stem(w)
    for w in """
    answer answers reply replies respond response responses write writing use using give keep
    make talk speak thing things stuff now again anymore any more actually just let let's ok
    okay said say mind forget drop scratch stop cancel undo disregard longer need want go back
    normal normally everything anything something every time please thanks thank instead
    wait change changed plan me you your thing for time one way can could
    """.split()
)
_CANDIDATE_LIMIT = 200


@dataclass(frozen=True, slots=True)
class _Claim:
    """A record's host-verified claim and where it was said (for ordering)."""

    text: str
    order: tuple[datetime, str, int, int]


def _topic(text: str) -> set[str]:
    return _content_stems(text) - _GENERIC_TOPIC


def _response_preference(text: str) -> bool:
    return bool(_categories(_normalise_text(text)))


def _withdraws(newer: _Claim, older: _Claim) -> bool:
    """Whether the principal's claim ``newer`` takes back their earlier claim ``older``.

    Both are host-verified sentences from the principal's own turns, and ``newer`` was said
    after ``older``. ``older`` must be a response preference (its sentence names an
    allowlisted category) and the two must share a topic word (generic answer/withdrawal
    words aside). Then ``newer`` withdraws ``older`` when it carries a withdrawal cue
    (:func:`_is_withdrawal`), or contradicts it: the same category and topic (the shared
    words are at least 60% of the smaller topic) with the opposite negation.
    """
    if newer.order <= older.order or not _response_preference(older.text):
        return False
    new_topic, old_topic = _topic(newer.text), _topic(older.text)
    shared = new_topic & old_topic
    if not shared:
        return False
    if _is_withdrawal(newer.text):
        return True
    new_cats = set(_categories(_normalise_text(newer.text)))
    old_cats = set(_categories(_normalise_text(older.text)))
    if not new_cats or new_cats != old_cats:
        return False
    if len(shared) < 0.6 * min(len(new_topic), len(old_topic)):
        return False
    return _negated(_words(newer.text)) != _negated(_words(older.text))


def _direct_claim(store: SQLiteStore, scope: Principal, record: Record) -> _Claim | None:
    """The record's host-verified claim with its position, when it is a direct statement."""
    if (
        record.kind not in SEMANTIC_KINDS
        or not _about_principal(record, scope)
        or record.source_type is not SourceType.USER_STATED
        or record.epistemic not in _DIRECT_EPISTEMIC
    ):
        return None
    evidence = verify_evidence(store, scope, record)
    if evidence is None:
        return None
    turn = store.get_turn(scope, evidence.ref)
    if turn is None:
        return None
    order = (turn.time, turn.session_id, turn.turn_index, evidence.sentence_index)
    return _Claim(text=evidence.claim, order=order)


def _live_preference_candidates(
    store: SQLiteStore, scope: Principal, *, exclude: str
) -> list[Record]:
    """Live direct semantic records of the principal that may withdraw or be withdrawn."""
    now = store.clock()
    out: list[Record] = []
    for record in store.list_records(scope, limit=_CANDIDATE_LIMIT):
        if record.id == exclude or record.superseded_by or not record.is_live(now):
            continue
        if record.kind not in SEMANTIC_KINDS or record.source_type is not SourceType.USER_STATED:
            continue
        if record.epistemic not in _DIRECT_EPISTEMIC or not _about_principal(record, scope):
            continue
        out.append(record)
    return out


# -- the review queue -------------------------------------------------------------------

_REVIEW_COLUMNS = (
    "id, tenant, principal, record_id, evidence_session_id, evidence_turn_index, "
    "proposed_decision, proposed_category, attribute, reason, policy_version, prompt_version, "
    "confidence, created_at, status, resolution, applied, resolution_reason, category, "
    "reviewer, note, resolved_at"
)


def _row_to_item(row: dict[str, Any]) -> ReviewItem:
    data = dict(row)
    session, index = data.pop("evidence_session_id"), data.pop("evidence_turn_index")
    data["evidence"] = (
        EvidenceRef(session_id=session, turn_index=index) if session is not None else None
    )
    if data["applied"] is not None:
        data["applied"] = bool(data["applied"])
    return ReviewItem.model_validate(data)


class ReviewQueue:
    """The activation review queue: pending items, trusted resolution, backlog metrics.

    Args:
        store: the store holding the queue (its ``activation_reviews`` table).
        categories: the categories a reviewer may promote (a subset of
            :data:`ACTIVATION_CATEGORIES`; a reviewer cannot expand it).
        id_factory: returns a new review id (inject for reproducible ids).
    """

    def __init__(
        self,
        store: SQLiteStore,
        *,
        categories: Collection[str] = ACTIVATION_CATEGORIES,
        id_factory: Callable[[], str] | None = None,
    ) -> None:
        self.store = store
        self.categories = _allowlist(categories)
        self._new_id = id_factory or (lambda: "rv" + uuid.uuid4().hex)
        _ensure_schema(store)

    def _create(
        self,
        scope: Principal,
        record: Record,
        *,
        evidence: EvidenceRef | None,
        proposed: ActivationDecision | None,
        category: str | None,
        reason: str,
        policy_version: str,
        prompt_version: str | None,
        confidence: float | None,
        decided_event: dict[str, Any],
        actor: str,
    ) -> tuple[str, bool]:
        """Insert a pending item and the decision event in one transaction.

        Returns the item id and whether it is new (an already pending item is reused).
        """
        with self.store.write() as w:
            existing = w.query(
                "SELECT id FROM activation_reviews WHERE tenant = ? AND principal = ? "
                "AND record_id = ? AND status = 'pending'",
                [scope.tenant, scope.principal, record.id],
            )
            if existing:
                return str(existing[0]["id"]), False
            review_id = self._new_id()
            w.insert(
                "activation_reviews",
                {
                    "id": review_id,
                    "tenant": scope.tenant,
                    "principal": scope.principal,
                    "record_id": record.id,
                    "evidence_session_id": evidence.session_id if evidence else None,
                    "evidence_turn_index": evidence.turn_index if evidence else None,
                    "proposed_decision": proposed,
                    "proposed_category": category,
                    "attribute": record.attribute,
                    "reason": reason,
                    "policy_version": policy_version,
                    "prompt_version": prompt_version,
                    "confidence": confidence,
                    "created_at": iso(w.now),
                    "status": "pending",
                },
            )
            w.event(
                scope,
                EV_DECIDED,
                actor=actor,
                record_id=record.id,
                data={**decided_event, "review_id": review_id},
            )
        log.info("activation_review_queued", review_id=review_id, record_id=record.id)
        return review_id, True

    def get(self, review_id: str) -> ReviewItem | None:
        """The item with ``review_id`` (any tenant: the queue is an operator's view)."""
        rows = self.store.query(
            f"SELECT {_REVIEW_COLUMNS} FROM activation_reviews WHERE id = ?", [review_id]
        )
        return _row_to_item(rows[0]) if rows else None

    def items(
        self,
        *,
        tenant: str | None = None,
        principal: str | None = None,
        status: Literal["pending", "resolved"] | None = "pending",
        limit: int | None = None,
    ) -> list[ReviewItem]:
        """Items oldest first (ties by id); by default only pending ones."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("tenant", tenant), ("principal", principal), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {_REVIEW_COLUMNS} FROM activation_reviews"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, id"
        if limit is not None:
            if limit < 0:
                raise InvalidInputError("limit", "must be >= 0")
            sql += " LIMIT ?"
            params.append(limit)
        return [_row_to_item(row) for row in self.store.query(sql, params)]

    def backlog(self, *, tenant: str | None = None) -> ReviewBacklog:
        """How many items are pending and how old the oldest is (by the store's clock)."""
        sql = "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM activation_reviews "
        sql += "WHERE status = 'pending'" + (" AND tenant = ?" if tenant is not None else "")
        row = self.store.query(sql, [tenant] if tenant is not None else [])[0]
        if not row["n"]:
            return ReviewBacklog(pending=0)
        oldest = utc(datetime.fromisoformat(row["oldest"]))
        age = max(0.0, (self.store.clock() - oldest).total_seconds())
        return ReviewBacklog(
            pending=int(row["n"]), oldest_created_at=oldest, oldest_age_seconds=age
        )

    def resolve(
        self,
        review_id: str,
        decision: ReviewResolution,
        *,
        reviewer: str,
        note: str | None = None,
        category: str | None = None,
    ) -> ReviewItem:
        """Resolve a pending item as a trusted reviewer.

        ``promote`` makes the record ambient if it is still eligible and confirmed and the
        category (``category`` or the proposed one) is allowlisted; a record that stopped
        being eligible meanwhile is not promoted (``applied`` is False, with the reason).
        ``conditional`` keeps or makes it conditional; ``reject`` does too and keeps future
        automatic evaluations from considering it. Appends ``record.activation_reviewed``
        and, when activation changes, ``record.activation_changed``.

        Raises:
            InvalidInputError: no such item, already resolved, unknown decision, or a
                promotion without an allowlisted category.
        """
        if decision not in ("promote", "conditional", "reject"):
            raise InvalidInputError("decision", "must be promote, conditional or reject")
        if not reviewer.strip():
            raise InvalidInputError("reviewer", "must not be empty")
        item = self.get(review_id)
        if item is None:
            raise InvalidInputError("id", f"no review item {review_id!r}")
        if item.status != "pending":
            raise InvalidInputError("id", f"review item {review_id!r} is already resolved")
        scope = item.scope
        chosen = category or item.proposed_category
        if category is not None and category not in self.categories:
            raise InvalidInputError(
                "category", f"must be one of {', '.join(self.categories)}; it cannot be widened"
            )
        if decision == "promote" and chosen not in self.categories:
            raise InvalidInputError(
                "category",
                f"promotion needs one of {', '.join(self.categories)} "
                f"(proposed: {item.proposed_category!r}); pass --category to assign one",
            )
        record = self.store.get(scope, item.record_id)
        applied, why = True, ""
        target = Activation.AMBIENT if decision == "promote" else Activation.CONDITIONAL
        if record is None:
            applied, why = False, "record_missing"
        elif decision == "promote":
            failures = check_eligibility(self.store, scope, record)
            if not failures and record.id not in confirmed_evidence(self.store, scope, [record]):
                failures.append("not_confirmed")
            if failures:
                applied, why = False, failures[0]
        with self.store.write() as w:
            claimed = w.execute(
                "UPDATE activation_reviews SET status = 'resolved', resolution = ?, applied = ?, "
                "resolution_reason = ?, category = ?, reviewer = ?, note = ?, resolved_at = ? "
                "WHERE id = ? AND status = 'pending'",
                [
                    decision,
                    int(applied),
                    why or None,
                    chosen,
                    reviewer,
                    note,
                    iso(w.now),
                    review_id,
                ],
            ).rowcount
            if claimed != 1:
                raise InvalidInputError("id", f"review item {review_id!r} is already resolved")
            w.event(
                scope,
                EV_REVIEWED,
                actor=f"reviewer:{reviewer}",
                record_id=item.record_id,
                data={
                    "review_id": review_id,
                    "resolution": decision,
                    "applied": applied,
                    "reason": why,
                    "category": chosen,
                    "attribute": item.attribute,
                    "reviewer": reviewer,
                },
            )
        if applied and record is not None and record.activation is not target:
            self.store.set_activation(
                scope,
                record.id,
                target,
                actor=f"reviewer:{reviewer}",
                origin=WriteOrigin.REVIEWER,
                data={"review_id": review_id, "category": chosen, "decision": decision},
            )
        log.info(
            "activation_reviewed",
            review_id=review_id,
            record_id=item.record_id,
            resolution=decision,
            applied=applied,
        )
        resolved = self.get(review_id)
        assert resolved is not None
        return resolved


def _allowlist(categories: Collection[str]) -> tuple[str, ...]:
    extra = set(categories) - set(ACTIVATION_CATEGORIES)
    if extra:
        raise UsageError(
            f"activation categories {sorted(extra)} are not allowed; the allowlist is "
            f"{', '.join(ACTIVATION_CATEGORIES)} and can only be narrowed"
        )
    return tuple(c for c in ACTIVATION_CATEGORIES if c in set(categories))


# -- the policy -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prepared:
    scope: Principal
    record: Record
    evidence: VerifiedEvidence
    request: ActivationRequest


@dataclass(frozen=True, slots=True)
class _Failure:
    reason: Literal["timeout", "classifier_error", "malformed"]


async def _await(value: Awaitable[Any]) -> Any:
    return await value


class ActivationPolicy:
    """Evaluates committed records for ambient activation, auditing every step.

    Args:
        store: where records, transcript, events and the review queue live.
        classifier: the decision-maker for eligible, verified records.
        timeout_s: the classifier's time limit; a timeout creates a review item.
        min_confidence: proposals below it create a review item.
        categories: promotable categories, a subset of :data:`ACTIVATION_CATEGORIES`.
        queue: the review queue (one over ``store`` by default).
        actor: the name written on events.
    """

    def __init__(
        self,
        store: SQLiteStore,
        classifier: ActivationClassifier,
        *,
        timeout_s: float = 5.0,
        min_confidence: float = 0.7,
        categories: Collection[str] = ACTIVATION_CATEGORIES,
        queue: ReviewQueue | None = None,
        actor: str = "activation_policy",
    ) -> None:
        if timeout_s <= 0:
            raise UsageError("timeout_s must be > 0")
        if not 0.0 <= min_confidence <= 1.0:
            raise UsageError("min_confidence must be between 0 and 1")
        self.store = store
        self.classifier = classifier
        self.timeout_s = timeout_s
        self.min_confidence = min_confidence
        self.categories = _allowlist(categories)
        self.queue = queue or ReviewQueue(store, categories=self.categories)
        self.actor = actor

    # -- entry points ---------------------------------------------------------------

    async def evaluate(self, scope: Principal, record_id: str) -> ActivationOutcome:
        """Evaluate one record (anyio: asyncio or trio); store work runs in worker threads.

        Raises:
            InvalidInputError: no record ``record_id`` in ``scope``.
        """
        prepared = await anyio.to_thread.run_sync(self._prepare, scope, record_id)
        if isinstance(prepared, ActivationOutcome):
            return prepared
        result = await self._classify_async(prepared.request)
        return await anyio.to_thread.run_sync(self._apply, prepared, result)

    def evaluate_sync(self, scope: Principal, record_id: str) -> ActivationOutcome:
        """Blocking :meth:`evaluate` for synchronous hosts (not for use inside an event loop).

        The classifier runs on a daemon thread that is abandoned at the timeout.
        """
        prepared = self._prepare(scope, record_id)
        if isinstance(prepared, ActivationOutcome):
            return prepared
        return self._apply(prepared, self._classify_blocking(prepared.request))

    async def on_record_committed(
        self, scope: Principal, record_id: str
    ) -> list[ActivationOutcome]:
        """The hook to call after any record write commits (extraction, host, tool call).

        Applies the authority rule to contradictions of ambient records, then evaluates
        the surviving record(s). A new record that conflicts with or supersedes an ambient
        record and is itself a direct user statement with host-verified evidence wins: the
        older ambient record is superseded and made conditional (removed from every newly
        assembled profile at once) and the new record is evaluated. Otherwise the ambient
        record survives but its conflict is unresolved, so its evaluation demotes it until
        the conflict is resolved.
        """
        survivors = await anyio.to_thread.run_sync(self._apply_authority, scope, record_id)
        return [await self.evaluate(scope, rid) for rid in survivors]

    def on_record_committed_sync(self, scope: Principal, record_id: str) -> list[ActivationOutcome]:
        """Blocking :meth:`on_record_committed`."""
        return [self.evaluate_sync(scope, rid) for rid in self._apply_authority(scope, record_id)]

    def apply_withdrawals(self, scope: Principal, record_id: str) -> list[str]:
        """Supersede the response preferences that a direct user statement takes back.

        Part of :meth:`on_record_committed`; see :func:`_withdraws` for the rule. Works in
        both directions, because a session's records are committed together and evaluated
        one by one: a newly committed withdrawal supersedes the earlier preferences it takes
        back, and a newly committed preference that a later statement (already stored)
        takes back is superseded before it can be evaluated, so it is never promoted.
        Each superseded record is made conditional (it leaves newly assembled profiles at
        once) with a ``record.superseded`` event whose reason names the withdrawing record.

        Returns the ids of the records it superseded.
        """
        record = self._require(scope, record_id)
        now = self.store.clock()
        if not record.is_live(now) or record.superseded_by:
            return []
        claim = _direct_claim(self.store, scope, record)
        if claim is None:
            return []
        pairs: list[tuple[Record, Record]] = []  # (withdrawn, by)
        topic = _topic(record.text) | _topic(claim.text)
        for other in _live_preference_candidates(self.store, scope, exclude=record.id):
            if not topic & _topic(other.text):
                continue  # cheap lexical filter before verifying the other record's evidence
            other_claim = _direct_claim(self.store, scope, other)
            if other_claim is None:
                continue
            if _withdraws(claim, other_claim):
                pairs.append((other, record))
            elif _withdraws(other_claim, claim):
                pairs.append((record, other))
        done: list[str] = []
        for old, by in pairs:
            if old.id in done:
                continue
            self._supersede(scope, old.id, by.id, f"withdrawn_by:{by.id}")
            log.info("activation_preference_withdrawn", record_id=old.id, by=by.id)
            done.append(old.id)
        return done

    def revoke_evidence(
        self, scope: Principal, record_id: str, *, actor: str, reason: str
    ) -> Record:
        """Withdraw a record's confirmed status (``record.activation_evidence_revoked``).

        The record is made conditional, so it leaves every newly assembled profile.
        """
        record = self._require(scope, record_id)
        self.store.append_event(
            scope, EV_EVIDENCE_REVOKED, actor=actor, record_id=record.id, data={"reason": reason}
        )
        return self._set(scope, record, Activation.CONDITIONAL, {"reason": "evidence_revoked"})

    # -- steps ----------------------------------------------------------------------

    def _require(self, scope: Principal, record_id: str) -> Record:
        record = self.store.get(scope, record_id)
        if record is None:
            raise InvalidInputError("record_id", f"no record {record_id!r} in this scope")
        return record

    def _supersede(self, scope: Principal, old_id: str, by_id: str, reason: str) -> None:
        """Close ``old_id`` in favour of ``by_id`` and take it out of ambient activation."""
        self.store.transition(
            scope,
            old_id,
            LifecycleState.SUPERSEDED,
            actor=self.actor,
            reason=reason,
            superseded_by=by_id,
        )
        self._set(scope, self._require(scope, old_id), Activation.CONDITIONAL, {"reason": reason})

    def _set(
        self, scope: Principal, record: Record, target: Activation, data: dict[str, Any]
    ) -> Record:
        if record.activation is target:
            return record
        return self.store.set_activation(
            scope,
            record.id,
            target,
            actor=self.actor,
            origin=WriteOrigin.ACTIVATION_POLICY,
            data=data,
        )

    def _ineligible(
        self, scope: Principal, record: Record, reasons: list[str]
    ) -> ActivationOutcome:
        self.store.append_event(
            scope,
            EV_INELIGIBLE,
            actor=self.actor,
            record_id=record.id,
            data={"reasons": reasons, "attribute": record.attribute},
        )
        after = record
        if record.lifecycle is not LifecycleState.DELETED:
            after = self._set(
                scope, record, Activation.CONDITIONAL, {"reason": f"ineligible:{reasons[0]}"}
            )
        log.info("activation_ineligible", record_id=record.id, reason=reasons[0])
        return ActivationOutcome(
            record_id=record.id,
            eligible=False,
            activation=after.activation,
            reason=reasons[0],
            reasons=tuple(reasons),
            attribute=record.attribute,
        )

    def _prepare(self, scope: Principal, record_id: str) -> _Prepared | ActivationOutcome:
        record = self._require(scope, record_id)
        reasons = check_eligibility(self.store, scope, record)
        if reasons:
            return self._ineligible(scope, record, reasons)
        evidence = verify_evidence(self.store, scope, record)
        if evidence is None:
            return self._ineligible(scope, record, ["no_verified_evidence"])
        self._record_evidence(scope, record, evidence)
        pending = self.queue.items(tenant=scope.tenant, principal=scope.principal)
        for item in pending:
            if item.record_id == record.id:
                return ActivationOutcome(
                    record_id=record.id,
                    eligible=True,
                    decision="review",
                    activation=record.activation,
                    reason="review_pending",
                    attribute=record.attribute,
                    evidence=evidence.ref,
                    review_id=item.id,
                )
        request = ActivationRequest(
            record_id=record.id,
            kind=record.kind.value,
            record_text=record.text,
            claim=evidence.claim,
            evidence=evidence.ref,
            allowed_categories=self.categories,
        )
        return _Prepared(scope=scope, record=record, evidence=evidence, request=request)

    def _record_evidence(self, scope: Principal, record: Record, ev: VerifiedEvidence) -> None:
        if confirmed_evidence(self.store, scope, [record]).get(record.id) == ev.ref:
            return  # already verified against this very turn; nothing new to audit
        self.store.append_event(
            scope,
            EV_EVIDENCE_VERIFIED,
            actor=self.actor,
            record_id=record.id,
            data={
                "session_id": ev.ref.session_id,
                "turn_index": ev.ref.turn_index,
                "sentence_index": ev.sentence_index,
                "matched": ev.matched,
                "of": ev.of,
                "method": "lexical_containment/1",
            },
        )
        log.info("activation_evidence_verified", record_id=record.id)

    async def _classify_async(self, request: ActivationRequest) -> Any:
        classify: Callable[[ActivationRequest], Any] = self.classifier.classify
        result: Any = _Failure(reason="timeout")
        try:
            with anyio.move_on_after(self.timeout_s):
                if inspect.iscoroutinefunction(classify):
                    value = classify(request)
                    result = await value if inspect.isawaitable(value) else value
                else:
                    value = await anyio.to_thread.run_sync(
                        classify, request, abandon_on_cancel=True
                    )
                    result = await value if inspect.isawaitable(value) else value
        except Exception:
            log.warning("activation_classifier_failed", record_id=request.record_id)
            return _Failure(reason="classifier_error")
        return result

    def _classify_blocking(self, request: ActivationRequest) -> Any:
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                value = self.classifier.classify(request)
                box["result"] = anyio.run(_await, value) if inspect.isawaitable(value) else value
            except Exception:
                box["result"] = _Failure(reason="classifier_error")
            finally:
                done.set()

        threading.Thread(target=target, daemon=True, name="retold-activation-classify").start()
        if not done.wait(self.timeout_s):
            return _Failure(reason="timeout")
        if isinstance(box.get("result"), _Failure):
            log.warning("activation_classifier_failed", record_id=request.record_id)
        return box.get("result")

    def _apply(self, prepared: _Prepared, result: Any) -> ActivationOutcome:
        scope, record, ev = prepared.scope, prepared.record, prepared.evidence
        version = str(getattr(self.classifier, "policy_version", "unknown"))
        prompt = getattr(self.classifier, "prompt_version", None)
        prompt = None if prompt is None else str(prompt)
        proposal: ActivationProposal | None = None
        if isinstance(result, _Failure):
            decision: ActivationDecision = "review"
            reason: str = result.reason
        else:
            try:
                proposal = (
                    result
                    if isinstance(result, ActivationProposal)
                    else ActivationProposal.model_validate(result)
                )
            except ValidationError:
                proposal = None
            if proposal is None:
                decision, reason = "review", "malformed"
            elif proposal.confidence < self.min_confidence:
                decision = "review"
                reason = "low_confidence" + (f":{proposal.reason}" if proposal.reason else "")
            elif proposal.decision == "promote" and proposal.category not in self.categories:
                decision, reason = "conditional", "category_not_allowlisted"
            else:
                decision, reason = proposal.decision, proposal.reason or proposal.decision
        category = proposal.category if proposal is not None else None
        confidence = proposal.confidence if proposal is not None else None
        # The world may have moved while the classifier ran: re-check before promoting.
        if decision == "promote":
            fresh = self.store.get(scope, record.id)
            late = check_eligibility(self.store, scope, fresh) if fresh else ["record_missing"]
            if late:
                decision, reason = "conditional", f"became_ineligible:{late[0]}"
            else:
                record = fresh or record
        event = {
            "decision": decision,
            "proposed": proposal.decision if proposal else None,
            "reason": reason,
            "category": category,
            "attribute": record.attribute,
            "confidence": confidence,
            "policy_version": version,
            "prompt_version": prompt,
            "session_id": ev.ref.session_id,
            "turn_index": ev.ref.turn_index,
        }
        review_id: str | None = None
        if decision == "review":
            review_id, _ = self.queue._create(
                scope,
                record,
                evidence=ev.ref,
                proposed=proposal.decision if proposal else None,
                category=category,
                reason=reason,
                policy_version=version,
                prompt_version=prompt,
                confidence=confidence,
                decided_event=event,
                actor=self.actor,
            )
        else:
            self.store.append_event(
                scope, EV_DECIDED, actor=self.actor, record_id=record.id, data=event
            )
        target = Activation.AMBIENT if decision == "promote" else Activation.CONDITIONAL
        after = self._set(
            scope, record, target, {"decision": decision, "category": category, "reason": reason}
        )
        log.info(
            "activation_decided",
            record_id=record.id,
            decision=decision,
            reason=reason,
            category=category,
            attribute=record.attribute,
        )
        return ActivationOutcome(
            record_id=record.id,
            eligible=True,
            decision=decision,
            activation=after.activation,
            reason=reason,
            category=category,
            attribute=record.attribute,
            confidence=confidence,
            proposed=proposal.decision if proposal else None,
            evidence=ev.ref,
            review_id=review_id,
            policy_version=version,
            prompt_version=prompt,
        )

    def _apply_authority(self, scope: Principal, record_id: str) -> list[str]:
        """Resolve contradictions of ambient records by new ``record_id``; return survivors."""
        self.apply_withdrawals(scope, record_id)
        new = self._require(scope, record_id)
        now = self.store.clock()
        contested = [
            self._require(scope, rid) for rid in unresolved_conflicts(self.store, scope, new)
        ]
        superseded = self.store.query(
            "SELECT id FROM records WHERE tenant = ? AND principal = ? AND superseded_by = ? "
            "AND activation = 'ambient' ORDER BY id",
            [scope.tenant, scope.principal, new.id],
        )
        for row in superseded:
            old = self._require(scope, str(row["id"]))
            self._set(scope, old, Activation.CONDITIONAL, {"reason": f"superseded_by:{new.id}"})
        ambient = [r for r in contested if r.activation is Activation.AMBIENT and r.is_live(now)]
        if not ambient:
            return [new.id]
        new_is_direct = (
            new.is_live(now)
            and not [
                r for r in check_eligibility(self.store, scope, new) if r != "unresolved_conflict"
            ]
            and verify_evidence(self.store, scope, new) is not None
        )
        survivors = [new.id]
        for old in ambient:
            if not (new_is_direct and old.created_at <= new.created_at):
                survivors.append(old.id)
                continue
            self._supersede(scope, old.id, new.id, f"contradicted_by:{new.id}")
        return survivors
