"""Store-backed activation checks: eligibility and host-verified evidence from the principal's own turns."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from ._activation_rules import (
    _about_principal,
    _is_principal_turn,
    confirms_standing,
    disowns,
    find_supporting_claim,
    framed_before,
    relay_flags,
)
from ._activation_schema import (
    _ACTIVATABLE_KINDS,
    _DIRECT_EPISTEMIC,
    _FALLBACK_TURNS,
    EV_EVIDENCE_REVOKED,
    EV_EVIDENCE_VERIFIED,
    _ensure_schema,
)
from ._records import (
    SEMANTIC_KINDS,
    EvidenceRef,
    LifecycleState,
    Principal,
    Record,
    Role,
    SourceType,
    TranscriptTurn,
)
from ._store import Store

__all__ = [
    "VerifiedEvidence",
    "check_eligibility",
    "confirmed_evidence",
    "unresolved_conflicts",
    "verify_evidence",
]


class VerifiedEvidence(BaseModel):
    """A host-verified supporting claim: a principal's own turn and the sentence in it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ref: EvidenceRef
    sentence_index: int
    claim: str
    matched: int
    of: int
    #: why the turn needs a person first (see :func:`relay_flags`); empty when it does not
    flags: tuple[str, ...] = ()


# -- store-backed checks ----------------------------------------------------------------


def _load(store: Store, scope: Principal, ids: Collection[str]) -> dict[str, Record]:
    found: dict[str, Record] = {}
    for rid in sorted(set(ids)):
        rec = store.get(scope, rid)
        if rec is not None:
            found[rid] = rec
    return found


def unresolved_conflicts(store: Store, scope: Principal, record: Record) -> list[str]:
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


def _latest_review_resolution(store: Store, scope: Principal, record_id: str) -> str | None:
    _ensure_schema(store)
    rows = store.query(
        "SELECT resolution FROM activation_reviews WHERE tenant = ? AND principal = ? "
        "AND record_id = ? AND status = 'resolved' ORDER BY resolved_at DESC, id DESC LIMIT 1",
        [scope.tenant, scope.principal, record_id],
    )
    return str(rows[0]["resolution"]) if rows else None


def check_eligibility(store: Store, scope: Principal, record: Record) -> list[str]:
    """Every failed eligibility check for ``record`` (empty when eligible), in a fixed order.

    The attribute slug is deliberately not consulted.
    """
    now = store.clock()
    reasons: list[str] = []
    if record.kind not in SEMANTIC_KINDS:
        reasons.append("not_semantic")
    elif record.kind not in _ACTIVATABLE_KINDS:
        reasons.append("not_activatable_kind")
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


def _candidate_turns(
    store: Store, scope: Principal, record: Record
) -> tuple[list[TranscriptTurn], dict[str, list[TranscriptTurn]]]:
    """Turns to search, in a fixed order: the cited turns, then their sessions and the
    record's session; with neither, the principal's latest user turns. Also returns the
    sessions read whole, by id."""
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
    whole = {session: store.turns(scope, session) for session in dict.fromkeys(sessions)}
    for turns in whole.values():
        for turn in turns:
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
    return out, whole


def _next_own_turn(
    scope: Principal, turn: TranscriptTurn, session_turns: Sequence[TranscriptTurn]
) -> TranscriptTurn | None:
    """The next user turn of the session (``session_turns``, all of them) after ``turn``,
    when the principal wrote it."""
    later = (t for t in session_turns if t.turn_index > turn.turn_index and t.role is Role.USER)
    following = next(later, None)
    return following if following is not None and _is_principal_turn(following, scope) else None


def verify_evidence(store: Store, scope: Principal, record: Record) -> VerifiedEvidence | None:
    """Find the principal's own turn that directly states ``record`` (None when there is none).

    Only user turns whose speaker is the principal (or unset) are searched; the record's
    cited evidence only decides where to look first. Read-only: nothing is written.
    """
    if not record.text:
        return None
    candidates, whole = _candidate_turns(store, scope, record)
    for turn in candidates:
        if not _is_principal_turn(turn, scope):
            continue
        # The session is usually read whole already; a fallback turn's is read here.
        session_turns = whole.get(turn.session_id)
        if session_turns is None:
            session_turns = store.turns(scope, turn.session_id)
        following = _next_own_turn(scope, turn, session_turns)
        if following is not None and disowns(following.text):
            continue
        # Asked, then said to stand when the assistant asked for how long ("Can you keep
        # your answers shorter?" ... "From now on, please."): the claim is both.
        confirmed = (
            following.text if following is not None and confirms_standing(following.text) else ""
        )
        match = find_supporting_claim(record.text, turn.text, confirmed=confirmed)
        if match is None:
            continue
        if not framed_before(scope, turn, session_turns, match):
            return VerifiedEvidence(
                ref=turn.ref,
                sentence_index=match.sentence_index,
                claim=match.sentence,
                matched=match.matched,
                of=match.of,
                flags=relay_flags(turn.text),
            )
    return None


def confirmed_evidence(
    store: Store, scope: Principal, records: Sequence[Record]
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
