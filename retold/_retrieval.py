"""Candidate generation: lexical, dense and entity stages, fusion, freshness, dedup, rerank.

Every stage reads through SQL that filters on the trusted scope and on lifecycle (active,
not superseded, not expired, inside its validity window) before any text is scored. The
stages are switched and tuned by one frozen :class:`RetrievalConfig` whose canonical JSON
is stable, so a bundle manifest can hash it.

Pipeline, in order::

    lexical (FTS5 BM25) ─┐
    dense (Embedder)    ─┤
    entity (name index) ─┼─► fusion (rrf | weighted) ─► speaker / recency boosts
    relation path       ─┘        ─► dedup ─► rerank (optional) ─► session neighbours

The name index the entity stage and the relation path read, and the component's schema,
are in ``retold._retrieval_index``; the budgeted read built on this search in
``retold._budgeted_read``.

Cost at scale (``retold bench retrieval``): each stage's work is bounded by the query, not
by the scope's size, nor by other principals' rows. The lexical stage leaves words found in
more than ``lexical_common_postings`` records out of the match (BM25 scores every match of
a word; a common word's weight is small and its matches are the cost); in a store the
principal shares (it holds under a quarter of the rows) the count is of the principal's own
records and every match ANDs the principal's token in the index, so FTS5 skips other
principals' postings (``retold._store.scoped_match``); the entity stage reads its
own index by key, rarest names first while their postings fit in ``entity_postings``; the
dense stage reads the nearest index cells only (``retold._vectors``);
scope and lifecycle are applied by SQL in the lexical stage and, for the dense and entity
ids, once in the row read after fusion; session neighbours are read as bounded windows.
Ranking works on plain rows; ``Record`` models are built only for the returned top ``limit``.

Conversations: a speaker's name mostly marks greetings and replies addressed to that
speaker, so turns matching the query only through a name are fused at
``speaker_match_weight`` and the dense query is embedded without the names; in ``sum``
mode the turns around found turns add up their decayed scores, so the answer after a
question, or a turn inside a relevant exchange, reaches a small candidate cap.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import anyio
import anyio.lowlevel
import structlog
from pydantic import BaseModel, ConfigDict, Field

from ._deadline import check_deadline
from ._errors import UsageError
from ._lexicon import FUNCTION_WORDS as _STOPWORDS
from ._lexicon import (
    MONTH_NAMES,
    NAME,
    NOT_A_NAME,
    RELATIONS,
    WEEKDAY_NAMES,
    noun_singular,
)
from ._records import Activation, Candidate, LifecycleState, Principal, RecordKind
from ._retrieval_index import (
    ensure_retrieval_schema,
    extract_entities,
    index_entities,
    index_scope,
)
from ._retrieval_sql import RetrievalSQL, retrieval_sql
from ._store import _RECORD_COLUMNS, Store, _row_to_record, iso
from ._typing import Embedder, Reranker
from ._vectors import (
    DEFAULT_PROBE,
    dense_search,
    ensure_vector_schema,
    ensure_vectors,
    pending_vectors,
    vector_counts,
)

__all__ = [
    "HybridRetriever",
    "RetrievalConfig",
    "RetrievalResult",
    "extract_entities",
    "index_entities",
    "query_terms",
]

log = structlog.get_logger(__name__)

_A = TypeVar("_A")
_B = TypeVar("_B")


_WORD = re.compile(r"\w+")
# One of someone's people asked about by relation: "my brother", "our neighbour", "Mei's
# older sister" (the owner is the first person or a capitalised possessive).
_ASKED_RELATION = re.compile(
    rf"(?:\b(?i:my|our)|\b(?=[A-Z]){NOT_A_NAME}(?P<owner>{NAME})['’]s)"
    r"\s+(?:(?!(?i:my|our|his|her|their|your)\b)(?i:[a-z]+)\s+)?"
    rf"(?P<rel>(?i:{RELATIONS}|other half|better half|significant other))\b"
)
# Relation words that name the same tie: a question about "my partner" or "my other half" is
# about the person introduced as "my wife"; one about "my kids" about "my son Ben" and "my
# daughter Ana".
_SAME_TIE = (
    frozenset(
        [
            *"wife husband partner spouse boyfriend girlfriend fiance fiancé fiancee fiancée".split(),
            *("other half", "better half", "significant other"),
        ]
    ),
    frozenset("mum mom mother".split()),
    frozenset("dad father".split()),
    frozenset("kid child children son daughter baby".split()),
    frozenset("colleague coworker co-worker".split()),
    frozenset("flatmate roommate".split()),
    frozenset("neighbour neighbor".split()),
)

_CURRENT_STATE_KINDS = frozenset(
    {
        RecordKind.FACT,
        RecordKind.PREFERENCE,
        RecordKind.RELATIONSHIP,
        RecordKind.DECISION,
        RecordKind.PROCEDURE,
        RecordKind.TASK,
    }
)
_CURRENT_STATE_KIND_VALUES = frozenset(k.value for k in _CURRENT_STATE_KINDS)


class RetrievalConfig(BaseModel):
    """Every switch and weight of candidate generation. Frozen; hash with :meth:`sha256`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lexical: bool = Field(default=True, description="Run the FTS5 BM25 stage.")
    lexical_limit: int = Field(default=300, ge=1, description="Rows the lexical stage keeps.")
    lexical_common_postings: int = Field(
        default=2048,
        ge=1,
        description="A query word found in more than this many records (the principal's own, "
        "in a store shared with other principals) is "
        "common: when the query has a rarer word, common words are left out of the lexical "
        "match (their BM25 weight is small and scoring their matches is the stage's cost); "
        "when every word is common, the newest this many in-scope matches are scored.",
    )
    drop_stopwords: bool = Field(
        default=True, description="Leave function words out of the lexical query."
    )
    dense: bool = Field(
        default=True, description="Run the dense stage (only when an embedder is given)."
    )
    dense_limit: int = Field(default=300, ge=1, description="Rows the dense stage keeps.")
    dense_probe: int = Field(
        default=DEFAULT_PROBE,
        ge=1,
        description="Vectors the dense stage reads per query: the nearest index cells until "
        "this many (exact below twice this many vectors in the scope).",
    )
    entity: bool = Field(default=True, description="Run the entity-name stage.")
    entity_limit: int = Field(default=300, ge=1, description="Rows the entity stage keeps.")
    entity_max_share: float = Field(
        default=0.2,
        gt=0.0,
        le=1.0,
        description="Ignore entities found in more than this share of the scope's records.",
    )
    entity_postings: int = Field(
        default=1024,
        ge=1,
        description="Postings the entity stage reads at most: the query's names are taken "
        "rarest first while their record lists fit (a common name's records tie at a small "
        "weight, and reading them is the stage's cost); a name found alone is read up to "
        "``entity_limit`` records, which is every tie the stage keeps.",
    )
    relation_path: bool = Field(
        default=True,
        description='Follow the query\'s people by relation: for "my brother" or "Mei\'s '
        'brother", the names the scope\'s records give that relation ("my brother Luis", '
        "said by that speaker) are looked up as a stage of their own, the introducing records "
        'first, then the records naming them, so "Luis became a vet" is a candidate for '
        '"What does Mei\'s brother do?".',
    )
    relation_rows: int = Field(
        default=64,
        ge=1,
        description='The newest introductions by relation ("my brother Luis") that the '
        "relation path reads.",
    )
    relation_weight: float = Field(
        default=1.5,
        ge=0.0,
        description="Weight of the relation path's stage (the dense stage's: both find what "
        "the question's words alone do not).",
    )
    fusion: Literal["rrf", "weighted", "rrf_score"] = Field(
        default="rrf",
        description="rrf: sum of weight/(rrf_k + rank); weighted: sum of weight * "
        "max-normalised score; rrf_score: each rrf term scaled by (1 + score/top score) / 2, so "
        "a stage's rank counts more when its raw score is close to that stage's best.",
    )
    rrf_k: int = Field(default=60, ge=1, description="Rank offset of reciprocal rank fusion.")
    lexical_weight: float = Field(default=1.0, ge=0.0, description="Weight of the lexical stage.")
    dense_weight: float = Field(
        default=1.5,
        ge=0.0,
        description="Weight of the dense stage (above the lexical stage's: in conversation "
        "the evidence turn is often a paraphrase of the question, or an answer that shares "
        "few of its words).",
    )
    entity_weight: float = Field(default=0.5, ge=0.0, description="Weight of the entity stage.")
    lexical_skip_speakers: bool = Field(
        default=True,
        description="Leave the scope's speaker names out of the lexical query when other "
        "words remain (they mostly match turns addressed to that speaker; the speaker boost "
        "covers whose turn it is).",
    )
    speaker_match_weight: float = Field(
        default=0.25,
        ge=0.0,
        description="Fusion weight (times lexical_weight) of the turns the lexical stage "
        "finds only through a speaker's name, fused as a list of their own.",
    )
    dense_skip_speakers: bool = Field(
        default=True,
        description="Embed the query without the scope's speaker names when other words "
        "remain (a short turn's embedding is dominated by a name, so greetings would lead; "
        "the speaker boost covers whose turn it is).",
    )
    entity_skip_speakers: bool = Field(
        default=True,
        description="Leave the scope's speaker names out of the entity stage (the speaker "
        "boost covers them; as entities they match most of a conversation).",
    )
    speaker_boost: float = Field(
        default=0.15,
        ge=0.0,
        description="Multiply by (1 + this) when the query names the record's speaker.",
    )
    recency_boost: float = Field(
        default=0.25,
        ge=0.0,
        description="Current-state recency boost: facts, preferences, decisions and tasks gain "
        "up to this factor, halving every recency_half_life_days behind the newest candidate.",
    )
    recency_half_life_days: float = Field(
        default=30.0, gt=0.0, description="Half-life of the recency boost, in days."
    )
    event_time_tie_break: bool = Field(
        default=True,
        description="Equal scores order by event time, newest first, then by write order "
        "(never by id).",
    )
    include_superseded: bool = Field(
        default=False, description="Also return superseded records (packed with a tag)."
    )
    include_expired: bool = Field(
        default=False, description="Also return expired or closed-window records."
    )
    dedup: bool = Field(default=True, description="Fold identical and near-identical text.")
    dedup_threshold: float = Field(
        default=0.9,
        gt=0.0,
        le=1.0,
        description="Word-trigram Jaccard similarity at which two texts fold.",
    )
    repeat_decay: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="A text its speaker said before, on another day or in another state "
        "(so it does not fold), scores times this for each better-ranked copy: the "
        "repeat keeps its date but gives way to what says something new (1: off).",
    )
    rerank: bool = Field(default=True, description="Apply the reranker, when one is given.")
    rerank_top_n: int = Field(default=30, ge=1, description="How many top candidates to rerank.")
    session_window: int = Field(
        default=10, ge=0, description="Session neighbours added on each side of a top result."
    )
    session_top_k: int = Field(
        default=50, ge=0, description="How many top results get their session neighbours."
    )
    session_decay: float = Field(
        default=0.5, ge=0.0, le=1.0, description="A neighbour's score: trigger score times this."
    )
    reply_decay: float = Field(
        default=0.9,
        ge=0.0,
        le=1.0,
        description="When a found turn asks a question, the next turn by another speaker (its "
        "answer) scores the trigger's score times this instead of session_decay.",
    )

    session_mode: Literal["max", "sum"] = Field(
        default="sum",
        description="max: a neighbour not found by a stage takes its best trigger's decayed "
        "score, and found turns keep theirs; sum: every turn gains the decayed scores of all "
        "the found turns around it (found turns times session_found_share), so turns inside "
        "a relevant exchange rise above isolated matches.",
    )
    session_found_share: float = Field(
        default=0.5,
        ge=0.0,
        description="In sum mode, the share of the neighbours' decayed scores a found turn gains.",
    )

    session_diversity: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Spread the returned list over sessions: picked best first, a hit's "
        "score is multiplied by this once per hit of its session already picked (1: off). "
        "Session expansion lifts whole exchanges; at a small cap one session would "
        "otherwise fill it, and a question whose evidence spans sessions loses the rest.",
    )
    several_diversity: float = Field(
        default=0.7,
        gt=0.0,
        le=1.0,
        description="session_diversity for a query that asks for several things (what kinds "
        "of, a plural after what/which, two questions joined by 'and'): the "
        "lower of the two applies. Such questions gather evidence from several sessions.",
    )
    session_diversity_after: int = Field(
        default=4,
        ge=0,
        description="The first this many picks go by score alone; session_diversity applies "
        "to the rest (a question's answer is often the turn after its best match, in the "
        "same session).",
    )

    temporal_boost: float = Field(
        default=0.3,
        ge=0.0,
        description="When the query asks when (when, what date/day/month/year, how long "
        "ago), turns whose text carries a date or time phrase gain this factor.",
    )

    backfill: bool = Field(
        default=False,
        description="When the stages find fewer than the limit (but at least one record), "
        "fill the rest with the newest live records, scored 0 on the 'backfill' path.",
    )

    def canonical_json(self) -> str:
        """Stable serialization: every field, sorted keys, no whitespace."""
        body = {"schema": "retold.retrieval-config/1", **self.model_dump(mode="json")}
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def sha256(self) -> str:
        """Hex SHA-256 of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


# -- text helpers -------------------------------------------------------------------------


def query_terms(text: str, *, drop_stopwords: bool = True) -> list[str]:
    """Lower-cased query words in first-seen order, function words dropped when asked.

    If every word is a function word, all of them are kept, so a query never becomes empty
    merely because it is short.
    """
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    if not drop_stopwords:
        return words
    kept = [w for w in words if w not in _STOPWORDS]
    return kept or words


_ASKS_WHEN = re.compile(
    r"\b(when|what (date|day|month|year|time)|which (date|day|month|year)|how long ago)\b",
    re.IGNORECASE,
)
_TEMPORAL = re.compile(
    rf"\b({MONTH_NAMES}|(jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.?"
    rf"|{WEEKDAY_NAMES}|weekend"
    r"|yesterday|today|tonight|tomorrow|ago|since"
    r"|(last|next|this|past) (week|month|year|night|summer|winter|spring|fall|autumn)"
    r"|\d{1,2}(st|nd|rd|th)|(19|20)\d\d)\b",
    re.IGNORECASE,
)


def _asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time (when, what date, how long ago, ...)."""
    return bool(_ASKS_WHEN.search(query))


_ASKS_SEVERAL = re.compile(
    r"\b((?:what|which) (?:kinds?|types?|sorts?) of"
    r"|and (?:who|what|where|when|which|why|how))\b",
    re.IGNORECASE,
)
_WH_PHRASE = re.compile(r"\b(?:what|which)((?:\s+[\w'’-]+){1,4})", re.IGNORECASE)
_AUXILIARIES = frozenset(
    "is are was were has have had does do did will would can could should may might".split()
)


def _plural(word: str) -> bool:
    """Whether ``word`` (lower-case) reads as a plural noun: children, people, or a word of
    four letters or more that :func:`noun_singular` shortens, not a possessive."""
    if word in ("children", "people"):
        return True
    return len(word) > 3 and not word.endswith(("'s", "’s")) and noun_singular(word) != word


def _asks_several(query: str) -> bool:
    """Whether ``query`` asks for several things, whose evidence may lie in several sessions:
    what kinds of, two questions joined by "and" ("Who is her partner and what
    are they training for?"), or what/which and a plural noun before the verb ("What roles
    does he have?", "Which of her hobbies ...", "What are his plans?")."""
    if _ASKS_SEVERAL.search(query):
        return True
    for m in _WH_PHRASE.finditer(query):
        for i, word in enumerate(m.group(1).lower().split()):
            if word in _AUXILIARIES and not (i == 0 and word in ("are", "were")):
                break
            if _plural(word):
                return True
    return False


def _without_names(text: str, names: frozenset[str]) -> str:
    """``text`` without the words in ``names`` (and their possessive 's), if others remain."""
    if not names:
        return text
    kept = re.sub(
        r"\b(\w+)(?:['’]s)?\b",
        lambda m: "" if m.group(1).lower() in names else m.group(0),
        text,
    )
    kept = " ".join(kept.split())
    words = {w.lower() for w in _WORD.findall(kept)} - _STOPWORDS
    return kept if words else text


def _lexical_plan(terms: Sequence[str], common: frozenset[str]) -> tuple[tuple[str, ...], bool]:
    """(terms to MATCH, whether the match is bounded to the newest postings).

    The selective terms when any remain; else every term, bounded.
    """
    selective = tuple(t for t in terms if t not in common)
    if selective:
        return selective, False
    return tuple(terms), bool(terms)


def relation_tie(relation: str) -> frozenset[str]:
    """The relation words that name the same tie as ``relation``, singular and lower-cased."""
    word = noun_singular(relation.lower())
    return next((tie for tie in _SAME_TIE if word in tie), frozenset({word}))


# (owner, the relation words of one tie) per person asked about; owner None: the first person.
_Asked = tuple[tuple[str | None, frozenset[str]], ...]
#: One stage's result for fusion: (stage, path, weight, ranked ids with raw scores).
_Stage = tuple[str, str, float, list[tuple[str, float]]]


def asked_relations(query: str, context: str | None = None) -> _Asked:
    """The people ``query`` asks about by relation, each with its owner: "my brother" (the
    first person), "Mei's brother". A planner's gap query may keep only the relation word
    ("brother birthday"): the turn it came from (``context``) then says whose."""
    asked = [
        (m.group("owner"), relation_tie(m.group("rel"))) for m in _ASKED_RELATION.finditer(query)
    ]
    if context:
        words = {w.lower() for w in _WORD.findall(query)}
        kept = {relation_tie(w) for w in words}
        for m in _ASKED_RELATION.finditer(context):
            tie = relation_tie(m.group("rel"))
            # the query keeps the relation, or the telling word of a phrase ("half")
            if tie in kept or words & (set(m.group("rel").lower().split()) - {"other"}):
                asked.append((m.group("owner"), tie))
    return tuple(dict.fromkeys(asked))


def people_named(query: str, context: str | None = None) -> frozenset[str]:
    """The names ``query`` may call someone by, lower-cased (:func:`extract_entities`). A
    planner's gap query may keep a name only lower-cased ("luis job" from "What is Luis's
    job now?"): a word of the query the turn it came from (``context``) capitalises counts."""
    names = extract_entities(query)
    if context:
        words = {w.lower() for w in _WORD.findall(query)}
        names |= {name for name in extract_entities(context) if name in words}
    return frozenset(names)


def _word_shingles(words: Sequence[str]) -> frozenset[tuple[str, ...]]:
    if len(words) < 3:
        return frozenset({tuple(words)})
    return frozenset(zip(words, words[1:], words[2:], strict=False))


#: A scope holding fewer than one in this many of the store's rows shares the store: its
#: lexical reads AND its own index token (measured crossover on synthetic 100k-row stores:
#: the token's postings cost more than they skip while a scope holds a third or more).
_SHARED = 4


# -- SQL filters ---------------------------------------------------------------------------


def _live_filter(
    config: RetrievalConfig,
    scope: Principal,
    now: datetime,
    alias: str = "r",
    *,
    by_id: bool = False,
    dialect: RetrievalSQL | None = None,
) -> tuple[str, list[Any]]:
    """The scope and lifecycle filter on ``alias``.

    ``by_id``: the query also looks rows up by id; unary ``+`` keeps these columns off the
    index choice, so SQLite reads the ids through the id index instead of scanning the scope
    (``dialect`` spells that hint for the store).
    """
    if by_id:
        alias = (dialect or RetrievalSQL()).no_index + alias
    states = [LifecycleState.ACTIVE.value]
    if config.include_superseded:
        states.append(LifecycleState.SUPERSEDED.value)
    where = [
        f"{alias}.tenant = ?",
        f"{alias}.principal = ?",
        f"{alias}.lifecycle IN ({', '.join('?' for _ in states)})",
    ]
    params: list[Any] = [scope.tenant, scope.principal, *states]
    if not config.include_superseded:
        where.append(f"{alias}.superseded_by IS NULL")
    if not config.include_expired:
        where.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")
        where.append(f"({alias}.valid_to IS NULL OR {alias}.valid_to > ?)")
        params.extend([iso(now), iso(now)])
    return " AND ".join(where), params


def _columns(alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in _RECORD_COLUMNS.split(","))


# -- results ---------------------------------------------------------------------------------


_ScopeStats = dict[tuple[str, str, bool], tuple[int, int, frozenset[str]]]


def scope_stats(store: Store) -> _ScopeStats:
    """The store's cache, per scope, of (entity watermark, record count, speaker name words)."""
    return store.shared("retold.retrieval.scope_stats", _ScopeStats)


def forget_scope_stats(store: Store, scope: Principal) -> None:
    """Drop this process's cached counts and speaker names of ``scope`` (after an erasure:
    the names are the erased principal's speakers)."""
    cache = scope_stats(store)
    for key in [k for k in cache if k[:2] == (scope.tenant, scope.principal)]:
        cache.pop(key, None)


@dataclass
class _Hit:
    """One candidate while ranking: the plain store row, never a pydantic model."""

    row: dict[str, Any]
    stage_scores: dict[str, float] = field(default_factory=dict)
    stage_ranks: dict[str, int] = field(default_factory=dict)
    score: float = 0.0
    paths: set[str] = field(default_factory=set)
    folded: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.row["id"])

    @property
    def when(self) -> str:
        """Event time (else creation time) as canonical ISO text: sorts as time does."""
        return str(self.row["event_time"] or self.row["created_at"])


class RetrievalResult(BaseModel):
    """What one search found, with the provenance the audit log and bundle need.

    Attributes:
        candidates: best first, ties newest first (event time when configured, then write order).
        folded: surviving record id -> ids of identical or near-identical records folded into it.
        stage_counts: how many rows each stage returned.
        timings_ms: wall time of each stage.
        stale_embedding_models: stored vector model ids that differ from the embedder's and
            were therefore ignored (a model change is reported, never mixed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    candidates: tuple[Candidate, ...] = ()
    folded: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    stage_counts: dict[str, int] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    stale_embedding_models: tuple[str, ...] = ()


#: The CPU-bound stages of every retriever of one event loop share this many worker threads:
#: one core fewer than the machine has (at least one). Retrieval is CPU work (SQLite, numpy
#: and Python, which release the GIL at different points); more threads than cores only
#: make each search slower, and with every core taken the event loop's own thread waits
#: for a CPU, so every turn of the process (deadlines, cancellations, drafts returning)
#: runs late. A search waiting for a thread is cancelled like any other at its deadline.
RETRIEVAL_THREADS = max(1, (os.cpu_count() or 2) - 1)

_CPU_LIMITER: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "retold_retrieval_cpu"
)


def _cpu_limiter() -> anyio.CapacityLimiter:
    """The worker threads retrieval's CPU-bound stages share in the running event loop."""
    try:
        return _CPU_LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(RETRIEVAL_THREADS)
        _CPU_LIMITER.set(limiter)
        return limiter


async def _both(
    first: Callable[[], Awaitable[_A]], second: Callable[[], Awaitable[_B]]
) -> tuple[_A, _B]:
    """Run ``first()`` and ``second()`` at once and return both results.

    An error in either cancels the other and is raised as itself (not wrapped in an
    exception group), as if the two had run one after the other; a cancellation from
    outside (a deadline) cancels both.
    """
    results: list[Any] = [None, None]
    errors: list[Exception] = []

    async def run(at: int, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            results[at] = await call()
        except Exception as exc:
            errors.append(exc)
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, first)
        tg.start_soon(run, 1, second)
    if errors:
        raise errors[0]
    return results[0], results[1]


class HybridRetriever:
    """The default :class:`~retold.Retriever`: lexical + dense + entity stages, fused.

    Ranking works on plain rows (ids and scores, then the union's columns as dicts);
    :class:`~retold.Record` models are built only for the returned top ``limit``.

    Args:
        store: the SQLite store to search.
        config: stage switches and weights.
        embedder: enables the dense stage (vectors are stored per model id and built lazily).
        reranker: enables the rerank stage.
    """

    def __init__(
        self,
        store: Store,
        *,
        config: RetrievalConfig | None = None,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.store = store
        self.config = config or RetrievalConfig()
        self.embedder = embedder
        self.reranker = reranker
        self.dialect = retrieval_sql(store)
        ensure_retrieval_schema(store)
        ensure_vector_schema(store)

    async def prepare(self, scope: Principal) -> tuple[int, int]:
        """Bring ``scope``'s derived indexes up to date ahead of its next search: the entity
        and relation names, and this retriever's embedder's vectors (when it has one).

        A search does the same on its way, within the turn's budget, and keeps whatever it
        finished; after a bulk load (:func:`retold.copy_store`) or an embedder change, this
        does it before traffic does. Returns (records the name index read, records embedded).
        """
        read = (await anyio.to_thread.run_sync(index_scope, self.store, scope))[0]
        if self.embedder is None:
            return read, 0
        model = self.embedder.model_id
        before = (await anyio.to_thread.run_sync(vector_counts, self.store, scope)).get(model, 0)
        await ensure_vectors(self.store, scope, self.embedder)
        after = (await anyio.to_thread.run_sync(vector_counts, self.store, scope)).get(model, 0)
        return read, after - before

    async def retrieve(
        self,
        scope: Principal,
        query: str,
        *,
        context: str | None = None,
        limit: int = 8,
    ) -> Sequence[Candidate]:
        """Candidates for ``query`` in ``scope``, best first (the Retriever protocol)."""
        result = await self.search(scope, query, context=context, limit=limit)
        return result.candidates

    async def search(
        self,
        scope: Principal,
        query: str,
        *,
        context: str | None = None,
        limit: int = 300,
    ) -> RetrievalResult:
        """Run every enabled stage and return up to ``limit`` fused candidates.

        ``context`` (the raw user turn, when the query is a planner's gap query) is not
        searched: the query alone says what is missing. It is read only for the relation
        path: whose people a relation word the query keeps belongs to ("wife days" from
        "What does my wife do these days?"), and which of the query's words are names
        ("luis job" from "What is Luis's job now?").
        """
        if limit <= 0:
            return RetrievalResult()
        cfg = self.config
        timings: dict[str, float] = {}
        counts: dict[str, int] = {}
        now = self.store.clock()
        stale: tuple[str, ...] = ()
        rerank = cfg.rerank and self.reranker is not None
        asked, named = asked_relations(query, context), people_named(query, context)
        # Threads are abandoned on cancellation: a search cut short by a deadline returns at
        # once, and its thread stops at its next statement or deadline check.
        if cfg.dense and self.embedder is not None:
            embedder = self.embedder
            t0 = time.perf_counter()
            # The scope's stats as read before embedding: the stages use them too, rather
            # than bringing the entity index up to date a second time within the search.
            while True:
                pending, stale, stats = await anyio.to_thread.run_sync(
                    self._dense_prepare, scope, abandon_on_cancel=True
                )
                if not pending:
                    break
                await ensure_vectors(self.store, scope, embedder)
            text = _without_names(query, stats[1]) if cfg.dense_skip_speakers else query

            async def embed_query() -> list[float]:
                vector = (await embedder.embed([text]))[0]
                timings["embed"] = (time.perf_counter() - t0) * 1000
                return vector

            # The query's embedding and the stages that do not read it run at once (an
            # embedder's model or HTTP call and SQLite both leave the GIL); the dense stage
            # and fusion follow in a second thread hop.
            query_vector, stages = await _both(
                embed_query,
                lambda: anyio.to_thread.run_sync(
                    self._stages_sync,
                    scope,
                    query,
                    now,
                    timings,
                    counts,
                    stats,
                    asked,
                    named,
                    abandon_on_cancel=True,
                    limiter=_cpu_limiter(),
                ),
            )
            hits, folded = await anyio.to_thread.run_sync(
                self._fused_sync,
                scope,
                query,
                now,
                query_vector,
                stages,
                stats,
                timings,
                counts,
                limit,
                not rerank,
                abandon_on_cancel=True,
                limiter=_cpu_limiter(),
            )
        else:
            # Without an embedder every stage runs in this one thread hop (with a reranker,
            # what follows fusion waits for it).
            hits, folded = await anyio.to_thread.run_sync(
                self._search_sync,
                scope,
                query,
                now,
                timings,
                counts,
                limit,
                not rerank,
                asked,
                named,
                abandon_on_cancel=True,
                limiter=_cpu_limiter(),
            )
        if rerank and hits:
            t0 = time.perf_counter()
            hits = await self._rerank(query, hits)
            timings["rerank"] = (time.perf_counter() - t0) * 1000
            hits = await anyio.to_thread.run_sync(
                self._after_fusion,
                scope,
                now,
                hits,
                limit,
                timings,
                query,
                abandon_on_cancel=True,
                limiter=_cpu_limiter(),
            )
        ranked = self._select(self._sort(hits), limit, _asks_several(query))
        candidates = tuple(
            Candidate(
                record=_row_to_record(h.row),
                score=h.score,
                paths=tuple(sorted(h.paths)),
                query=query,
            )
            for h in ranked
        )
        kept = {h.id for h in ranked}
        return RetrievalResult(
            candidates=candidates,
            folded={k: v for k, v in folded.items() if k in kept},
            stage_counts=counts,
            timings_ms=timings,
            stale_embedding_models=stale,
        )

    # -- stages --------------------------------------------------------------------------

    def _search_sync(
        self,
        scope: Principal,
        query: str,
        now: datetime,
        timings: dict[str, float],
        counts: dict[str, int],
        limit: int,
        finish: bool,
        asked: _Asked = (),
        named: frozenset[str] = frozenset(),
    ) -> tuple[list[_Hit], dict[str, tuple[str, ...]]]:
        """A search without a query vector, in one thread: the stages, fusion, then
        (``finish``) session neighbours and backfill.

        ``asked``: the people the query asks about by relation (:func:`asked_relations`);
        ``named``: the names it may call someone by (:func:`people_named`).
        """
        stats = self._scope_stats(scope)
        stages = self._stages_sync(scope, query, now, timings, counts, stats, asked, named)
        return self._fused_sync(
            scope, query, now, None, stages, stats, timings, counts, limit, finish
        )

    def _dense_prepare(
        self, scope: Principal
    ) -> tuple[bool, tuple[str, ...], tuple[int, frozenset[str]]]:
        """(records wait for a vector, other embedder models' ids, :meth:`_scope_stats`)."""
        assert self.embedder is not None
        pending, stale = pending_vectors(self.store, scope, self.embedder.model_id)
        if stale and not pending:
            log.warning(
                "embedding_model_changed", current=self.embedder.model_id, stale=list(stale)
            )
        return pending, stale, self._scope_stats(scope)

    def _after_fusion(
        self,
        scope: Principal,
        now: datetime,
        hits: list[_Hit],
        limit: int,
        timings: dict[str, float],
        query: str,
    ) -> list[_Hit]:
        """Session neighbours, the temporal cue, then backfill, as configured."""
        cfg = self.config
        lift = 1 + cfg.temporal_boost if _asks_when(query) else 1.0
        if cfg.session_window > 0 and cfg.session_top_k > 0 and hits:
            check_deadline("session expansion")
            t0 = time.perf_counter()
            hits = self._expand_sessions(scope, now, hits, limit, lift)
            timings["session"] = (time.perf_counter() - t0) * 1000
        if lift > 1:
            # A question about when: turns that carry a date or a time phrase are what
            # answers it (the session date alone dates every turn of the session).
            for h in hits:
                if _TEMPORAL.search(h.row["text"]):
                    h.score *= lift
        if cfg.backfill and hits and len(hits) < limit:
            hits = self._backfill(scope, now, hits, limit)
        return hits

    def _stages_sync(
        self,
        scope: Principal,
        query: str,
        now: datetime,
        timings: dict[str, float],
        counts: dict[str, int],
        stats: tuple[int, frozenset[str]],
        asked: _Asked,
        named: frozenset[str],
    ) -> list[_Stage]:
        """The stages that do not read the query's vector (lexical, entity, relation), as
        (stage, path, weight, ranked ids with raw scores); ``stats`` is
        :meth:`_scope_stats`, read once per search."""
        cfg = self.config
        terms = query_terms(query, drop_stopwords=cfg.drop_stopwords)
        all_terms = terms
        if cfg.lexical_skip_speakers and cfg.entity_skip_speakers:
            names = stats[1]
            terms = [t for t in terms if t not in names] or terms
        stages: list[_Stage] = []
        # In a store the principal shares with others (it holds under a quarter of the rows),
        # every lexical read ANDs the principal's own token in the index; else the plain
        # match costs less (the token's postings are most of the index).
        only = scope if self.dialect.store_rows(self.store) > _SHARED * stats[0] else None
        if cfg.lexical:
            t0 = time.perf_counter()
            common = self._common_terms(all_terms, only)
            ranked = self._lexical(scope, terms, now, common, only is not None)
            stages.append(("lexical", "lexical", cfg.lexical_weight, ranked))
            if len(ranked) < cfg.lexical_limit and _lexical_plan(terms, common) != _lexical_plan(
                all_terms, common
            ):
                # Turns that match only through a speaker's name widen the pool as a list
                # of their own, fused at ``speaker_match_weight``: in a conversation the
                # name is mostly in greetings and replies addressed to that speaker.
                seen = {rid for rid, _ in ranked}
                extra = [
                    (r, sc)
                    for r, sc in self._lexical(scope, all_terms, now, common, only is not None)
                    if r not in seen
                ][: cfg.lexical_limit - len(ranked)]
                weight = cfg.lexical_weight * cfg.speaker_match_weight
                stages.append(("lexical_speaker", "lexical", weight, extra))
            timings["lexical"] = (time.perf_counter() - t0) * 1000
        if cfg.entity:
            check_deadline("the entity stage")
            t0 = time.perf_counter()
            ranked = self._entity(scope, query, stats)
            timings["entity"] = (time.perf_counter() - t0) * 1000
            stages.append(("entity", "entity", cfg.entity_weight, ranked))
        if cfg.relation_path and asked:
            check_deadline("the relation path")
            t0 = time.perf_counter()
            ranked = self._relation(scope, asked, now, stats)
            timings["relation"] = (time.perf_counter() - t0) * 1000
            stages.append(("relation", "relation", cfg.relation_weight, ranked))
        if cfg.relation_path and named:
            check_deadline("the relation path")
            t0 = time.perf_counter()
            ranked = self._named(scope, named, query, now, stats, only is not None)
            if ranked:
                timings["relation_named"] = (time.perf_counter() - t0) * 1000
                stages.append(("relation_named", "relation", cfg.relation_weight, ranked))
        return stages

    def _fused_sync(
        self,
        scope: Principal,
        query: str,
        now: datetime,
        query_vector: list[float] | None,
        stages: list[_Stage],
        stats: tuple[int, frozenset[str]],
        timings: dict[str, float],
        counts: dict[str, int],
        limit: int,
        finish: bool,
    ) -> tuple[list[_Hit], dict[str, tuple[str, ...]]]:
        """The dense stage (given ``query_vector``), then fusion of every stage's list into
        hits with their rows, boosted, sorted and folded; then (``finish``) session
        neighbours and backfill."""
        cfg = self.config
        if query_vector is not None and self.embedder is not None:
            check_deadline("the dense stage")
            t0 = time.perf_counter()
            # Not lifecycle-filtered: a superseded or expired record's vector keeps its rank
            # here, and the row read below (scope and lifecycle filtered in SQL) drops it.
            # Deleted records have no vectors (the purge trigger removes them).
            ranked = dense_search(
                self.store,
                scope,
                self.embedder.model_id,
                query_vector,
                cfg.dense_limit,
                probe=cfg.dense_probe,
            )
            timings["dense"] = (time.perf_counter() - t0) * 1000
            stages = [*stages, ("dense", "dense", cfg.dense_weight, ranked)]
        check_deadline("fusion")
        base: dict[str, float] = {}
        # (path, the stage's ids): a hit's paths are looked up only for the rows read.
        found_by: list[tuple[str, set[str]]] = []
        for name, path, weight, ranked in stages:
            counts[name] = len(ranked)
            found_by.append((path, {rid for rid, _ in ranked}))
            if cfg.fusion == "rrf":
                # The plain loop of the hot default: weight / (rrf_k + rank), rank from 1.
                for rid, _, rank in _shared_ranks(ranked):
                    base[rid] = base.get(rid, 0.0) + weight / (cfg.rrf_k + rank)
                continue
            top = max((s for _, s in ranked), default=0.0)
            for rid, raw, rank in _shared_ranks(ranked):
                rrf = weight / (cfg.rrf_k + rank)
                rel = raw / top if top > 0 else 0.0
                if cfg.fusion == "weighted":
                    add = weight * rel
                else:  # "rrf_score": rank fusion, scaled by how close the raw score is to the top
                    add = rrf * (0.5 + 0.5 * rel)
                base[rid] = base.get(rid, 0.0) + add
        # Rows are read only for ids that can still reach the top ``keep``: boosts multiply
        # a score by at most ``bound``, so an id below (keep-th score) / bound never can.
        # Folding and repeat demotion may move hits down, so the cut is lowered until the
        # keep-th hit is out of reach of every unread id.
        order = sorted(base, key=lambda rid: (-base[rid], rid))
        keep = max(limit, cfg.rerank_top_n if cfg.rerank and self.reranker is not None else 0)
        words = {w.lower() for w in _WORD.findall(query)}
        names = stats[1] if cfg.speaker_boost > 0 else frozenset()
        # The speaker boost can only apply when the query names a speaker of the scope.
        speaker = cfg.speaker_boost if words & names or not cfg.entity_skip_speakers else 0.0
        bound = (1 + speaker) * (1 + cfg.recency_boost)
        if _asks_when(query):
            bound *= 1 + cfg.temporal_boost
        t0 = time.perf_counter()
        rows: dict[str, dict[str, Any]] = {}
        fetched, want = 0, keep
        while True:
            if want >= len(order):
                take = len(order)
            else:
                floor = base[order[want - 1]] / bound
                take = want
                while take < len(order) and base[order[take]] >= floor:
                    take += 1
            rows.update(self._rows(scope, now, order[fetched:take]))
            fetched = take
            hits = []
            for rid in order[:fetched]:
                if rid in rows:
                    hit = _Hit(row=rows[rid], score=base[rid])
                    hit.paths.update(path for path, ids in found_by if rid in ids)
                    hits.append(hit)
            self._boost(hits, query)
            ranked_hits = self._sort(hits)
            folded: dict[str, tuple[str, ...]] = {}
            if cfg.dedup:
                ranked_hits = self._dedup(ranked_hits)
                folded = {h.id: tuple(h.folded) for h in ranked_hits if h.folded}
            # Done when no unread id, boosted as far as it can be, would reach the top
            # ``keep`` (folding and repeat demotion can move the keep-th hit down).
            if fetched >= len(order) or (
                len(ranked_hits) >= keep
                and ranked_hits[keep - 1].score >= base[order[fetched]] * bound
            ):
                break
            want += keep
        timings["rows"] = (time.perf_counter() - t0) * 1000
        if finish:
            ranked_hits = self._after_fusion(scope, now, ranked_hits, limit, timings, query)
        return ranked_hits, folded

    def _rows(
        self, scope: Principal, now: datetime, ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """The live rows among ``ids`` (scope and lifecycle filtered in SQL), by id."""
        if not ids:
            return {}
        where, params = _live_filter(self.config, scope, now, by_id=True, dialect=self.dialect)
        out: dict[str, dict[str, Any]] = {}
        # Chunks stay under SQLite's bound-parameter limit on every build.
        for at in range(0, len(ids), 900):
            chunk = ids[at : at + 900]
            marks = ", ".join("?" for _ in chunk)
            for row in self.store.query(
                f"SELECT r.rowid AS rowid, {_columns('r')} FROM records r "
                f"WHERE {where} AND r.id IN ({marks})",
                [*params, *chunk],
            ):
                out[row["id"]] = row
        return out

    def _common_terms(self, terms: Sequence[str], scope: Principal | None) -> frozenset[str]:
        """The terms found in more than ``lexical_common_postings`` records: of ``scope``'s
        own (a shared store), else of the whole index.

        Asked of the store's dialect: on SQLite each term's FTS5 postings are read in rowid
        order, on PostgreSQL the rows of its GIN posting list, and the read stops one past
        the cap (no scoring); in a shared store other principals' rows never make a word
        common for this one.
        """
        cap = self.config.lexical_common_postings
        return self.dialect.common_terms(self.store, scope, terms, cap)

    def _lexical(
        self,
        scope: Principal,
        terms: Sequence[str],
        now: datetime,
        common: frozenset[str],
        shared: bool,
        only: tuple[str, Sequence[Any]] = ("", ()),
    ) -> list[tuple[str, float]]:
        """BM25 over the query's selective terms (see ``lexical_common_postings``), of the
        records ``only`` (a condition on alias ``r`` and its parameters) also selects.

        BM25 scores every record a term matches, so a term in a fifth of a large store costs
        tens of milliseconds while its weight (inverse document frequency) is small. When a
        selective term remains, common terms are left out of the MATCH; when every term is
        common, the newest ``lexical_common_postings`` in-scope matches are scored (FTS5
        walks postings newest first and stops there), so the cost is bounded either way.
        """
        selective, bounded = _lexical_plan(terms, common)
        if not selective:
            return []
        where, params = _live_filter(self.config, scope, now)
        if only[0]:
            where, params = f"{where} AND {only[0]}", [*params, *only[1]]
        # FTS5 BM25 on SQLite, BM25 over the tsvector column on PostgreSQL (_retrieval_sql).
        cfg = self.config
        return self.dialect.lexical(
            self.store,
            scope,
            selective,
            where,
            params,
            cfg.lexical_limit,
            newest=cfg.lexical_common_postings if bounded else None,
            scoped=shared,
        )

    def _entity(
        self, scope: Principal, query: str, stats: tuple[int, frozenset[str]]
    ) -> list[tuple[str, float]]:
        """Records naming the query's rarer capitalised-word entities, by summed IDF.

        ``stats`` is :meth:`_scope_stats` (which has brought the entity index up to date).
        """
        # The query's words, and a name that is also a function word ("What does Will do?").
        words = {w.lower() for w in _WORD.findall(query)}
        names = sorted((words - _STOPWORDS) | extract_entities(query))
        if not names:
            return []
        marks = ", ".join("?" for _ in names)
        df_rows = self.store.query(
            "SELECT entity, COUNT(*) AS df FROM retrieval_entities "
            f"WHERE tenant = ? AND principal = ? AND entity IN ({marks}) GROUP BY entity",
            [scope.tenant, scope.principal, *names],
        )
        if not df_rows:
            return []
        # Names the conversation's speakers carry are in nearly every turn's frame: they
        # say who talks, not what about, so the speaker stage (boost) handles them instead.
        total, speakers = stats
        cap = max(1.0, self.config.entity_max_share * max(1, total))
        df = {
            r["entity"]: int(r["df"])
            for r in df_rows
            if r["df"] <= cap and r["entity"] not in speakers
        }
        if not df:
            return []
        idf = {entity: math.log(1 + total / n) for entity, n in df.items()}
        # Rarest first while the postings fit; the rarest is always taken.
        keep: list[str] = []
        allowance = self.config.entity_postings
        for entity in sorted(idf, key=lambda e: (df[e], e)):
            if keep and df[entity] > allowance:
                break
            keep.append(entity)
            allowance -= df[entity]
        if len(keep) == 1:
            # One name: its records tie, so the stage keeps the newest ``entity_limit``
            # (the index's own order, backwards), and reads no more than those.
            limit = self.config.entity_limit
            weight = idf[keep[0]]
            rows = self.store.query_tuples(
                "SELECT record_id FROM retrieval_entities WHERE tenant = ? AND principal = ? "
                "AND entity = ? ORDER BY seq DESC LIMIT ?",
                [scope.tenant, scope.principal, keep[0], limit],
            )
            return [(str(rid), weight) for (rid,) in rows]
        keep.sort()
        marks = ", ".join("?" for _ in keep)
        # Postings only ("id:seq"), from the entity table's own key (no join, no sort: one
        # posting list per name, in key order, as one string), so the cost is the postings
        # of the query's names, not a records lookup or a row per posting. Entries of
        # deleted records are purged; a superseded or expired record keeps its rank here and
        # is dropped by the scope and lifecycle filtered row read after fusion.
        posting = self.dialect.group_concat("record_id || ':' || CAST(seq AS TEXT)")
        rows = self.store.query_tuples(
            f"SELECT entity, {posting} FROM retrieval_entities "
            f"WHERE tenant = ? AND principal = ? AND entity IN ({marks}) GROUP BY entity "
            "ORDER BY entity",
            [scope.tenant, scope.principal, *keep],
        )
        # Summed in name order, the same order for every record.
        summed: dict[str, float] = {}
        seqs: dict[str, int] = {}
        for entity, postings in rows:
            weight = idf[entity]
            for item in postings.split(" "):
                rid, _, seq = item.partition(":")
                summed[rid] = summed.get(rid, 0) + weight
                seqs[rid] = int(seq)
        # Equal sums keep the newest records at the limit.
        return heapq.nsmallest(
            self.config.entity_limit, summed.items(), key=lambda t: (-t[1], -seqs[t[0]])
        )

    def _relation(
        self,
        scope: Principal,
        asked: _Asked,
        now: datetime,
        stats: tuple[int, frozenset[str]],
    ) -> list[tuple[str, float]]:
        """The relation path: the people the query asks about by relation (``asked``: "my
        brother", "Mei's brother"), found by name.

        The newest ``relation_rows`` introductions of the same tie ("my brother Luis",
        "Luis, my brother") are read from the relation index (``stats`` is
        :meth:`_scope_stats`, which has brought it up to date); for a named owner, only
        those the owner said. The stage lists those introductions, then the records naming
        the people they introduce (the entity stage over their names), so a record that
        calls someone only by name reaches a question that calls them by relation.
        """
        words = sorted(frozenset().union(*(tie for _, tie in asked)))
        intros: list[str] = []
        names: set[str] = set()
        for rid, row, relation, name, own in self._introductions(scope, now, "relation", words):
            speaker = (row.get("speaker") or "").casefold()
            # "my brother Luis" by Mei, or "your brother Luis" said to her, is hers.
            tie = relation_tie(relation)
            if any(
                tie == asked_tie and (owner is None or (owner.casefold() == speaker) == bool(own))
                for owner, asked_tie in asked
            ):
                names.add(name)
                if rid not in intros:
                    intros.append(rid)
        if not names:
            return []
        named = [
            (rid, score)
            for rid, score in self._entity(scope, " ".join(sorted(names)), stats)
            if rid not in intros
        ]
        # The introductions lead, just above the best score of the records naming the people
        # (strictly above: equal scores would share a rank in fusion).
        top = math.nextafter(max((score for _, score in named), default=1.0), math.inf)
        return [(rid, top) for rid in intros] + named

    def _introductions(
        self, scope: Principal, now: datetime, by: Literal["relation", "name"], values: list[str]
    ) -> list[tuple[str, dict[str, Any], str, str, int]]:
        """The newest ``relation_rows`` introductions whose ``by`` column is one of
        ``values``, as (record id, the record's live row, relation, name, own), newest
        first; those of records no longer live are left out."""
        marks = ", ".join("?" for _ in values)
        found = self.store.query_tuples(
            "SELECT record_id, relation, name, own FROM retrieval_relations "
            f"WHERE tenant = ? AND principal = ? AND {by} IN ({marks}) "
            "ORDER BY seq DESC, relation, name, own LIMIT ?",
            [scope.tenant, scope.principal, *values, self.config.relation_rows],
        )
        rows = self._rows(scope, now, list(dict.fromkeys(str(rid) for rid, *_ in found)))
        return [
            (rid, rows[rid], relation, name, own)
            for rid, relation, name, own in found
            if rid in rows
        ]

    def _named(
        self,
        scope: Principal,
        named: frozenset[str],
        query: str,
        now: datetime,
        stats: tuple[int, frozenset[str]],
        shared: bool,
    ) -> list[tuple[str, float]]:
        """The relation path the other way: a person the query names ("What does Luis do
        now?") whom a record introduced by relation ("my brother Luis") also reaches what
        the owner says of them by relation only ("My brother got hired as a vet.").

        For each of the newest ``relation_rows`` introductions of a name in ``named``
        (:func:`people_named`; never a speaker's), the owner's records using a word of the
        tie are listed: by the introduction's speaker for "my brother Luis", by anyone else
        for "your brother Luis". Those sharing a word with the rest of the query come first
        (in BM25 order), then the others (the lexical stage's order for the tie's words).
        """
        total, speakers = stats
        names = sorted(named - speakers)
        if not names:
            return []
        found = self._introductions(scope, now, "name", names)
        if not found:
            return []
        terms = [t for t in query_terms(query) if t not in names and t not in speakers]
        scoped = scope if shared else None
        # Common words are read as the lexical stage reads them (the newest postings).
        topical = self._common_terms(terms, scoped)
        ranked: dict[str, float] = {}
        followed: set[tuple[frozenset[str], str | None, bool]] = set()
        for _, row, relation, _, own in found:
            said_by = row.get("speaker")
            tie = (relation_tie(relation), said_by, bool(own))
            if tie in followed or (not own and said_by is None):
                continue
            followed.add(tie)
            if own:
                whose = "r.speaker IS NULL" if said_by is None else "r.speaker = ?"
            else:
                whose = "r.speaker IS NOT NULL AND r.speaker <> ?"
            only = (whose, [] if said_by is None else [said_by])
            words = sorted(tie[0])
            tied = self._lexical(scope, words, now, self._common_terms(words, scoped), shared, only)
            if not tied:
                continue
            ids = {r for r, _ in tied}
            on_topic = self._lexical(scope, terms, now, topical, shared, only) if terms else []
            for r in [r for r, _ in on_topic if r in ids] + [r for r, _ in tied]:
                ranked.setdefault(r, float(total + 1 - len(ranked)))
        return list(ranked.items())

    def _scope_stats(self, scope: Principal) -> tuple[int, frozenset[str]]:
        """(records ever written in scope, lower-cased speaker name words), cached.

        Both change only when a record is written, so they are cached per store and scope
        under the entity watermark (the last indexed rowid) and brought up to date when it
        moves. Records are counted up to the watermark; when it has moved forward, only the
        records after the cached one are counted and added (records are never removed, a
        deleted one keeps its row), so the first search after a few writes reads those few
        rows, not the whole scope (4-9 ms at 100,000 records).
        """
        # Moves the watermark (a no-op when current) and returns it.
        mark = index_scope(self.store, scope)[1]
        key = (scope.tenant, scope.principal, self.config.entity_skip_speakers)
        cache = scope_stats(self.store)
        hit = cache.get(key)
        if hit is not None and hit[0] == mark:
            return hit[1], hit[2]
        since, total = (hit[0], hit[1]) if hit is not None and hit[0] < mark else (0, 0)
        total += int(
            self.store.query(
                "SELECT COUNT(*) AS n FROM records"
                + self.dialect.index_hint("records_scope_rowid")
                + " WHERE tenant = ? AND principal = ? AND rowid > ? AND rowid <= ?",
                [scope.tenant, scope.principal, since, mark],
            )[0]["n"]
        )
        speakers: frozenset[str] = frozenset()
        if self.config.entity_skip_speakers:
            names = self._speakers(scope)
            speakers = frozenset(w.lower() for name in names for w in _WORD.findall(name))
        cache[key] = (mark, total, speakers)
        return total, speakers

    def _speakers(self, scope: Principal) -> list[str]:
        """The scope's distinct speakers (a deleted record's speaker is erased, so it is not
        among them).

        Read as a skip scan of the speaker index: each step seeks the next speaker after
        the last, so the cost is a few index seeks per speaker, not a walk over every record
        of the scope (a plain DISTINCT read all 100,000 index entries of a large scope,
        6-20 ms, on each first search after a write). A scope with more than
        :data:`_SKIP_SCAN_SPEAKERS` speakers is read with the plain DISTINCT.
        """
        hint = self.dialect.index_hint("retrieval_records_speaker")
        step = (
            f"SELECT MIN(speaker) FROM records{hint} WHERE tenant = ? AND principal = ? "
            "AND speaker > {after}"
        )
        first, after = step.format(after="''"), step.format(after="found.speaker")
        args = [scope.tenant, scope.principal]
        rows = self.store.query_tuples(
            "WITH RECURSIVE found(speaker) AS ("
            f"SELECT ({first}) "
            f"UNION ALL SELECT ({after}) FROM found "
            "WHERE found.speaker IS NOT NULL) "
            "SELECT speaker FROM found WHERE speaker IS NOT NULL LIMIT ?",
            [*args, *args, _SKIP_SCAN_SPEAKERS + 1],
        )
        if len(rows) <= _SKIP_SCAN_SPEAKERS:
            return [str(name) for (name,) in rows]
        rows = self.store.query_tuples(
            f"SELECT DISTINCT speaker FROM records{hint} "
            "WHERE tenant = ? AND principal = ? AND speaker IS NOT NULL",
            args,
        )
        return [str(name) for (name,) in rows]

    def _boost(self, hits: list[_Hit], query: str) -> None:
        cfg = self.config
        words = {w.lower() for w in _WORD.findall(query)}
        if cfg.speaker_boost > 0:
            for h in hits:
                speaker = h.row["speaker"]
                if speaker and any(p.lower() in words for p in _WORD.findall(speaker)):
                    h.score *= 1 + cfg.speaker_boost
        if cfg.recency_boost > 0:
            current = [h for h in hits if h.row["kind"] in _CURRENT_STATE_KIND_VALUES]
            if current:
                newest = datetime.fromisoformat(max(h.when for h in current))
                for h in current:
                    age = (newest - datetime.fromisoformat(h.when)).total_seconds() / 86400
                    decay = 0.5 ** (age / cfg.recency_half_life_days)
                    h.score *= 1 + cfg.recency_boost * decay

    def _dedup(self, ranked: list[_Hit]) -> list[_Hit]:
        """Fold identical and near-identical text (word 3-gram Jaccard >= threshold).

        Each hit is compared only with kept hits that share a shingle (an inverted index),
        so the cost grows with the overlap, not with the square of the candidate count.
        A hit folds into the earliest kept match, in rank order, whose frame (speaker, day,
        state, tags) is the same, so a fold never loses who said it or when. Matched only
        by the same speaker in another frame (the same words on another day), it stays,
        its score times ``repeat_decay`` per better-ranked copy, and the list is re-sorted.
        """
        kept: list[_Hit] = []
        exact: dict[str, list[_Hit]] = {}
        kept_shingles: list[tuple[frozenset[tuple[str, ...]], _Hit]] = []
        postings: dict[tuple[str, ...], list[int]] = {}
        threshold = self.config.dedup_threshold
        repeat_decay = self.config.repeat_decay
        # Copies of a kept text its speaker said again in another frame, by kept hit id.
        repeats: dict[str, int] = {}
        for hit in ranked:
            words = [w.lower() for w in _WORD.findall(hit.row["text"])]
            key = " ".join(words)
            mine = _word_shingles(words) if threshold < 1.0 else frozenset()
            alike = exact.get(key, [])
            if mine and not any(_same_frame(a.row, hit.row) for a in alike):
                # Every kept match, earliest first (identical text is one of them).
                overlap: dict[int, int] = {}
                for shingle in mine:
                    for j in postings.get(shingle, ()):
                        overlap[j] = overlap.get(j, 0) + 1
                alike = []
                for j in sorted(overlap):
                    theirs, other = kept_shingles[j]
                    small, big = sorted((len(mine), len(theirs)))
                    if big and small / big < threshold:
                        continue
                    union = len(mine) + len(theirs) - overlap[j]
                    if union and overlap[j] / union >= threshold:
                        alike.append(other)
            into = next((a for a in alike if _same_frame(a.row, hit.row)), None)
            if into is not None:
                into.folded.append(hit.id)
                into.paths |= hit.paths
                continue
            said_before = next((a for a in alike if a.row["speaker"] == hit.row["speaker"]), None)
            if said_before is not None and repeat_decay < 1.0:
                copies = repeats.get(said_before.id, 0) + 1
                repeats[said_before.id] = copies
                hit.score *= repeat_decay**copies
            exact.setdefault(key, []).append(hit)
            if mine:
                for shingle in mine:
                    postings.setdefault(shingle, []).append(len(kept_shingles))
                kept_shingles.append((mine, hit))
            kept.append(hit)
        return self._sort(kept) if repeats else kept

    async def _rerank(self, query: str, hits: list[_Hit]) -> list[_Hit]:
        assert self.reranker is not None
        n = self.config.rerank_top_n
        head, tail = hits[:n], hits[n:]
        scores = await self.reranker.rerank(query, [h.row["text"] for h in head])
        if len(scores) != len(head):
            raise UsageError(
                f"reranker {self.reranker.model_id!r} returned {len(scores)} scores "
                f"for {len(head)} texts; it must return one per text"
            )
        # Reranked items keep the fused score scale: they take the head's scores in new order
        # (equal reranker scores keep the fused order), each strictly below the one before,
        # so that equal fused scores cannot hand the order back to the tie-break.
        fused = sorted((h.score for h in head), reverse=True)
        order = sorted(range(len(head)), key=lambda i: -scores[i])
        above = math.inf
        for slot, i in enumerate(order):
            head[i].score = above = min(fused[slot], math.nextafter(above, -math.inf))
            head[i].paths.add("rerank")
        return [head[i] for i in order] + tail

    def _expand_sessions(
        self, scope: Principal, now: datetime, hits: list[_Hit], limit: int, lift: float = 1.0
    ) -> list[_Hit]:
        """Score the turns around the top results from the triggers' decayed scores.

        A neighbour at distance d of a trigger gets trigger * decay**d. A found turn that
        asks a question passes ``reply_decay`` of its score to the next turn by another
        speaker: in a conversation the answer follows the question. In ``max`` mode a
        neighbour takes its best trigger's share and a turn another stage found keeps its
        own score; in ``sum`` mode every share adds up (found turns gain theirs times
        ``session_found_share``), so the turns inside a relevant exchange rise. Either way a
        found turn gains the ``session`` path.

        Ambient records are never added as neighbours: the session's ambient profile
        already carries them, and a neighbour is only a guess at relevance.
        Only the ``session_window`` turns on each side of a trigger are read, in one
        statement. Only neighbours that can still reach the top ``limit`` are read in full: one scoring
        below the ``limit``-th best score can never be returned, and when there are at least
        ``limit`` hits either way no backfill runs, so the result is unchanged.
        """
        cfg = self.config
        by_id = {h.id: h for h in hits}
        # A neighbour scores at most trigger * decay: a trigger whose best neighbour cannot
        # reach the ``limit``-th score adds nothing that is returned, so it is not read.
        scores = sorted((h.score for h in hits), reverse=True)
        floor = scores[limit - 1] if len(scores) >= limit else 0.0
        reach = max(cfg.session_decay, cfg.reply_decay)
        summed = cfg.session_mode == "sum"
        if summed:
            # Summed, a turn can gain from every trigger within the window on both sides:
            # at most trigger * (2 * sum of decay**d + the reply bonus) from a trigger's
            # score level. A trigger below the floor over that cannot lift a turn past the
            # ``limit``-th score on its own, so it is not read (shares of such weak triggers
            # that would add up are given up for a bounded read).
            reach = 2 * sum(cfg.session_decay**d for d in range(1, cfg.session_window + 1))
            reach += max(0.0, cfg.reply_decay - cfg.session_decay)
        # ``lift``: the most a later boost multiplies a neighbour's score by.
        triggers = [
            h
            for h in hits[: cfg.session_top_k]
            if h.row["session_id"] is not None and h.score * reach * lift >= floor
        ]
        triggers = self._sessions_that_matter(hits, triggers, floor, lift)
        if not triggers:
            return hits
        # Only the ``session_window`` live turns on each side of each trigger are read: one
        # statement of index range scans (the session index is ordered by rowid within a
        # session), so the cost does not grow with the session's length.
        window = cfg.session_window
        where, params = _live_filter(cfg, scope, now)
        side = (
            "(SELECT r.rowid AS rowid, r.id AS id, r.activation AS activation, "
            "r.speaker AS speaker FROM records r"
            + self.dialect.index_hint("retrieval_records_session")
            + " "
            f"WHERE {where} AND r.session_id = ? AND r.rowid {{op}} ? "
            "ORDER BY r.rowid {order} LIMIT ?)"
        )
        before = side.format(op="<", order="DESC")
        after = side.format(op=">", order="ASC")
        # neighbours[trigger id] = (turns before, nearest first; turns after, nearest first)
        neighbours: dict[str, tuple[list[str], list[str]]] = {}
        ambient: set[str] = set()
        speaker: dict[str, str | None] = {}
        for at in range(0, len(triggers), 25):
            chunk = triggers[at : at + 25]
            parts: list[str] = []
            args: list[Any] = []
            for t in chunk:
                for sql in (before, after):
                    parts.append(f"SELECT ? AS trig, ? AS side, * FROM {sql} AS w")
                    args += [t.id, sql is after, *params, t.row["session_id"], t.row["rowid"]]
                    args.append(window)
            for entry in self.store.query_tuples(" UNION ALL ".join(parts), args):
                trigger, after_side, _, rid, activation, who = entry
                lists = neighbours.setdefault(trigger, ([], []))
                lists[1 if after_side else 0].append(rid)
                speaker[rid] = who
                if activation == Activation.AMBIENT.value:
                    ambient.add(rid)
        inherited: dict[str, float] = {}
        gained: dict[str, float] = {}
        own = {h.id: h.score for h in triggers}
        for trigger in triggers:
            earlier, later = neighbours.get(trigger.id, ([], []))
            asks = "?" in trigger.row["text"]
            for d in range(1, window + 1):
                score = own[trigger.id] * cfg.session_decay**d
                for lst, next_turn in ((earlier, False), (later, d == 1)):
                    if d <= len(lst):
                        rid = lst[d - 1]
                        mine = score
                        if asks and next_turn and speaker.get(rid) != trigger.row["speaker"]:
                            mine = max(score, own[trigger.id] * cfg.reply_decay)
                        if rid in by_id:
                            by_id[rid].paths.add("session")
                            if summed:
                                gained[rid] = gained.get(rid, 0.0) + mine
                        elif rid in ambient:
                            continue
                        elif summed:
                            inherited[rid] = inherited.get(rid, 0.0) + mine
                        elif mine > inherited.get(rid, 0.0):
                            inherited[rid] = mine
        for rid, extra in gained.items():
            by_id[rid].score += extra * cfg.session_found_share
        if len(by_id) + len(inherited) > limit:
            scores = sorted([h.score for h in by_id.values()] + list(inherited.values()))
            floor = scores[-limit] / lift
            inherited = {rid: s for rid, s in inherited.items() if s >= floor}
        if inherited:
            for rid, row in sorted(self._rows(scope, now, sorted(inherited)).items()):
                hit = _Hit(row=row, score=inherited[rid])
                hit.paths.add("session")
                by_id[rid] = hit
        return list(by_id.values())

    def _sessions_that_matter(
        self, hits: list[_Hit], triggers: list[_Hit], floor: float, lift: float
    ) -> list[_Hit]:
        """The triggers of the sessions whose expansion can change the returned top ``limit``.

        A trigger passes at most ``max(session_decay, reply_decay)`` of its score to any one
        turn, once. So in a session, a turn no stage found scores at most that times the sum
        of the session's trigger scores, and a found turn gains at most
        ``session_found_share`` of what the session's other triggers pass (and gains the
        ``session`` path only when the session has another trigger). When neither, times
        ``lift``, can reach ``floor`` (the ``limit``-th score before expansion, which
        expansion only raises), nothing the session's windows hold can be returned or move
        the cut, so its windows are not read: the result is the same, the read smaller.
        """
        if floor <= 0.0:
            return triggers
        cfg = self.config
        per_turn = max(cfg.session_decay, cfg.reply_decay)
        share = cfg.session_found_share if cfg.session_mode == "sum" else 0.0
        # A margin for rounding: the bound is summed in another order than the scores.
        margin = 1 + 1e-9
        total: dict[str, float] = {}
        count: dict[str, int] = {}
        for t in triggers:
            total[t.row["session_id"]] = total.get(t.row["session_id"], 0.0) + t.score
            count[t.row["session_id"]] = count.get(t.row["session_id"], 0) + 1
        is_trigger = {t.id for t in triggers}
        matter = {s for s, sum_ in total.items() if sum_ * per_turn * lift * margin >= floor}
        for h in hits:
            session = h.row["session_id"]
            if session not in total or session in matter:
                continue
            if count[session] == (1 if h.id in is_trigger else 0):
                continue  # no other trigger: no window reaches this turn
            others = total[session] - (h.score if h.id in is_trigger else 0.0)
            if (h.score + share * others * per_turn) * lift * margin >= floor:
                matter.add(session)
        return [t for t in triggers if t.row["session_id"] in matter]

    def _backfill(
        self, scope: Principal, now: datetime, hits: list[_Hit], limit: int
    ) -> list[_Hit]:
        where, params = _live_filter(self.config, scope, now)
        rows = self.store.query(
            f"SELECT r.rowid AS rowid, {_columns('r')} FROM records r WHERE {where} "
            "ORDER BY COALESCE(r.event_time, r.created_at) DESC, r.id LIMIT ?",
            [*params, limit],
        )
        seen = {h.id for h in hits}
        out = list(hits)
        for row in rows:
            if len(out) >= limit:
                break
            if row["id"] in seen:
                continue
            hit = _Hit(row=row)
            hit.paths.add("backfill")
            out.append(hit)
        return out

    def _select(self, ranked: list[_Hit], limit: int, several: bool = False) -> list[_Hit]:
        """The top ``limit`` of ``ranked``, spread over sessions (``session_diversity``, or
        ``several_diversity`` when lower and the query asks for ``several`` things).

        Greedy: after the first ``session_diversity_after`` picks (by score alone), each pick
        is the hit with the best score after its session's discount, the score times
        ``session_diversity`` per hit of its session already picked; ties keep the order of
        ``ranked``. A hit's score becomes its discounted score, so the list
        stays best first. Hits without a session are never discounted.
        """
        factor = self.config.session_diversity
        if several:
            factor = min(factor, self.config.several_diversity)
        if factor >= 1.0 or limit <= 1:
            return ranked[:limit]
        picked: list[_Hit] = []
        taken: dict[str, int] = {}
        # (-discounted score, position, times discounted): scores only fall as picks are
        # made, so a popped entry whose discount is current is the best remaining.
        heap = [(-h.score, i, 0) for i, h in enumerate(ranked)]
        heapq.heapify(heap)
        while heap and len(picked) < limit:
            neg, i, seen = heapq.heappop(heap)
            hit = ranked[i]
            session = hit.row["session_id"]
            now_taken = taken.get(session, 0) if session is not None else 0
            if len(picked) < self.config.session_diversity_after:
                now_taken = seen  # the first picks go by score alone
            if now_taken != seen:
                heapq.heappush(heap, (-hit.score * factor**now_taken, i, now_taken))
                continue
            hit.score = -neg
            picked.append(hit)
            if session is not None:
                taken[session] = taken.get(session, 0) + 1
        return picked

    def _sort(self, hits: list[_Hit]) -> list[_Hit]:
        """Best first; equal scores newest first (event time when ``event_time_tie_break``,
        then write order), never by id: the order must not depend on how ids were drawn."""
        # One descending sort: every part of the key goes newest/best first.
        if self.config.event_time_tie_break:
            return sorted(hits, key=lambda h: (h.score, h.when, int(h.row["rowid"])), reverse=True)
        return sorted(hits, key=lambda h: (h.score, int(h.row["rowid"])), reverse=True)


#: Distinct speakers a scope's skip scan reads before it falls back to a plain DISTINCT
#: (a seek per speaker costs more than the scan once most records have their own speaker).
_SKIP_SCAN_SPEAKERS = 64


def _shared_ranks(ranked: Sequence[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """(id, raw score, rank from 1) for each entry of a stage's best-first list.

    Entries with equal raw scores share one rank, the mean of the places they fill: a
    stage that cannot tell records apart (every record naming the one name asked about,
    two copies of a text) gives each the same share in fusion, whatever order the store
    listed them in. Plain ranks would hand the ids the store happened to draw a ranking.
    """
    out: list[tuple[str, float, float]] = []
    start, n = 0, len(ranked)
    while start < n:
        raw = ranked[start][1]
        end = start + 1
        while end < n and ranked[end][1] == raw:
            end += 1
        rank = (start + 1 + end) / 2  # the mean of places start + 1 .. end
        out.extend((rid, score, rank) for rid, score in ranked[start:end])
        start = end
    return out


def _same_frame(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Fold only when nothing but the text would be lost: same speaker, date and state."""
    return (
        a["speaker"] == b["speaker"]
        and str(a["event_time"] or a["created_at"])[:10]
        == str(b["event_time"] or b["created_at"])[:10]
        and a["lifecycle"] == b["lifecycle"]
        and a["epistemic"] == b["epistemic"]
        and a["tags"] == b["tags"]
        and a["conflicts_with"] == "[]"
        and b["conflicts_with"] == "[]"
    )
