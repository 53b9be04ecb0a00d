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

The parts live in their own modules, each readable alone: the allowlist, event names and
review schema in ``_activation_schema``; the deterministic text rules in ``_activation_rules``;
eligibility and evidence verification in ``_activation_evidence``; the classifier contract and
the offline classifier in ``_activation_classifier``; withdrawal and contradiction in
``_activation_withdrawal``; the review queue in ``_activation_review``. This module holds the
policy that runs them in order.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import structlog
from pydantic import BaseModel, ConfigDict, ValidationError

from ._activation_classifier import ActivationClassifier, ActivationProposal, ActivationRequest
from ._activation_evidence import (
    VerifiedEvidence,
    check_eligibility,
    confirmed_evidence,
    unresolved_conflicts,
    verify_evidence,
)
from ._activation_review import ReviewQueue
from ._activation_schema import (
    ACTIVATION_CATEGORIES,
    EV_DECIDED,
    EV_EVIDENCE_REVOKED,
    EV_EVIDENCE_VERIFIED,
    EV_INELIGIBLE,
    ActivationDecision,
    _allowlist,
)
from ._activation_withdrawal import _direct_claim, _live_preference_candidates, _topic, _withdraws
from ._errors import InvalidInputError, UsageError
from ._records import (
    Activation,
    EvidenceRef,
    LifecycleState,
    Principal,
    Record,
    WriteOrigin,
)
from ._store import Store

__all__ = [
    "ActivationOutcome",
    "ActivationPolicy",
]

log = structlog.get_logger(__name__)


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


# -- the policy -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Prepared:
    scope: Principal
    record: Record
    evidence: VerifiedEvidence
    request: ActivationRequest


@dataclass(frozen=True, slots=True)
class _Failure:
    reason: str  # timeout, classifier_error, malformed, or a relay flag (role_label, ...)


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
        store: Store,
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
        prepared = _Prepared(scope=scope, record=record, evidence=evidence, request=request)
        if evidence.flags:
            # A role label or hidden characters in the evidence turn: a person decides, and
            # the classifier (which such wording could talk round) is not asked.
            return self._apply(prepared, _Failure(reason=evidence.flags[0]))
        return prepared

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
