"""Extraction: turning new transcript turns into typed records, off the hot path.

An :class:`Extractor` proposes records; :func:`extract_session` validates them and writes a
session's new records together with its progress mark in one transaction, so extraction is
idempotent (a uniqueness constraint on each record's idempotency key, not check-then-insert)
and crash-safe (a run killed midway wrote nothing, and the rerun starts from the same turns).
Extraction never sets ambient activation, and a new statement of a known attribute
supersedes the older record about it.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._activation_classifier import (
    PLEASE,
    bound_request,
    category_parts,
    instruction_clauses,
    one_off_request,
    opens_with_instruction,
    reply_categories,
    standing_instruction,
)
from ._activation_rules import (
    IF_IDIOM,
    ONLY_STANDS,
    SAME_AGAIN,
    SHARED_WITHDRAWAL,
    STATEMENT_LEAD_IN,
    STOP_DOING,
    SUBJECTLESS_WISH,
    allowed_again,
    asks,
    confirms_standing,
    refers_back,
    standing_request,
)
from ._erasure_fence import erased_since
from ._errors import InvalidInputError
from ._lexicon import (
    ACCESSIBILITY,
    CHOICE_GIVEN,
    CJK_CHAR,
    CJK_INSTRUCTION,
    CJK_LANGUAGES,
    CJK_SOMEONE,
    FOREIGN_ALWAYS,
    FOREIGN_IMPERATIVES,
    FOREIGN_NEEDS,
    FOREIGN_PREFER,
    FOREIGN_SOMEONE_OF_MINE,
    FOREIGN_STANDING,
    FUNCTION_WORDS,
    LANGUAGE,
    LANGUAGE_NAMES,
    LANGUAGE_PREPOSITION,
    LENGTH_LIMIT,
    MONTH_NAMES,
    NON_LATIN_LANGUAGES,
    RELATIONS,
    TURKISH_REPLY_VERB,
    WEEKDAY_NAMES,
    noun_singular,
)
from ._records import (
    SEMANTIC_KINDS,
    Activation,
    EpistemicState,
    EvidenceRef,
    Principal,
    Record,
    RecordDraft,
    RecordKind,
    Role,
    SourceType,
    TranscriptTurn,
    UtcDatetime,
    WriteOrigin,
)
from ._store import Store, WriteTx

__all__ = [
    "ExtractedRecord",
    "ExtractionResult",
    "Extractor",
    "OfflineExtractor",
    "extract_session",
    "is_principal_turn",
]

log = structlog.get_logger(__name__)

_MIGRATIONS = (
    """
    CREATE TABLE extraction_progress (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        extractor TEXT NOT NULL,
        next_turn_index INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (tenant, principal, session_id, extractor)
    );
    CREATE TABLE extraction_failures (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        extractor TEXT NOT NULL,
        first_turn_index INTEGER NOT NULL,
        last_turn_index INTEGER NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT NOT NULL,
        time TEXT NOT NULL
    );
    """,
    # One principal's failures (erasure, export) without a scan.
    """
    CREATE INDEX extraction_failures_scope ON extraction_failures (tenant, principal);
    """,
)


def is_principal_turn(turn: TranscriptTurn, user: str | None = None) -> bool:
    """Whether ``turn`` was written by the principal user themself.

    Only ``role == user`` turns count whose speaker is unset (the principal) or is the
    principal's own name ``user``; a user-role turn with another speaker is a third party
    typing in the same chat.
    """
    if turn.role is not Role.USER:
        return False
    return turn.speaker is None or turn.speaker == user


#: The longest text a proposed record may have (characters).
MAX_RECORD_TEXT = 4000


class ExtractedRecord(BaseModel):
    """One record an extractor proposes. Strict: unknown keys are malformed output.

    ``activation`` exists only so that a model asking for ambient activation is refused and
    audited rather than silently ignored.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: RecordKind
    text: str = Field(min_length=1, max_length=MAX_RECORD_TEXT)
    evidence_turns: tuple[int, ...] = Field(min_length=1)
    confidence: float = Field(ge=0.0, le=1.0)
    speaker: str | None = None
    attribute: str | None = Field(default=None, max_length=120)
    epistemic: EpistemicState = EpistemicState.ASSERTED
    event_time: UtcDatetime | None = None
    activation: Activation = Activation.CONDITIONAL


@runtime_checkable
class Extractor(Protocol):
    """Proposes typed records from transcript turns.

    ``extract`` (sync or async) receives the new turns of one session, oldest first, and the
    principal's display name; it returns records whose ``evidence_turns`` are turn indexes
    among those turns. It must not set ambient activation. ``name`` and ``version`` identify
    it in progress marks, idempotency keys and failures. An ``extract`` that also takes a
    ``people`` keyword receives the names the principal gave their people in the records
    already stored ("my partner Jonas" -> ``{"Jonas"}``), to read a later session's
    sentences about them.
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    def extract(
        self, turns: Sequence[TranscriptTurn], *, user: str | None
    ) -> Sequence[ExtractedRecord] | Awaitable[Sequence[ExtractedRecord]]: ...


@dataclass(frozen=True)
class ExtractionResult:
    """What one :func:`extract_session` run did."""

    session_id: str
    turns_seen: int
    written: tuple[str, ...] = ()
    superseded: tuple[str, ...] = ()
    failure: str | None = None
    detail: str = ""
    skipped_duplicates: int = 0
    records: tuple[Record, ...] = field(default=(), repr=False)


def _idempotency_key(extractor: str, session_id: str, item: ExtractedRecord) -> str:
    digest = hashlib.sha256(" ".join(item.text.lower().split()).encode()).hexdigest()[:20]
    return f"x:{extractor}:{session_id}:{min(item.evidence_turns)}:{digest}"


async def extract_session(
    store: Store,
    scope: Principal,
    session_id: str,
    extractor: Extractor,
    *,
    user: str | None = None,
    timeout_s: float = 60.0,
) -> ExtractionResult:
    """Extract records from the session's turns not yet processed by ``extractor``.

    Returns what was written. A timeout, an exception or malformed output writes no record,
    records the failure with its reason, and leaves the turns to be retried. When the
    principal is erased while the extractor runs, nothing is written (failure ``erased``):
    the turns it read are gone.
    """
    ident = f"{extractor.name}@{extractor.version}"
    started = store.clock()
    await anyio.to_thread.run_sync(store.ensure_schema, "extraction", _MIGRATIONS)
    start = await anyio.to_thread.run_sync(_progress, store, scope, session_id, ident)
    read = [
        t
        for t in await anyio.to_thread.run_sync(store.turns, scope, session_id)
        if t.turn_index >= start
    ]
    if not read:
        return ExtractionResult(session_id=session_id, turns_seen=0)
    first, last = read[0].turn_index, read[-1].turn_index
    # Turns whose words retention or an erasure removed hold nothing to extract: the
    # extractor (a model call, for some) never sees them, and progress moves past them.
    turns = [t for t in read if t.text]
    if not turns:
        return await anyio.to_thread.run_sync(
            _write, store, scope, session_id, ident, [], last + 1, 0, started
        )

    async def fail(reason: str, detail: str) -> ExtractionResult:
        await anyio.to_thread.run_sync(
            _record_failure, store, scope, session_id, ident, first, last, reason, detail, started
        )
        log.warning("extraction_failed", session_id=session_id, extractor=ident, reason=reason)
        return ExtractionResult(
            session_id=session_id, turns_seen=len(turns), failure=reason, detail=detail
        )

    context: dict[str, Any] = {}
    if "people" in inspect.signature(extractor.extract).parameters:
        context["people"] = await anyio.to_thread.run_sync(_people_of, store, scope)
    try:
        with anyio.fail_after(timeout_s):
            raw = await _call(extractor.extract, turns, user=user, **context)
    except TimeoutError:
        return await fail("timeout", f"no answer within {timeout_s}s")
    except Exception as exc:
        return await fail("exception", f"{type(exc).__name__}: {exc}"[:500])
    try:
        items = [ExtractedRecord.model_validate(item) for item in raw]
    except (ValidationError, TypeError) as exc:
        return await fail("malformed", str(exc)[:500])
    by_index = {t.turn_index: t for t in turns}
    for item in items:
        missing = [i for i in item.evidence_turns if i not in by_index]
        if missing:
            return await fail("malformed", f"evidence_turns {missing} are not among the new turns")
    drafts = [_draft(item, session_id, by_index, ident) for item in items]
    try:
        await anyio.to_thread.run_sync(
            lambda: store.refuse_untrusted_ambient(
                scope, drafts, origin=WriteOrigin.EXTRACTION, actor=ident
            )
        )
    except InvalidInputError as exc:
        return await fail("ambient_refused", str(exc))
    return await anyio.to_thread.run_sync(
        _write, store, scope, session_id, ident, drafts, last + 1, len(turns), started
    )


# How many of the principal's newest records are read for the names of their people.
_PEOPLE_LIMIT = 1000


def _people_of(store: Store, scope: Principal) -> frozenset[str]:
    """The names the principal gave their people in their newest live records ("my partner
    Jonas", "our neighbour Mrs. Li")."""
    return frozenset(
        m.group("name")
        for record in store.list_records(scope, limit=_PEOPLE_LIMIT)
        for m in _PERSON_OF_MINE.finditer(record.text)
        if m.group("name")
    )


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)
    if inspect.isawaitable(result):
        return await result
    return result


def _draft(
    item: ExtractedRecord, session_id: str, turns: dict[int, TranscriptTurn], ident: str
) -> RecordDraft:
    first = turns[min(item.evidence_turns)]
    return RecordDraft(
        kind=item.kind,
        text=item.text,
        activation=item.activation,
        epistemic=item.epistemic,
        confidence=item.confidence,
        source_type=SourceType.USER_STATED if first.role is Role.USER else SourceType.INFERRED,
        speaker=item.speaker,
        event_time=item.event_time or first.time,
        evidence=tuple(
            EvidenceRef(session_id=session_id, turn_index=i)
            for i in sorted(set(item.evidence_turns))
        ),
        attribute=item.attribute,
        session_id=session_id,
        idempotency_key=_idempotency_key(ident, session_id, item),
    )


def _progress(store: Store, scope: Principal, session_id: str, ident: str) -> int:
    rows = store.query(
        "SELECT next_turn_index FROM extraction_progress "
        "WHERE tenant = ? AND principal = ? AND session_id = ? AND extractor = ?",
        [scope.tenant, scope.principal, session_id, ident],
    )
    return int(rows[0]["next_turn_index"]) if rows else 0


def _record_failure(
    store: Store,
    scope: Principal,
    session_id: str,
    ident: str,
    first: int,
    last: int,
    reason: str,
    detail: str,
    started: datetime,
) -> None:
    with store.write() as w:
        if erased_since(store, w, scope, started):
            return  # the turns are gone with the principal: nothing to retry
        w.insert(
            "extraction_failures",
            {
                "tenant": scope.tenant,
                "principal": scope.principal,
                "session_id": session_id,
                "extractor": ident,
                "first_turn_index": first,
                "last_turn_index": last,
                "reason": reason,
                "detail": detail,
                "time": w.now.isoformat(),
            },
        )
        w.event(
            scope,
            "extraction.failed",
            actor=ident,
            data={"session_id": session_id, "reason": reason},
        )


def _write(
    store: Store,
    scope: Principal,
    session_id: str,
    ident: str,
    drafts: list[RecordDraft],
    next_index: int,
    turns_seen: int,
    started: datetime,
) -> ExtractionResult:
    written: list[Record] = []
    superseded: list[str] = []
    duplicates = 0
    with store.write() as w:
        if erased_since(store, w, scope, started):
            log.info("extraction_after_erasure_dropped", session_id=session_id, extractor=ident)
            return ExtractionResult(
                session_id=session_id,
                turns_seen=turns_seen,
                failure="erased",
                detail="the principal was erased while the extractor ran",
            )
        for draft in drafts:
            existing = w.query(
                "SELECT id FROM records WHERE tenant = ? AND principal = ? AND idempotency_key = ?",
                [scope.tenant, scope.principal, draft.idempotency_key],
            )
            if existing:
                duplicates += 1
                continue
            target = _attribute_holder(w, scope, draft)
            if target is not None:
                draft = draft.model_copy(update={"supersedes": target})
                superseded.append(target)
            written.append(
                store.insert_record(w, scope, draft, origin=WriteOrigin.EXTRACTION, actor=ident)
            )
        w.step("extraction_records_written")
        w.execute(
            "INSERT INTO extraction_progress "
            "(tenant, principal, session_id, extractor, next_turn_index, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, principal, session_id, extractor) "
            "DO UPDATE SET next_turn_index = excluded.next_turn_index, updated_at = excluded.updated_at",
            [scope.tenant, scope.principal, session_id, ident, next_index, w.now.isoformat()],
        )
    log.info("extraction_written", session_id=session_id, extractor=ident, count=len(written))
    return ExtractionResult(
        session_id=session_id,
        turns_seen=turns_seen,
        written=tuple(r.id for r in written),
        superseded=tuple(superseded),
        skipped_duplicates=duplicates,
        records=tuple(written),
    )


def _attribute_holder(w: WriteTx, scope: Principal, draft: RecordDraft) -> str | None:
    """The live record this draft's attribute replaces (the newest one), if any: the same
    attribute, else an allergy the draft corrects ("allergic to sesame, not shellfish")."""
    if not draft.attribute or draft.kind not in SEMANTIC_KINDS:
        return None
    for attribute in (draft.attribute, *_corrected(draft.attribute, draft.text)):
        rows = w.query(
            "SELECT id FROM records WHERE tenant = ? AND principal = ? AND attribute = ? "
            "AND lifecycle = 'active' AND superseded_by IS NULL "
            "ORDER BY created_at DESC, id DESC LIMIT 1",
            [scope.tenant, scope.principal, attribute],
        )
        if rows:
            return str(rows[0]["id"])
    return None


# -- the deterministic offline extractor ---------------------------------------------------

# Latin sentence ends before a space; the CJK full stop, marks and the Devanagari danda
# need none.
_SENTENCE_END = re.compile(r"[.!?؟]+(?=\s|$)|[。！？।]+|\n+")
_ABBREVIATIONS = frozenset(
    {"dr", "mr", "mrs", "ms", "st", "prof", "jr", "sr", "vs", "etc", "e.g", "i.e", "approx", "no"}
)


def _sentences(text: str) -> list[str]:
    """Split on sentence ends, not after common abbreviations ("Dr. Ana", "e.g. this")."""
    out: list[str] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        words = text[start : m.start()].split()
        if m.group().startswith(".") and words and words[-1].lower().rstrip(".") in _ABBREVIATIONS:
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


_FIRST_PERSON = re.compile(
    r"\b(i|i'm|i've|i'd|i'll|im|ive|my|me|mine|we|we're|we've|our|us)\b", re.I
)
# A principal's own chat turn often drops its subject ("booked the flight", "got the job",
# "Rita moved the review to Friday"): a sentence with a digit, a capitalised word after the
# first, or a past-tense verb is a statement the user made even without "I" or "my".
_STATEMENT = re.compile(
    r"\d|\s[A-Z][a-z]|\b[a-z]{3,}ed\b|\b(got|bought|went|left|took|made|gave|sent|"
    r"had|met|paid|sold|won|lost|found|began|started|moved|quit|joined|switched)\b"
)
_QUESTION_START = re.compile(
    r"^\s*(what|when|where|who|whom|which|why|how|can|could|would|should|do|does|did|is|are|am|will|shall)\b",
    re.I,
)
# "Which is why I want you to ...", "What I'd like is ...": a relative or cleft opener, not
# a question.
_NOT_A_QUESTION = re.compile(
    r"^\W*(?:which|that)(?:'s| is| was) (?:why|how|the reason)\b|"
    rf"{SUBJECTLESS_WISH}|"
    # "Do that every time, examples are the best": the same again asked for, and what it is
    # said in a clause after it (not "Do you ...?"; alone, it is kept only with the sentence
    # before it, which says what "that" is)
    rf"^\W*(?:{SAME_AGAIN})\b[^?,]*,[^?]*[^\W\d_][^?]*$|"
    r"^\W*what (?:i|we)(?:'d| would)? (?:really )?(?:want|need|like|prefer|mean|meant|said)\b"
    r"(?![^?]*\?\s*$)",
    re.I,
)
# "When you list steps, number them" / "When I was a kid, I lived in Lima": a sentence that
# opens with a subordinate clause ended by a comma and goes on is a statement or an
# instruction, not a question, even though its first word is a question word.
_SUBORDINATE_OPENER = re.compile(r"^\s*(?:when|whenever|where|while|if)\b[^,;?]*,\s*\w", re.I)
_HYPOTHETICAL = re.compile(
    r"\b(if i|if we|i would|i'd (?:probably|maybe)|suppose|imagine|hypothetically|might)\b", re.I
)

# A statement, then a question about it after a comma: "My passport expires in August, is
# that a problem?", "I'm lactose intolerant, what cheeses can I eat?". The question opens
# with an auxiliary or a question word.
_THEN_A_QUESTION = re.compile(
    r",\s+(?=(?:is|are|was|were|do|does|did|can|could|should|would|will|shall|any|what|"
    r"what's|which|who|whom|whose|how|where|when|why)\b[^,]*\?\s*$)",
    re.I,
)
# ... but not when what comes before the comma only leads into the question ("I was
# wondering, ...", "I'm confused, ...", "I have a quick question, ...", "Me again, ...").
_LEADS_IN = re.compile(
    r"^\W*(?:(?:ok|okay|so|also|and|hi|hey|sorry|honestly|btw|by the way),?\s+)*"
    r"(?:i(?:'m| am| was)? (?:just |really |a bit |still )?(?:wondering|curious|confused|"
    r"not sure|unsure|lost|stuck|thinking)|i have (?:a|another|one more)(?: quick| small| short)? "
    r"question|(?:one more|another|quick|a quick) question|i need (?:some )?(?:help|advice)|"
    r"me again|just curious|quick one|"
    # an apology or a remark on the exchange itself: "My mistake, ...", "I'm sorry, ...",
    # "My question is, ...", "I don't understand, ..."
    r"my (?:mistake|bad|apologies|question|point|guess)|(?:i'm |i am )?sorry|i apologi[sz]e|"
    r"i (?:still )?(?:don't|do not) (?:understand|get (?:it|this|that)|follow))\b[^,]*$",
    re.I,
)


def _stated_before_question(sentence: str) -> str | None:
    """The statement a question sentence opens with ("My flight lands at 6am" of "My flight
    lands at 6am, can you suggest a breakfast place?"), when it is one about the principal
    (not a lead-in, a subordinate clause such as "If I leave at 5" or a hypothetical); else
    None."""
    if not asks(sentence):
        return None
    parts = _THEN_A_QUESTION.split(sentence, maxsplit=1)
    if len(parts) != 2:
        return None
    stated = parts[0].strip()
    if (
        _too_short(stated)
        or not _FIRST_PERSON.search(stated)
        or _QUESTION_START.match(stated)
        # (the clause it would open if the question went on: "If I leave at 5, ...")
        or _SUBORDINATE_OPENER.match(f"{stated}, x")
        or _LEADS_IN.match(stated)
        or _HYPOTHETICAL.search(stated)
    ):
        return None
    return f"{stated}."


# Hypothetical whatever the rest of the sentence says.
_HYPOTHETICAL_ALWAYS = re.compile(
    r"\b(i would|i'd (?:probably|maybe)|suppose|imagine|hypothetically|might)\b", re.I
)
# A conditional clause: "if I/we ..." up to the next comma, semicolon or dash (or the end).
_IF_CLAUSE = re.compile(r"\bif (?:i|we)\b[^,;:\u2014]*", re.I)
# A main clause that reports something done ("negotiated the rent down ..., did it"): a
# past-tense verb and no modal that would make it about what might happen.
_PAST_ACTION = re.compile(
    r"\b(?:[a-z]{3,}ed|did|got|bought|went|left|took|made|gave|sent|had|met|paid|sold|won|"
    r"lost|found|began|signed|agreed|told|said|ran|came|kept|held|chose|wrote|spoke|sat)\b",
    re.I,
)
_MODAL = re.compile(
    r"\b(?:would|could|should|will|shall|might|may|can|i'd|we'd|i'll|we'll|wo?n't|'d|'ll|"
    r"gonna|going to|want to|wanna|plan to|hope to)\b|'d\b|'ll\b",
    re.I,
)


def _is_hypothetical(sentence: str) -> bool:
    """Conditional or speculative, unless the main clause reports a completed action.

    "If I get the job I'd move" and "if we win, we will celebrate" are hypothetical; in
    "negotiated the rent down to 1,780 if I sign for two years, did it" the condition only
    qualifies an action the user already took, so the sentence is asserted.
    """
    # Idiomatic qualifiers ("if needed", "details only if I ask") condition nothing.
    sentence = IF_IDIOM.sub(" ", sentence.casefold())
    if _HYPOTHETICAL_ALWAYS.search(sentence):
        return True
    if not _HYPOTHETICAL.search(sentence):
        return False
    main = _IF_CLAUSE.sub(" ", sentence)
    return not (_PAST_ACTION.search(main) and not _MODAL.search(main))


# Interjections that say nothing about the user ("thanks!", "wow!", "ugh.").
_INTERJECTION = re.compile(
    r"^\W*(?:hi|hey|hello|thanks|thank you|thx|ty|ok|okay|yes|yeah|yep|no|nope|nah|wow|yay|"
    r"ugh|oops|sorry|lol|haha|hmm|oh|ah|cool|great|nice|sure|well|so|bye)\W*$",
    re.I,
)


# Chinese, Japanese and Korean write a whole sentence in a few characters.
_CJK = re.compile(CJK_CHAR)


def _too_short(sentence: str) -> bool:
    """Too short to stand alone as a record ("done.", "booked!"): under 8 characters, unless
    written in a CJK script."""
    return len(sentence) < 8 and not _CJK.search(sentence)


# A sentence that only endorses the one before it: "Answer first, explain after. That's how I
# like it." (the preference is the sentence before, which says what "that" is), or only
# says that it stands.
_ENDORSES_PREVIOUS = re.compile(
    r"^\W*(?:that's|that is|this is|it's|it is) (?:how|what|the way) i (?:like|prefer|want|need)"
    r"(?: it| them| things| my (?:answers|replies|responses))?\W*$|"
    # or says it is how the principal's mind works: "that's how my brain works"
    r"^\W*(?:that's|that is|it's|it is) (?:how|the way) (?:i|my brain|my mind|my head) "
    r"(?:works?|thinks?|learns?|reads?|process(?:es)?)\W*$|"
    r"^\W*i (?:like|prefer|want|need) (?:it|them|things) that way\W*$|"
    r"^\W*that(?:'s| is)? (?:what )?(?:works|helps) (?:best )?for me\W*$|"
    # or asks for the same again, for good: "I loved how short that was. Do that every
    # time." (what "that" is, is the sentence before)
    rf"^\W*(?:(?:please|so|and|just)\s+)*(?:always\s+)?(?:{SAME_AGAIN})(?:,? (?:every time|"
    r"each time|always|from now on|going forward|in future|please))+\W*$|"
    # or only says that it stands: "Short answers. Always."
    rf"{ONLY_STANDS.pattern}",
    re.I,
)


def _joined_fragments(sentences: list[str]) -> list[str]:
    """A fragment too short to stand alone ("booked!", "done.") is kept with the sentence
    after it: "booked! SK983 Copenhagen to Tokyo" says what the code is about. Questions and
    interjections ("thanks!", "wow!") stay on their own. A sentence that only endorses the
    one before ("That's how I like it.") is kept with that one."""
    out: list[str] = []
    pending = ""
    for sentence in sentences:
        if (
            out
            and not pending
            and not _INTERJECTION.match(out[-1])
            and _ENDORSES_PREVIOUS.match(sentence)
        ):
            out[-1] = f"{out[-1]} {sentence}"
            continue
        if pending:
            sentence = f"{pending} {sentence}"
            pending = ""
        if (
            _too_short(sentence)
            and not sentence.endswith("?")
            and not _INTERJECTION.match(sentence)
        ):
            pending = sentence
            continue
        out.append(sentence)
    if pending:
        out.append(pending)
    return out


# A rule or constraint the user reports without "I" or "my" ("landlord's rule: absolutely
# no drilling into the walls", "no pets allowed", "smoking is not permitted").
_RULE = re.compile(
    r"\b(?:[a-z]+'s? (?:rules?|policy|policies)|house rules?|rules? (?:is|are|says?)|"
    r"(?:absolutely|strictly|definitely) no|no [a-z]+(?: [a-z]+)? (?:allowed|permitted)|"
    r"(?:is|are) not (?:allowed|permitted)|(?:isn't|aren't) (?:allowed|permitted)|"
    r"(?:forbidden|prohibited|banned))\b|^\W*rules?\s*:",
    re.I,
)
_PREFERENCE = re.compile(
    r"\b(always|never|from now on|please (?:answer|reply|respond|write|use|keep|avoid)|"
    r"i (?:actually |really |generally |much |do |always )?(?:prefer|like|love|hate|dislike)|"
    r"i'd prefer|^\W*prefer|i can't stand|don't (?:use|give|send)|"
    rf"{SUBJECTLESS_WISH}|"
    r"i(?:'d| would)? (?:really )?(?:like|want|need) you to|i'd rather you|"
    r"answer me|reply (?:to me )?in|respond in)\b",
    re.I,
)
_DECISION = re.compile(
    r"\b(decided|we'll go with|i'll go with|going with|we chose|i chose|settled on|picked)\b", re.I
)
_EVENT = re.compile(
    r"\b(yesterday|last (?:week|month|year|night|weekend)|ago|went|moved|started|finished|"
    r"visited|bought|got married|had|met|was born|graduated|adopted|traveled|travelled|"
    rf"on (?:{WEEKDAY_NAMES}))\b",
    re.I,
)
_TASK = re.compile(
    r"\b(i need to|i have to|i'm working on|we're working on|todo|deadline|due)\b", re.I
)
_RELATION_WORDS = (
    "wife|husband|partner|boyfriend|girlfriend|son|daughter|kid|kids|mom|mother|dad|father|"
    "sister|brother|friend|boss|manager|colleague|coworker|dog|cat|landlord|dentist|doctor|therapist"
)
_RELATION = re.compile(rf"\bmy ({_RELATION_WORDS})\b", re.I)
# Asking for a response language, in the languages the offline rules read: "reply in Hindi",
# "respóndeme en español", "fala comigo em português", "réponds-moi en français", "antworte
# mir auf Deutsch", "Hindi mein jawab do".
_LANGUAGE_REQUEST = re.compile(
    rf"\b(?:{LANGUAGE_PREPOSITION})\s+(?:{LANGUAGE})\b|"
    # the language before the verb: "Hindi mein jawab do", "Türkçe cevap ver"
    rf"\b(?:{LANGUAGE_NAMES})\s+(?:only|mein|me|{TURKISH_REPLY_VERB})\b|"
    # a change of language: "switch to Spanish", "go back to English"
    rf"\b(?:switch(?:ing)?|go(?:ing)?|chang(?:e|ing)|mov(?:e|ing))(?:\s+back)?\s+to\s+"
    rf"(?:{LANGUAGE_NAMES})\b|"
    # in Arabic, Russian, Ukrainian, Hindi, Chinese, Japanese and Korean: "по-русски",
    # "हिंदी में", "用中文"
    rf"(?<!\w)(?:{NON_LATIN_LANGUAGES})(?!\w)|{CJK_LANGUAGES}",
    re.I,
)
# An instruction to the assistant with no "I" in it ("please always keep sentences short",
# "from now on please reply in plain text").
_INSTRUCTION = re.compile(
    r"^\W*(?:(?:actually|also|ok|okay|so|and|but|oh|well|hey|btw|general rule(?: for you)?),?:?\s+)*"
    r"(?:from now on,?\s+)?(?:please|always|never|don't|do not|kindly)\b|"
    r"\b(?:from now on|going forward|by default|as a rule|general rule)\b",
    re.I,
)
# A sentence about the assistant's replies ("zero emojis in your replies, thanks", "your
# answers are way too long"): what the user says of them is a preference, even with no "I".
_ABOUT_REPLIES = re.compile(
    r"\byour (?:answers?|repl(?:y|ies)|responses?|messages?|explanations?|tone)\b|"
    r"\b(?:to|in|for) (?:all|any|every|each|long(?:er)?|short(?:er)?) (?:answers?|repl(?:y|ies)|"
    r"responses?)\b",
    re.I,
)
# Taking back an earlier preference ("never mind the bullet points", "let's drop the Hindi
# thing", "no longer", "stop replying in ...") in the languages the offline rules read.
_WITHDRAWAL = re.compile(
    r"\b(?:never ?mind|forget (?:about |that|it|what i said|the|my|those|this)|"
    r"(?:scratch|scrap) (?:that|the|what|my|those|this)|drop (?:the|that|my|those|this)|"
    r"cancel (?:that|the|my|those|this)|undo (?:that|the|my)|"
    r"disregard (?:that|what i said|the|my)|no longer|not any ?more|changed my mind|"
    rf"{STOP_DOING})\b|{SHARED_WITHDRAWAL}",
    re.I,
)
# "moved to" a place, not to a time, a slot or a thing ("we moved to Tuesday evenings",
# "I moved to the night shift", "we moved to a new office"): a capitalised name after "the"
# is a place ("we moved to the Netherlands").
_TO_A_PLACE = (
    r"(?! (?:the (?-i:[a-z])|(?:a|an|my|our|his|her|their|this|that|another|next|last|"
    rf"later|earlier|tomorrow|{WEEKDAY_NAMES}|{MONTH_NAMES}|\d)\b))"
)
_ATTRIBUTES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            rf"\b(i live in|i'm living in|we live in|(?:i|we) moved to{_TO_A_PLACE})\b", re.I
        ),
        "residence",
    ),
    # Before occupation: "I'm a vegetarian" states a diet.
    (re.compile(r"\b(allergic|allerg(?:y|ies))\b", re.I), "allergy"),
    (re.compile(r"\b(vegan|vegetarian|pescatarian|gluten|keto|halal|kosher)\b", re.I), "diet"),
    (
        # only when what follows names a workplace or a role (see _names_a_role)
        re.compile(
            r"\b(i (?:now |still |currently )?work (?:at|for|as)|"
            r"i'm (?:now |still |currently )?working (?:at|for|as)|"
            r"(?:i've |i have |i )?(?:just )?started working (?:at|for|as)|"
            r"(?:started|starting|got|took|accepted|landed|found|have) (?:a |my |the )?new job "
            r"(?:at|as|with|in)|(?:i got|i was|i've been|i have been|got) hired (?:at|by|as)|"
            r"my (?:new )?job (?:is (?:as )?an?|at|as)|i'm an?|i am an?)\b",
            re.I,
        ),
        "occupation",
    ),
    (re.compile(r"\bmy budget\b|\bbudget (?:is|of)\b", re.I), "budget"),
    # Before the answer-style slugs: "I use a screen reader, so no tables" states the need.
    (
        re.compile(
            rf"\b(screen reader|blind|dyslexi\w*|colou?r[ -]?blind|large text|hard of hearing|"
            rf"{FOREIGN_NEEDS})\b",
            re.I,
        ),
        "accessibility",
    ),
    (
        re.compile(
            r"\b(concise|concisely|brief|briefly|succinct|terse|verbose|"
            r"(?:short|shorter|long|longer|detailed) (?:answers|replies|responses)|more detail|"
            r"keep (?:it|them|things|your (?:answers|replies|responses)) (?:short|brief)|"
            rf"{LENGTH_LIMIT})\b",
            re.I,
        ),
        "answer_style.length",
    ),
    (
        re.compile(
            r"\b(bullet points|bullets|bulleted|numbered lists?|tables?|markdown|"
            r"headings|headers)\b",
            re.I,
        ),
        "answer_style.format",
    ),
    (
        # how many options a reply offers: "your single best pick", "a few options"
        re.compile(
            rf"\b({CHOICE_GIVEN}|(?:a few|several|multiple|more|lots of|many|some|two or three|two|three|"
            r"four|five|\d+) (?:options|alternatives|choices|suggestions|recommendations)|"
            r"options to choose from)\b",
            re.I,
        ),
        "answer_style.choices",
    ),
    (
        # what a reply says when the assistant is unsure: "say so instead of guessing"
        re.compile(
            r"\b(you(?:'re| are) (?:not sure|unsure|uncertain)|you (?:don't|do not) know|"
            r"(?:your )?best guess|instead of guessing|rather than guessing|"
            r"(?:don't|do not|never) guess|mak(?:e|ing) (?:something|things|stuff|it) up)\b",
            re.I,
        ),
        "answer_style.certainty",
    ),
    (
        # "reply in plain text" or "write in bullet points" names a format, not a language
        re.compile(
            r"\b(reply|answer|respond|write)(?: to me)? in (?!(?:plain|full|short|simple|"
            r"bullet|markdown|prose|detail|depth|a|an|the|one|two|few|points?|lists?|"
            r"steps?|words|sentences|paragraphs|order|general|case|future|public|private|"
            r"person|writing)\b)(?:[a-z]+)\b",
            re.I,
        ),
        "response_language",
    ),
    (_LANGUAGE_REQUEST, "response_language"),
)
# Attributes that describe the principal's current state: a new statement replaces the old.
_STATE_KINDS = {
    "residence": RecordKind.FACT,
    "occupation": RecordKind.FACT,
    "allergy": RecordKind.FACT,
    "diet": RecordKind.FACT,
    "budget": RecordKind.FACT,
    "answer_style.length": RecordKind.PREFERENCE,
    "answer_style.format": RecordKind.PREFERENCE,
    "answer_style.choices": RecordKind.PREFERENCE,
    "answer_style.certainty": RecordKind.PREFERENCE,
    "response_language": RecordKind.PREFERENCE,
    "accessibility": RecordKind.PREFERENCE,
}
# The same kind of instruction in the other languages the offline rules read (see
# ``_lexicon``): imperatives, "always", "from now on" and "please".
_FOREIGN_INSTRUCTION = re.compile(
    rf"(?<!\w)(?:{FOREIGN_IMPERATIVES}|{FOREIGN_STANDING}|{FOREIGN_ALWAYS}|{FOREIGN_PREFER})(?!\w)|"
    rf"{CJK_INSTRUCTION}",
    re.I,
)
# "My favourite band is Radiohead", "my birthday is March 3": what the noun is, now. Not
# what it is doing or where ("my car is making a noise", "... is in the shop"), not what it
# was, and not a person, whose statements describe many things ("my sister is a nurse",
# later "my sister is coming to visit"): those key nothing a later one could replace.
_MY_NOUN = re.compile(
    r"\bmy ([a-z]+(?: [a-z]+)?)(?:'s name)? (?:is|are)\b"
    r"(?! (?:not |still |also |always |now |just )?[a-z]+ing\b)"
    r"(?! (?:in|at|on|under|with|from|by|so|too|very|really|pretty|quite|a bit|kind of|"
    r"not|still|also|always|just|getting|going)\b)",
    re.I,
)
# A person or a pet, as "my X is" names them (a relation, with a word before it or not).
_PERSON_NOUN = re.compile(rf"(?:[a-z]+ )?(?:{RELATIONS}|{_RELATION_WORDS})", re.I)
_STOP_NOUNS = {"name", "question", "point", "guess", "bad", "god", "goodness", "pleasure"}


# Slugs a sentence gets only when it states a preference: "short answers leave me with more
# questions" is not an answer-style preference, and "I teach in French" is no language one.
_PREFERENCE_ONLY = {
    "answer_style.length",
    "answer_style.format",
    "answer_style.choices",
    "answer_style.certainty",
}


# Who a clause is about, read from its grammatical subject: "my wife ...", "my son's ...",
# or a name opening the sentence ("Tom is allergic to ..."). Pronouns and possessives only:
# no topical vocabulary.
_OTHER_SUBJECT = re.compile(
    r"\b[Mm]y ([a-z]+)(?:'s)?\b(?!.*\b(?i:i|i'm|i've|i'll|i'd|we|we're|we've)\b)"
    r"|^\W*([A-Z][a-z]+)(?:'s)?\s+(?:is|was|has|had|works?|lives?|moved|got|can't|cannot|"
    r"doesn't|does|hates?|loves?|likes?|wants?|needs?|started|quit|left)\b",
)
# The same in the other languages the rules read: "mi hermano ...", "mój brat ...".
_FOREIGN_SUBJECT = re.compile(FOREIGN_SOMEONE_OF_MINE, re.I)
# A thing at hand pointed at: "those bullet points", "the tables in this report".
_POINTS_AT = re.compile(r"\b(?:this|that|these|those)\b", re.I)
# ... and in Chinese, Japanese and Korean ("我妈妈", "母は", "엄마는"), without its particle.
_CJK_SUBJECT = re.compile(CJK_SOMEONE)
_CJK_PARTICLE = re.compile("(?:は|が|는|은|가|이)$")
_SELF_SUBJECT = re.compile(r"\b(?:i|i'm|i've|i'll|i'd|we|we're|we've)\b", re.I)
# What may open a sentence before its subject: "And she ...", "Also, Jonas ...", "Update: ...".
_LEAD_IN = r"(?:(?i:and|but|also|oh|so|btw|plus|update:?),?\s+)?"
# One of the principal's people, named: "my sister", "my daughter Mila", "our neighbour Mrs.
# Li", "my wife's sister", or opening the sentence, "Karim's mum" (not "my brother's
# girlfriend" alone, whose subject is the girlfriend).
_PERSON_OF_MINE = re.compile(
    r"(?:\b(?:my|our) (?:(?:best|older|younger|little|big|eldest|oldest|youngest|twin|new) )?"
    rf"(?:{RELATIONS}'s )?|^\W*{_LEAD_IN}"
    r"(?-i:[A-Z][^\W\d_]+)'s )"
    rf"{RELATIONS}\b(?!'s)(?: (?:(?-i:Mr|Mrs|Ms|Dr)\.? )?(?P<name>(?-i:[A-Z][^\W\d_]+))\b(?!'s))?",
    re.I,
)
# A sentence that opens with a name: "Jonas is a carpenter.", "And Mila's party is Sunday."
_OPENS_WITH_NAME = re.compile(rf"^\W*{_LEAD_IN}([A-Z][^\W\d_]+)\b")
# A sentence whose subject is a third person: "She's a nurse.", "And he can't leave.", "Her
# hearing is bad." (Not the "they" of hearsay: "They say it will snow.")
_THIRD_PERSON = re.compile(
    rf"^\W*{_LEAD_IN}(she|he|they(?! (?:say|says|said|reckon|claim|claimed|report|reported)\b)|"
    r"her|his|their)\b",
    re.I,
)
# Relations that name a woman or a man: "she" is not "my brother", "he" not "my sister".
_WOMAN = re.compile(
    r"\b(?:mum|mom|mother|sisters?|wife|girlfriend|fianc[ée]e|daughters?|aunt|nieces?|"
    r"grand(?:ma|mother|daughter))$",
    re.I,
)
_MAN = re.compile(
    r"\b(?:dad|father|brothers?|husband|boyfriend|fianc[ée]|sons?|uncle|nephews?|"
    r"grand(?:pa|father|son))$",
    re.I,
)
_NAMED = re.compile(r" (?:(?:Mr|Mrs|Ms|Dr)\.? )?[A-Z][^\W\d_]+$")


def _agrees(pronoun: str, person: str) -> bool:
    """Whether ``pronoun`` can stand for ``person`` ("my daughter Mila"): "she" and "her" not
    for a man's relation, "he" and "his" not for a woman's; "they" for anyone."""
    relation = _NAMED.sub("", person)
    pronoun = pronoun.lower()
    if pronoun in {"she", "her"}:
        return not _MAN.search(relation)
    if pronoun in {"he", "his"}:
        return not _WOMAN.search(relation)
    return True


def _subject(clause: str, noun_cue: bool = False) -> str | None:
    """Whom ``clause`` (the words before an attribute's cue) is about: None for the principal
    themself, else the relation or name that is its subject ("wife", "tom", "hermano").
    Before a ``noun_cue`` ("allergy", "budget"), "my X" right before it is the noun's
    modifier, not a subject."""
    m = _OTHER_SUBJECT.search(clause)
    if m is None:
        foreign = _FOREIGN_SUBJECT.search(clause)
        if foreign is not None:
            return foreign.group(1).casefold()
        cjk = _CJK_SUBJECT.search(clause)
        return _CJK_PARTICLE.sub("", cjk.group(0)) if cjk else None
    if m.group(2) is None and _SELF_SUBJECT.search(clause[: m.start()]):
        return None  # "I told my boss ..." is still about the principal
    if noun_cue and m.group(1) is not None and not m.group(0).endswith("'s"):
        if not clause[m.end() :].strip():
            return None  # a word of the cue's noun phrase: "my peanut allergy", "my monthly budget"
    return (m.group(1) or m.group(2)).lower()


# Slugs whose statements add up rather than replace each other: a second access need
# ("dyslexic", later "hard of hearing"), a second format ("numbered lists", later "no
# tables"), a second allergy, diet or budget ("also allergic to shellfish", "gluten
# intolerant" beside "vegetarian", "my budget for groceries" beside the trip's) does not
# undo the first. Their key names the item too (``accessibility/dyslexia``,
# ``allergy/peanut``, ``budget/trip``), so only a statement of the same item supersedes; an
# allergy, diet or budget that names no item keys the slug alone.
_ITEMISED = {"accessibility", "answer_style.format", "allergy", "diet", "budget"}
# The slugs of how the principal is answered (a subject-less attribute is the principal's).
_REPLY_SLUGS = {
    "answer_style.length",
    "answer_style.format",
    "answer_style.choices",
    "answer_style.certainty",
    "response_language",
}
# Words that name one item: bullets and numbered lists are two styles of the same list.
_ITEM_OF = {"bullet": "lists", "numbered": "lists", "table": "tables", "header": "headings"}


# Diets that differ in how much of animal products one eats are one item: "I've gone vegan"
# replaces "I'm vegetarian"; gluten, keto, halal and kosher are items of their own.
_DIET_ITEM = {"vegan": "meat", "vegetarian": "meat", "pescatarian": "meat"}
# What an allergy is to: "allergic to peanuts", "an allergy to dust", "a peanut allergy".
_ALLERGEN = (
    re.compile(r"\ballerg(?:ic|y|ies) to (?:the |all |any |most )?([^\W\d_]+)", re.I),
    re.compile(r"\b([^\W\d_]+)[ -]allerg(?:y|ies)\b", re.I),
)
# What a budget is for: "my budget for the trip", "our wedding budget".
_BUDGET_PURPOSE = (
    re.compile(
        r"\bbudget for (?:the |my |our |a |an |this |that |his |her |their )?([^\W\d_]+)", re.I
    ),
    re.compile(r"\b([^\W\d_]+) budget\b", re.I),
)
# The slugs whose item is read from the sentence (what an allergy is to, what a budget is
# for), not from the cue: their cue is a noun, and "my X" right before it modifies it.
_ITEM_IN_SENTENCE = {"allergy": _ALLERGEN, "budget": _BUDGET_PURPOSE}
# Words before "allergy" or "budget" that say how much or how often, not of what.
_NO_ITEM = frozenset(
    "severe mild bad serious slight minor major terrible awful real new old weird strange nasty "
    "food monthly weekly daily yearly annual total overall whole entire current max maximum".split()
)
# A correction that names the item it replaces: "I'm allergic to sesame, not shellfish".
_CORRECTED = re.compile(r"\b(?:not|no longer)\s+(?:allergic to\s+)?(?:the\s+)?([^\W\d_]+)", re.I)


def _corrected(attribute: str, text: str) -> list[str]:
    """The itemised allergy keys ``text`` says are wrong ("..., not shellfish"), under the
    same subject as ``attribute``."""
    key, _, item = attribute.partition("/")
    if _slug(key) != "allergy" or not item:
        return []
    found = (noun_singular(m.group(1).lower()) for m in _CORRECTED.finditer(text))
    return [f"{key}/{word}" for word in found if word != item and word not in FUNCTION_WORDS]


def _named_item(patterns: Sequence[re.Pattern[str]], text: str) -> str | None:
    """The first item the ``patterns`` find in ``text`` (in their order) that is not a
    function word or a word of :data:`_NO_ITEM`, singular and lower-cased."""
    for pattern in patterns:
        for m in pattern.finditer(text):
            word = m.group(1).lower()
            if word not in FUNCTION_WORDS and word not in _NO_ITEM:
                return noun_singular(word)
    return None


def _item(slug: str, words: str, sentence: str) -> str | None:
    """The item an :data:`_ITEMISED` slug's statement names, as a key part: from the
    matched ``words`` (a format, an access need, a diet) or from the ``sentence`` (what an
    allergy is to, what a budget is for); None when it names none."""
    if slug in _ITEM_IN_SENTENCE:
        return _named_item(_ITEM_IN_SENTENCE[slug], sentence)
    words = words.lower()
    if slug == "diet":
        return _DIET_ITEM.get(words, words)
    words = re.sub(r"^colou?r[ -]?", "colour_", words)
    for start, item in _ITEM_OF.items():
        if words.startswith(start):
            return item
    if words.startswith("dyslexi"):
        return "dyslexia"
    return words.replace(" ", "_")


def _slug(attribute: str | None) -> str:
    """The attribute's slug without its subject or item (``wife:allergy`` -> ``allergy``)."""
    return (attribute or "").rpartition(":")[2].partition("/")[0]


# The same, the preference slugs first (in their order), then the others.
_PREFERENCE_FIRST = tuple(
    sorted(_ATTRIBUTES, key=lambda entry: _STATE_KINDS.get(entry[1]) is not RecordKind.PREFERENCE)
)


def _attribute(sentence: str, preference_like: bool = True, addressed: bool = False) -> str | None:
    """The record's structural key ``[subject:]attribute``: an update supersedes only the
    record with the same key, so "my son is allergic to X" never replaces "I'm allergic to
    Y", and an answer-length preference never replaces an answer-format one. In a
    ``preference_like`` sentence the preference slugs are tried first: "I'm a nurse, and I
    prefer answers in bullet points" states a format, and a later "I'm a scientist" must
    not supersede it as an occupation. A sentence ``addressed`` to the assistant (an
    instruction) is keyed by no fact it gives as its reason ("Use kilometres from now on, I
    live in Germany" is no residence a move would replace)."""
    for pattern, slug in _PREFERENCE_FIRST if preference_like else _ATTRIBUTES:
        if slug in _PREFERENCE_ONLY and not preference_like:
            continue
        if addressed and _STATE_KINDS.get(slug) is RecordKind.FACT:
            # An instruction keyed by the fact it gives as its reason ("Please always cite
            # your sources, I'm a journalist") would be replaced by the next job statement.
            continue
        if pattern is _LANGUAGE_REQUEST and not preference_like:
            continue
        m = pattern.search(sentence)
        if m and slug == "occupation" and not _names_a_role(m, sentence):
            m = None
        if m:
            if _THIRD_PERSON.match(sentence[: m.start()]):
                return None  # "They're vegetarian": someone's, not said whose
            subject = _subject(sentence[: m.start()], slug in _ITEM_IN_SENTENCE)
            if slug in _ITEMISED:
                item = _item(slug, m.group(1) if pattern.groups else "", sentence)
                slug = f"{slug}/{item}" if item else slug
            return f"{subject}:{slug}" if subject else slug
    m = _MY_NOUN.search(sentence)
    if m and m.group(1).lower() not in _STOP_NOUNS and not _PERSON_NOUN.fullmatch(m.group(1)):
        return re.sub(r"[^a-z]+", "_", m.group(1).lower()).strip("_")
    return None


# "I'm a/an" then what is no role: a trait or a taste ("a morning person", "a big fan of
# jazz", "a bit of a perfectionist", "a mum of two"), a degree ("a little tired") or a time
# ("an hour late").
_NOT_A_ROLE = frozenset(
    "of person people fan fans lover lovers type kind sort bit lot little tad fanatic addict "
    "enthusiast buff nerd geek junkie believer minute hour day week month year".split()
)
# "I'm a/an" then a word that makes the rest a habit, a taste or a verdict, not a job: "an
# early riser", "a light sleeper", "a picky eater", "a terrible cook", "a huge foodie".
_MANNER = frozenset(
    "early late light heavy deep sound slow fast quick picky fussy messy tidy neat good bad "
    "terrible awful horrible great decent poor lousy excellent amazing brilliant big huge "
    "massive total complete absolute utter avid keen eager proud happy lucky natural born real "
    "true night morning firm hopeless serial chronic compulsive casual occasional regular "
    "frequent social habitual reluctant nervous anxious nervy careful careless sucker".split()
)
# What one is, not what one does: a stage of life, a temperament, a family tie, a status.
_NOT_A_JOB = re.compile(
    r"(?:adult|grown-?up|teen(?:ager)?|kid|child|baby|twin|orphan|widow(?:er)?|"
    r"mum|mom|mother|dad|father|parent|grand\w+|wife|husband|sister|brother|sibling|aunt|"
    r"uncle|cousin|niece|nephew|newlywed|bride|groom|single|introvert|extrovert|ambivert|"
    r"optimist|pessimist|realist|idealist|romantic|perfectionist|procrastinator|worrier|"
    r"overthinker|beginner|novice|newbie|amateur|foodie|homeowner|renter|tenant|member|"
    r"regular|local|newcomer|native|immigrant|expat|citizen|resident|vegetarian|vegan|"
    r"smoker|non-smoker|drinker|non-drinker|survivor|patient|fan|believer|person|human|"
    r"woman|man|girl|guy|boy|lady|gentleman|mess|wreck|pushover|natural)s?",
    re.I,
)
_TRAILING = frozenset(
    "now again too also already finally anymore today nowadays currently lately days".split()
)
_PREPOSITIONS = frozenset("for at in with from on".split())
_CLAUSE_END = re.compile(r"[,.;:!?()\u2014\u2013]| - |\b(?:and|but|so|because|who|which|that)\b")
_I_AM_A = re.compile(r"i(?:'m| am) an?", re.I)
# "work at/for" a place, an employer or a person, not a time or a place of the day ("I work
# at night", "I'm working at home today", "I work for hours"); "work as" a role ("as a
# nurse", not "as hard as anyone").
_NOT_A_WORKPLACE = re.compile(
    r"\s*(?:home|night|nights|weekends?|the (?:moment|weekend|end|same time)|least|times|"
    r"my desk|hours|days|weeks|months|years|a (?:while|bit)|long|now|free|fun|\d)\b",
    re.I,
)
_AS_A_ROLE = re.compile(r"\s*(?:an?|the)\b", re.I)


def _names_a_role(m: re.Match[str], sentence: str) -> bool:
    """Whether an occupation cue matched in ``sentence`` states one: "work at/for" must not
    name a time or home, "work as" needs a role after it, and "I'm a/an" a few words naming
    no trait, degree or time, not all of them capitalised, that neither open with a word of
    manner or verdict ("an early riser", "a terrible cook") nor end in what one is rather
    than does ("an adult", "a new mum", "an introvert", "a homeowner")."""
    cue = m.group(1).lower()
    rest = sentence[m.end() :]
    if cue.endswith(("at", "for")):
        return not _NOT_A_WORKPLACE.match(rest)
    if cue.endswith("as") and not cue.startswith("my"):
        return bool(_AS_A_ROLE.match(rest))
    if not _I_AM_A.fullmatch(cue):
        return True
    end = _CLAUSE_END.search(rest)
    written = re.findall(r"[^\W\d_]+", rest[: end.start()] if end else rest)
    words = [w.lower() for w in written]
    if not words:
        return False  # "I'm a, um, ..."
    while len(words) > 1 and words[-1] in _TRAILING:
        words.pop()  # "a homeowner now", "a nurse these days"
        if words[-1] == "these" and len(words) > 1:
            words.pop()
    # the head noun comes before a prepositional phrase: "a carer for my dad"
    head = next((i for i, w in enumerate(words) if w in _PREPOSITIONS), len(words))
    head_noun = words[head - 1] if head else words[-1]
    # only capitalised words name where one is from or what one supports, not a job: "a
    # Londoner", "an Arsenal fan" (but "a Google engineer")
    demonym = all(w[0].isupper() for w in written)
    return (
        len(words) <= 6
        and not demonym
        and not _NOT_A_ROLE.intersection(words)
        and words[0] not in _MANNER
        and not _NOT_A_JOB.fullmatch(head_noun)
    )


def _kind(sentence: str) -> RecordKind:
    if _PREFERENCE.search(sentence):
        return RecordKind.PREFERENCE
    if _DECISION.search(sentence):
        return RecordKind.DECISION
    if _TASK.search(sentence):
        return RecordKind.TASK
    if _RELATION.search(sentence):
        return RecordKind.RELATIONSHIP
    if _EVENT.search(sentence):
        return RecordKind.EVENT
    return RecordKind.FACT


# A sentence that describes the user themself, opening with "I'm", "I am", "I have", "I've
# got", "I've been/was diagnosed" or "I live with" (after an optional "btw", "also", "fyi"
# and the like).
_SELF_DESCRIPTION = re.compile(
    rf"^\W*(?:(?:ok|okay|{STATEMENT_LEAD_IN}),?\s+)*"
    r"(?:i'm|im|i am|i have|i've got|i've been diagnosed|i was diagnosed|i live with)\b|"
    # the same in Spanish, Portuguese, French, German, Italian, Dutch and Polish
    r"^\W*(?:(?:yo|eu)\s+)?(?:soy|estoy|tengo|sou|estou|tenho|je suis|j'ai|ich bin|ich habe|"
    r"sono|ho|ik ben|ik heb|jestem|mam)\b|"
    # what the user is, signed in a few words: "colour blind here.", "ADHD here", "ADHD
    # brain here, so ..."
    r"^\W*(?:[^\W\d_]+[\s-]+){0,2}[^\W\d_]+ here(?:\W*$|\s*[,;:\u2014\u2013-])",
    re.I,
)

# An access need ("colour blind here." is kept as a record; "Sam here." is not).
_NEED = re.compile(ACCESSIBILITY, re.I)


def _confirmed(turns: Sequence[TranscriptTurn], user: str | None) -> dict[int, TranscriptTurn]:
    """The principal's turns whose next user turn only says that what they asked stands
    ("From now on, please.", "No, always."), by turn index, with that next turn."""
    asked = [t for t in turns if t.role is Role.USER]
    return {
        before.turn_index: after
        for before, after in itertools.pairwise(asked)
        if is_principal_turn(before, user)
        and is_principal_turn(after, user)
        and confirms_standing(after.text)
    }


class OfflineExtractor:
    """Deterministic, rule-based extractor for running with no model (offline reference).

    Every first-person declarative sentence the principal user wrote becomes one record with
    the user's own words as its text: a preference, decision, task, relationship, event or
    fact by keyword rules, an attribute slug for a few well-known attributes ("residence",
    "diet", "answer_style", ...) or "my X is ..." phrases, and hypothetical epistemic state
    for conditionals. Questions, assistant and tool turns and third parties' turns are skipped.
    A request the principal's next turn says stands ("Can you keep your answers shorter?" ...
    "From now on, please.") is one record of both turns. A sentence asking for a language of
    reply and an answer style in clauses of their own ("Always answer in English, no
    emojis") is one record per category.
    A sentence describing the user ("I'm dyslexic.") followed in the same turn by a standing
    instruction ("Please always keep sentences short.") is one preference record of both: the
    instruction keeps the reason it was given for. So does a request that names a part of the
    reply only by a pronoun for what the sentence before it named ("The emojis annoy me.
    Could you leave them out in future?").
    """

    name = "offline-rules"
    version = "1"

    def extract(
        self,
        turns: Sequence[TranscriptTurn],
        *,
        user: str | None,
        people: Collection[str] = (),
    ) -> list[ExtractedRecord]:
        out: list[ExtractedRecord] = []
        confirmed = _confirmed(turns, user)
        consumed = {t.turn_index for t in confirmed.values()}
        # The one person of the principal's that their latest sentence naming anyone named
        # ("My sister Ines lives in Porto."), with the turn that named them and that turn's
        # ordinal among the principal's turns: a sentence in the same or the next turn whose
        # subject is "she", "he" or "they" is about them ("She's a nurse there.").
        someone: tuple[str, int, int] | None = None
        # The names the principal gave their people, in records already stored (``people``)
        # or earlier in this session ("my partner Jonas").
        names: set[str] = set(people)
        ordinal = 0
        for turn in turns:
            if not is_principal_turn(turn, user) or turn.turn_index in consumed:
                continue
            ordinal += 1
            # The record written for the turn's previous sentence, when that sentence
            # described the user ("I'm dyslexic, big blocks of text are hard for me."):
            # a standing instruction right after it is asked for that reason, and keeps it.
            reason: ExtractedRecord | None = None
            # The record written for the turn's previous sentence, whatever it says: a
            # standing request that names a part of the reply only by a pronoun for what
            # that sentence named ("The emojis annoy me. Could you leave them out in
            # future?") is one record of both.
            previous: ExtractedRecord | None = None
            # The turn's previous sentence when it was no record of its own, not being about
            # the user: a request that names a part of the reply only by a pronoun for what
            # it named is read with it ("Honestly the emojis make you sound like a toddler.
            # Drop them for good.").
            unrecorded: str | None = None
            sentences = _joined_fragments(_sentences(turn.text))
            for at, sentence in enumerate(sentences):
                said_before, unrecorded = unrecorded, None
                if _too_short(sentence):
                    reason = previous = None
                    continue
                evidence: tuple[int, ...] = (turn.turn_index,)
                resolved = False
                found = list(_PERSON_OF_MINE.finditer(sentence))
                names.update(m.group("name") for m in found if m.group("name"))
                named = {m.group(0).casefold(): m.group(0) for m in found}
                opener_name = _OPENS_WITH_NAME.match(sentence)
                if opener_name is not None and opener_name.group(1) in names:
                    # about a person the principal named as theirs, earlier in the session or
                    # in a stored record: "My partner Jonas ..." then "Jonas is a carpenter."
                    resolved = True
                if named:
                    # two people named leave "she" unresolved
                    only = next(iter(named.values())) if len(named) == 1 else None
                    someone = (only, turn.turn_index, ordinal) if only else None
                elif (
                    someone is not None
                    and someone[2] >= ordinal - 1
                    and (pronoun := _THIRD_PERSON.match(sentence)) is not None
                    and _agrees(pronoun.group(1), someone[0])
                ):
                    # "My daughter Mila: she's allergic to strawberries." (with both turns)
                    person, named_in, _ = someone
                    sentence = (
                        f"{person[0].upper()}{person[1:]}: {sentence[0].lower()}{sentence[1:]}"
                    )
                    evidence = tuple(sorted({named_in, turn.turn_index}))
                    resolved = True
                confirmation = confirmed.get(turn.turn_index)
                if (
                    confirmation is not None
                    and at == len(sentences) - 1
                    and (asks(sentence) or instruction_clauses(sentence))
                ):
                    # Asked, then said to stand in the next turn ("Can you keep your
                    # answers shorter?" ... "From now on, please."): one request, in both.
                    sentence = f"{sentence} {confirmation.text.strip()}"
                    evidence = (turn.turn_index, confirmation.turn_index)
                request = standing_request(sentence)
                stated = None if request else _stated_before_question(sentence)
                if stated is not None:
                    sentence = stated  # the statement is kept, its question is not
                opener = _SUBORDINATE_OPENER.match(sentence)
                main = sentence[opener.end() - 1 :] if opener else sentence
                instruction = request or bool(
                    _INSTRUCTION.search(sentence)
                    or (opener is not None and _INSTRUCTION.search(main))
                    or _FOREIGN_INSTRUCTION.search(sentence)
                    or _PREFERENCE.search(sentence)
                    or _ABOUT_REPLIES.search(sentence)
                    or PLEASE.search(sentence)
                    # an instruction on the replies with no "please" or "I": "Put the
                    # answer first and the reasoning after.", "Go back to replying in English."
                    # (after a condition: "When you're not sure, say so instead of guessing.")
                    or (opens_with_instruction(main) and reply_categories(sentence))
                )
                withdrawal = bool(_WITHDRAWAL.search(sentence)) or allowed_again(sentence)
                question = asks(sentence) or (
                    bool(_QUESTION_START.match(sentence))
                    and not _INSTRUCTION.match(sentence)
                    and not _SUBORDINATE_OPENER.match(sentence)
                    and not _NOT_A_QUESTION.match(sentence)
                )
                if question and not request:
                    reason = previous = None
                    continue
                stands = not withdrawal and (request or standing_instruction(sentence))
                if (
                    reason is None
                    and previous is not None
                    and not withdrawal
                    and (stands or instruction_clauses(sentence))
                    and refers_back(previous.text, sentence)
                ):
                    reason, stands = previous, True
                if reason is not None and stands:
                    out.pop()  # ``reason`` is always the last record written
                    sentence = f"{reason.text} {sentence}"
                elif (
                    said_before is not None
                    # (not a thing at hand: "Those bullet points were great.")
                    and not _POINTS_AT.search(said_before)
                    and not withdrawal
                    and (stands or instruction_clauses(sentence))
                    and refers_back(said_before, sentence)
                ):
                    sentence = f"{said_before} {sentence}"
                if len(sentence) > MAX_RECORD_TEXT:
                    # A run-on sentence longer than a record may be states nothing to keep
                    # whole; proposing it would fail the session's whole extraction.
                    reason = previous = None
                    continue
                if not (
                    resolved
                    or _FIRST_PERSON.search(sentence)
                    or _STATEMENT.search(sentence)
                    or (_SELF_DESCRIPTION.match(sentence) and _NEED.search(sentence))
                    or instruction
                    or standing_instruction(sentence)
                    or withdrawal
                    or _RULE.search(sentence)
                ):
                    reason = previous = None
                    unrecorded = sentence
                    continue
                hypothetical = _is_hypothetical(sentence)
                # A request for once or for one item ("drop the bullet points from the
                # agenda I'm sending") states no preference a later one may replace.
                one_off = one_off_request(sentence)
                preference_like = (instruction or withdrawal) and not one_off
                addressed = bool(
                    request
                    or _INSTRUCTION.search(sentence)
                    or PLEASE.search(sentence)
                    or _ABOUT_REPLIES.search(sentence)
                    or _FOREIGN_INSTRUCTION.search(sentence)
                )
                attribute = (
                    None if hypothetical else _attribute(sentence, preference_like, addressed)
                )
                if (
                    attribute is not None
                    and ":" not in attribute
                    and _slug(attribute) in _REPLY_SLUGS
                    and (one_off or (not withdrawal and bound_request(sentence)))
                ):
                    # The principal's own way of replying for once, for one item, on a
                    # trigger, hedged or in someone else's words ("answer in English just
                    # for this question", "when we talk about Dutch paperwork, reply in
                    # English", "perhaps reply in English now and then"): it replaces no
                    # standing one. (A take-back names its preference: "ignore what I said
                    # about ...")
                    attribute = None
                kind = _STATE_KINDS.get(_slug(attribute), _kind(sentence))
                if (
                    request
                    or withdrawal
                    or _FOREIGN_INSTRUCTION.search(sentence)
                    or _ABOUT_REPLIES.search(sentence)
                ):
                    kind = RecordKind.PREFERENCE
                record = ExtractedRecord(
                    kind=kind,
                    text=sentence,
                    evidence_turns=evidence,
                    confidence=0.5 if hypothetical else 0.8,
                    speaker=turn.speaker or user,
                    attribute=attribute,
                    epistemic=EpistemicState.HYPOTHETICAL
                    if hypothetical
                    else EpistemicState.ASSERTED,
                    event_time=turn.time if kind is RecordKind.EVENT else None,
                )
                parts = category_parts(sentence) if instruction and not hypothetical else []
                if parts:
                    # A language of reply and an answer style asked for in clauses of their
                    # own ("Always answer in English, no emojis"): one record each, so that
                    # a later change of one leaves the other in force.
                    out.extend(
                        record.model_copy(
                            update={"text": part, "attribute": _attribute(part, True)}
                        )
                        for part in parts
                    )
                else:
                    out.append(record)
                previous = None if parts else record
                self_description = not (instruction or withdrawal or hypothetical)
                # the principal described, or an access need of theirs ("I rely on a screen
                # reader.")
                describes = _SELF_DESCRIPTION.match(sentence) or (
                    _FIRST_PERSON.search(sentence) and _NEED.search(sentence)
                )
                reason = record if self_description and describes else None
        return out
