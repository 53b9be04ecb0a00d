"""The activation review queue: pending items, trusted resolution, backlog metrics."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict

from ._activation_evidence import check_eligibility, confirmed_evidence
from ._activation_schema import (
    ACTIVATION_CATEGORIES,
    EV_DECIDED,
    EV_REVIEWED,
    ActivationDecision,
    ReviewResolution,
    _allowlist,
    _ensure_schema,
)
from ._errors import InvalidInputError
from ._records import (
    Activation,
    EvidenceRef,
    Principal,
    Record,
    WriteOrigin,
    utc,
)
from ._store import Store, iso

__all__ = [
    "ReviewBacklog",
    "ReviewItem",
    "ReviewQueue",
]

log = structlog.get_logger(__name__)


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
        tenant: scope every operation to this tenant: :meth:`get`, :meth:`items`,
            :meth:`backlog` and :meth:`resolve` never see another tenant's items (an item
            of another tenant is "not found"). None is the operator's view across tenants,
            which the CLI only opens with an explicit ``--all-tenants``.
    """

    def __init__(
        self,
        store: Store,
        *,
        categories: Collection[str] = ACTIVATION_CATEGORIES,
        id_factory: Callable[[], str] | None = None,
        tenant: str | None = None,
    ) -> None:
        self.store = store
        self.tenant = tenant
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

    def _tenant(self, tenant: str | None) -> str | None:
        if self.tenant is not None and tenant is not None and tenant != self.tenant:
            raise InvalidInputError("tenant", "this queue is scoped to another tenant")
        return self.tenant if self.tenant is not None else tenant

    def get(self, review_id: str) -> ReviewItem | None:
        """The item with ``review_id`` in this queue's tenant (any tenant when unscoped)."""
        sql = f"SELECT {_REVIEW_COLUMNS} FROM activation_reviews WHERE id = ?"
        params = [review_id]
        if self.tenant is not None:
            sql += " AND tenant = ?"
            params.append(self.tenant)
        rows = self.store.query(sql, params)
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
        tenant = self._tenant(tenant)
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
        tenant = self._tenant(tenant)
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
        with self.store.write(tenant=scope.tenant) as w:
            claimed = w.execute(
                "UPDATE activation_reviews SET status = 'resolved', resolution = ?, applied = ?, "
                "resolution_reason = ?, category = ?, reviewer = ?, note = ?, resolved_at = ? "
                "WHERE id = ? AND tenant = ? AND status = 'pending'",
                [
                    decision,
                    int(applied),
                    why or None,
                    chosen,
                    reviewer,
                    note,
                    iso(w.now),
                    review_id,
                    scope.tenant,
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
