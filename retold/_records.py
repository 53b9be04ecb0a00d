"""Records, scope and transcript turns: the data Retold stores."""

from __future__ import annotations

import functools
import hashlib
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ._errors import InvalidInputError
from ._redaction import find_secrets

__all__ = [
    "SEMANTIC_KINDS",
    "Activation",
    "Candidate",
    "EpistemicState",
    "Event",
    "EvidenceRef",
    "LifecycleState",
    "Principal",
    "ProfileBlock",
    "Record",
    "RecordDraft",
    "RecordKind",
    "Role",
    "SourceType",
    "TranscriptTurn",
    "WriteOrigin",
    "scope_id",
    "utc",
]


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive values are taken to be UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(utc)]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,199}$")
SCOPE_ID_MAX = 200
# Secret families that can be refused rather than hashed: an assignment such as
# "password:hunter2" may carry a low-entropy secret, which an unkeyed hash would not hide.
_REFUSED_FAMILIES = frozenset({"assigned_secret", "stated_password", "url_password"})


def _scope_id(value: str) -> str:
    """What a scope id (tenant, principal, session) is: a validated identifier.

    1-200 characters of letters, digits and ``. _ : @ -`` starting with a letter or digit,
    checked before anything else reads it (so a 1 MB id costs nothing). An id that looks
    like a token-shaped secret (a JWT, a ``ghp_`` token, an AWS key id, ...) is replaced by
    its pseudonym ``hashed-<sha256 prefix>``: the same pseudonym on every write, read and
    log line, so a JWT-shaped session id works like any other and is never stored. An id
    that carries an assigned secret (``password:...``) is refused.
    """
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if len(value) > SCOPE_ID_MAX or not _ID.match(value):
        raise ValueError(
            "must be 1-200 characters of letters, digits and . _ : @ -, starting with a letter or digit"
        )
    return _checked_scope_id(value)


@functools.lru_cache(maxsize=4096)
def _checked_scope_id(value: str) -> str:
    """The secret check of :func:`_scope_id`, remembered: the same few ids (a tenant, its
    principals, their sessions) are read back with every stored row, and scanning each for
    secrets again was a third of the cost of turning a row into a :class:`Record`."""
    families = {family for _s, _e, family in find_secrets(value)}
    if families & _REFUSED_FAMILIES:
        raise ValueError("looks like it carries a secret; use an opaque identifier")
    if families:
        digest = hashlib.sha256(b"retold-scope-id\0" + value.encode()).hexdigest()
        return f"hashed-{digest[:40]}"
    return value


def scope_id(field: str, value: object) -> str:
    """Validate one scope id at an API boundary (see :data:`ScopeId`).

    Raises:
        InvalidInputError: naming ``field``, when ``value`` is not a valid scope id.
    """
    try:
        return _scope_id(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidInputError(field, str(exc)) from None


ScopeId = Annotated[str, AfterValidator(_scope_id)]


class RecordKind(StrEnum):
    """What a record is about. Semantic kinds describe the principal; the rest are episodic."""

    FACT = "fact"
    PREFERENCE = "preference"
    RELATIONSHIP = "relationship"
    EVENT = "event"
    DECISION = "decision"
    PROCEDURE = "procedure"
    TASK = "task"
    MESSAGE = "message"
    SUMMARY = "summary"


SEMANTIC_KINDS = frozenset({RecordKind.FACT, RecordKind.PREFERENCE, RecordKind.RELATIONSHIP})


class Activation(StrEnum):
    """``ambient`` records shape every answer; ``conditional`` ones must pass admission."""

    AMBIENT = "ambient"
    CONDITIONAL = "conditional"


class LifecycleState(StrEnum):
    ACTIVE = "active"
    TENTATIVE = "tentative"
    SUPERSEDED = "superseded"
    DEPRECATED = "deprecated"
    ARCHIVED = "archived"
    DELETED = "deleted"


class EpistemicState(StrEnum):
    ASSERTED = "asserted"
    OBSERVED = "observed"
    INFERRED = "inferred"
    HYPOTHETICAL = "hypothetical"
    UNVERIFIED = "unverified"


class SourceType(StrEnum):
    USER_STATED = "user_stated"
    ASSISTANT = "assistant"
    TOOL_OUTPUT = "tool_output"
    EXTERNAL_DOCUMENT = "external_document"
    INFERRED = "inferred"


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class WriteOrigin(StrEnum):
    """Who is writing. Extraction and model tool calls may never set ambient activation."""

    HOST = "host"
    EXTRACTION = "extraction"
    TOOL_CALL = "tool_call"
    REVIEWER = "reviewer"
    ACTIVATION_POLICY = "activation_policy"


class Principal(BaseModel):
    """The trusted scope of every read and write: one principal inside one tenant.

    Build it from the host's authenticated context, never from a payload or model output.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: ScopeId
    principal: ScopeId


class EvidenceRef(BaseModel):
    """A pointer to a stored transcript turn that supports a record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: ScopeId
    turn_index: int = Field(ge=0)


def _clean_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Text = Annotated[str, Field(max_length=100_000), AfterValidator(_clean_text)]


class _Body(BaseModel):
    """Fields a writer may set on a record (shared by the draft and the stored record)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    kind: RecordKind = RecordKind.FACT
    activation: Activation = Activation.CONDITIONAL
    lifecycle: LifecycleState = LifecycleState.ACTIVE
    epistemic: EpistemicState = EpistemicState.ASSERTED
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    source_type: SourceType = SourceType.USER_STATED
    speaker: str | None = Field(default=None, max_length=200)
    event_time: UtcDatetime | None = None
    valid_from: UtcDatetime | None = None
    valid_to: UtcDatetime | None = None
    expires_at: UtcDatetime | None = None
    conflicts_with: tuple[str, ...] = ()
    evidence: tuple[EvidenceRef, ...] = ()
    attribute: str | None = Field(default=None, max_length=120)
    tags: tuple[str, ...] = ()
    session_id: ScopeId | None = None

    @model_validator(mode="after")
    def _window_is_ordered(self) -> _Body:
        if self.valid_from and self.valid_to and self.valid_to < self.valid_from:
            raise ValueError("valid_to must not be before valid_from")
        return self

    @field_validator("tags")
    @classmethod
    def _tags_are_sorted_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(value)))


class RecordDraft(_Body):
    """What a caller hands the store to write. Scope comes separately, from the caller.

    Attributes:
        supersedes: id of a record this one replaces; it is closed in the same transaction.
        idempotency_key: a write with a key already stored for the principal writes nothing
            and returns the stored record (a uniqueness constraint, not check-then-insert).
    """

    text: Text
    supersedes: str | None = None
    idempotency_key: str | None = Field(default=None, max_length=200)


class Record(_Body):
    """A stored memory record. Immutable; every change is a new write or a transition."""

    id: str
    tenant: str
    principal: str
    text: str  # empty once the record is deleted (text, speaker, tags and key are erased)
    superseded_by: str | None = None
    idempotency_key: str | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime

    @property
    def scope(self) -> Principal:
        return Principal(tenant=self.tenant, principal=self.principal)

    def is_live(self, now: datetime) -> bool:
        """Active, not superseded, not expired and inside its validity window at ``now``."""
        if self.lifecycle is not LifecycleState.ACTIVE or self.superseded_by:
            return False
        if self.expires_at is not None and self.expires_at <= now:
            return False
        return not (self.valid_to is not None and self.valid_to <= now)


class TranscriptTurn(BaseModel):
    """One persisted conversation turn; activation evidence is verified against these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: ScopeId
    turn_index: int = Field(ge=0)
    role: Role
    speaker: str | None = Field(default=None, max_length=200)
    text: str = Field(max_length=200_000)
    time: UtcDatetime

    @property
    def ref(self) -> EvidenceRef:
        return EvidenceRef(session_id=self.session_id, turn_index=self.turn_index)


class RowCounts(BaseModel):
    """Rows a bulk operation touched, per table (an erasure, a retention prune)."""

    model_config = ConfigDict(frozen=True)

    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class Event(BaseModel):
    """One row of the append-only audit log of record lifecycle and activation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    tenant: str
    principal: str
    record_id: str | None
    type: str
    actor: str
    time: UtcDatetime
    data: dict[str, Any]


class ProfileBlock(BaseModel):
    """A rendered ambient profile: the standing instructions of one session.

    Attributes:
        text: the rendered profile ("" when empty); byte-identical for a session.
        record_ids: the included records, in rendered order.
        token_count: tokens of ``text`` in ``unit``.
        token_budget / max_records: the bounds it was assembled under.
        excluded: record id -> reason for ambient records left out (budget, count, ...).
        session_id: the session the snapshot belongs to (None for an unsessioned build).
        assembled_at: when the snapshot was assembled.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = ""
    record_ids: tuple[str, ...] = ()
    token_count: int = 0
    token_budget: int = 0
    max_records: int = 0
    unit: str = "cl100k_base"
    excluded: dict[str, str] = Field(default_factory=dict)
    session_id: str | None = None
    assembled_at: UtcDatetime | None = None

    @classmethod
    def empty(cls) -> ProfileBlock:
        """The profile of a host that disabled it or of a principal with no ambient records."""
        return cls()


class Candidate(BaseModel):
    """A record retrieval proposes for one turn, with how it was found.

    Attributes:
        record: the scope- and lifecycle-filtered record.
        score: the fused retrieval score (higher is better); a feature, not a verdict.
        paths: the retrieval paths that found it ("lexical", "dense", "entity", ...).
        query: the query (a gap query for host-issued search) that surfaced it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    record: Record
    score: float
    paths: tuple[str, ...] = ()
    query: str = ""
