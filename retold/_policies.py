"""Contracts of the utility-aware path: gap planning, candidate admission and their decisions.

A policy is pure over its inputs; the orchestrator does the I/O, the timing and the
validation. ``plan`` and ``admit`` may be plain or ``async`` methods: a plain one runs in a
worker thread that is abandoned (not waited on) when its stage times out, an ``async`` one
is cancelled.

Whatever a policy returns is re-validated by the orchestrator with these models
(``revalidate_instances="always"``), so a decision built with ``model_construct``, a dict
or any other shape that does not fit is a *malformed* decision and fails closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from enum import StrEnum
from typing import Annotated, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ._records import ProfileBlock, Record

__all__ = [
    "ADMITTING_REASONS",
    "AdmissionDecision",
    "AdmissionPolicy",
    "CandidateVerdict",
    "DecisionStatus",
    "Disposition",
    "FailureReason",
    "Gap",
    "GapCategory",
    "GapDecision",
    "GapPolicy",
    "ReasonCode",
    "Stage",
    "StageFailure",
]


class GapCategory(StrEnum):
    """What kind of user-specific information a gap asks for."""

    PREFERENCE = "preference"
    PRIOR_DECISION = "prior_decision"
    CONSTRAINT = "constraint"
    RELATIONSHIP_OR_EVENT = "relationship_or_event"
    TASK_STATE = "task_state"


class ReasonCode(StrEnum):
    """The one reason an admission policy gives for each candidate (§3.2)."""

    HELPFUL = "helpful"
    REDUNDANT = "redundant"
    INSUFFICIENT = "insufficient"
    STALE_OR_CONFLICTING = "stale_or_conflicting"
    POTENTIALLY_HARMFUL = "potentially_harmful"
    JOINTLY_HELPFUL = "jointly_helpful"


#: The reasons that admit a candidate; every other reason rejects it.
ADMITTING_REASONS = frozenset({ReasonCode.HELPFUL, ReasonCode.JOINTLY_HELPFUL})


class Disposition(StrEnum):
    """How a turn's final response came about."""

    BASELINE_NO_GAPS = "baseline_no_gaps"
    BASELINE_NO_CANDIDATES = "baseline_no_candidates"
    BASELINE_EMPTY_ADMISSION = "baseline_empty_admission"
    BASELINE_POLICY_FAILURE = "baseline_policy_failure"
    BASELINE_BUDGET_EXHAUSTED = "baseline_budget_exhausted"
    ADMITTED_NOT_APPLIED = "admitted_not_applied"
    REGENERATED = "regenerated"


class Stage(StrEnum):
    """A stage of the utility-aware path, as failures and timings name it."""

    DRAFT = "draft"
    GAP = "gap"
    RETRIEVAL = "retrieval"
    ADMISSION = "admission"
    REGENERATION = "regeneration"


class FailureReason(StrEnum):
    """Why a stage withheld conditional memory.

    ``budget_exhausted`` is a budget withholding, not a policy failure: reports count it
    apart, and a record withheld for it is not a rejected candidate.
    """

    TIMEOUT = "timeout"
    EXCEPTION = "exception"
    MALFORMED = "malformed"
    UNKNOWN_IDS = "unknown_ids"
    UNAVAILABLE = "unavailable"
    BUDGET_EXHAUSTED = "budget_exhausted"


class DecisionStatus(StrEnum):
    """Whether a policy stage produced a usable decision."""

    OK = "ok"
    SKIPPED = "skipped"
    FAILED = "failed"


class StageFailure(BaseModel):
    """The failure that ended a turn's conditional path (ids and codes, never bodies)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: Stage
    reason: FailureReason
    detail: str = Field(default="", max_length=500)


_Query = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]
_PolicyId = Annotated[str, StringConstraints(max_length=200)]


class Gap(BaseModel):
    """One missing piece of user-specific information and the query that looks for it."""

    model_config = ConfigDict(frozen=True, extra="forbid", revalidate_instances="always")

    category: GapCategory
    query: _Query


class GapDecision(BaseModel):
    """What a gap policy decided for one turn.

    Attributes:
        gaps: zero to three gaps; an empty tuple is a successful no-search decision.
        policy: the policy's identity (name and version); the orchestrator falls back to
            the policy object's ``policy_id`` when this is empty.
        status: ``ok`` from a policy; the orchestrator sets ``failed``/``skipped``.
        elapsed_ms: measured by the orchestrator (a policy's own value is replaced).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", revalidate_instances="always")

    gaps: tuple[Gap, ...] = Field(default=(), max_length=3)
    policy: _PolicyId = ""
    status: DecisionStatus = DecisionStatus.OK
    elapsed_ms: float | None = None


class CandidateVerdict(BaseModel):
    """The admission policy's reason code for one candidate."""

    model_config = ConfigDict(frozen=True, extra="forbid", revalidate_instances="always")

    record_id: str = Field(min_length=1, max_length=200)
    reason: ReasonCode


class AdmissionDecision(BaseModel):
    """What an admission policy decided over one bounded candidate set.

    Attributes:
        admitted: ids of the admitted records, in the order to render them; empty is EMPTY
            (the default when evidence is inconclusive).
        verdicts: exactly one verdict per candidate. A candidate is admitted exactly when
            its reason is ``helpful`` or ``jointly_helpful``; ``jointly_helpful`` needs at
            least one other admitted record.
        policy / status / elapsed_ms: as for :class:`GapDecision`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", revalidate_instances="always")

    admitted: tuple[str, ...] = ()
    verdicts: tuple[CandidateVerdict, ...] = ()
    policy: _PolicyId = ""
    status: DecisionStatus = DecisionStatus.OK
    elapsed_ms: float | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AdmissionDecision:
        if len(set(self.admitted)) != len(self.admitted):
            raise ValueError("admitted ids repeat")
        ids = [v.record_id for v in self.verdicts]
        if len(set(ids)) != len(ids):
            raise ValueError("a candidate has more than one verdict")
        by_id = {v.record_id: v.reason for v in self.verdicts}
        for record_id in self.admitted:
            if by_id.get(record_id) not in ADMITTING_REASONS:
                raise ValueError(f"admitted id {record_id!r} lacks a helpful verdict")
        for v in self.verdicts:
            if v.reason in ADMITTING_REASONS and v.record_id not in self.admitted:
                raise ValueError(f"{v.record_id!r} has an admitting verdict but is not admitted")
            if v.reason is ReasonCode.JOINTLY_HELPFUL and len(self.admitted) < 2:
                raise ValueError("jointly_helpful needs another admitted record")
        return self

    @property
    def is_empty(self) -> bool:
        """True when nothing was admitted (EMPTY)."""
        return not self.admitted


@runtime_checkable
class GapPolicy(Protocol):
    """Plans the user-specific information that could materially change the baseline answer.

    A conforming policy returns zero to three gaps, each with a category and a retrieval
    query; it sees the turn, the public context, the ambient profile and the content-free
    ``inventory`` of category labels the store holds for the principal, never record text.
    It may be synchronous or ``async``; it must not perform writes. Raising, timing out or
    returning anything that does not validate as a :class:`GapDecision` withholds
    conditional memory for the turn.
    """

    def plan(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        inventory: Sequence[str],
    ) -> GapDecision | Awaitable[GapDecision]: ...


@runtime_checkable
class AdmissionPolicy(Protocol):
    """Jointly admits a compact subset of the candidates against the baseline draft.

    A conforming policy receives the complete bounded candidate set in one call (already
    scope- and lifecycle-filtered), returns one verdict per candidate and may admit only
    ids it was given; EMPTY is always allowed and is the default when evidence is
    inconclusive. It may be synchronous or ``async``. Any failure withholds conditional
    memory for the turn.
    """

    def admit(
        self,
        turn: str,
        public_context: str | None,
        ambient_profile: ProfileBlock,
        draft: str,
        candidates: Sequence[Record],
    ) -> AdmissionDecision | Awaitable[AdmissionDecision]: ...
