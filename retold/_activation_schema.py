"""Activation vocabulary shared by its parts: the category allowlist, event names, the review schema."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from ._errors import UsageError
from ._records import EpistemicState, RecordKind
from ._store import Store

__all__ = [
    "ACTIVATION_CATEGORIES",
    "ActivationDecision",
    "ReviewResolution",
]

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
# The kinds that can carry a standing response preference of the principal: a preference,
# or a fact an extractor used for one. A relationship (another person, how they relate to
# the principal) never can, so it is ineligible before any classifier is called.
_ACTIVATABLE_KINDS = frozenset({RecordKind.FACT, RecordKind.PREFERENCE})
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
    # One principal's items (their review queue, erasure, export) without a scan.
    """
    CREATE INDEX activation_reviews_scope ON activation_reviews (tenant, principal, created_at);
    """,
)


def _ensure_schema(store: Store) -> None:
    store.ensure_schema("activation", _ACTIVATION_MIGRATIONS)


def _allowlist(categories: Collection[str]) -> tuple[str, ...]:
    extra = set(categories) - set(ACTIVATION_CATEGORIES)
    if extra:
        raise UsageError(
            f"activation categories {sorted(extra)} are not allowed; the allowlist is "
            f"{', '.join(ACTIVATION_CATEGORIES)} and can only be narrowed"
        )
    return tuple(c for c in ACTIVATION_CATEGORIES if c in set(categories))
