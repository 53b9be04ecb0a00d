"""The ambient profile: the bounded, session-stable standing preferences of one principal.

A record is in a newly assembled profile only when all of these hold at assembly time:

* its activation is ``ambient`` (set only by the activation policy or a reviewer);
* it is active, not superseded and not expired (nor past its validity window);
* it is a semantic record (fact, preference, relationship) about the principal (its speaker
  is the principal or unset);
* it has no unresolved conflict (a live record linked to it in either direction);
* it is *confirmed* (:func:`retold.confirmed_evidence`): user-stated, asserted or
  observed, and its latest evidence event is ``record.activation_evidence_verified``
  naming a turn that still exists as the principal's own user turn.

Order is deterministic: category (accessibility, response_language, answer_style, other),
then newest first, then id. Records are added whole while the *complete* rendered text
stays within ``token_budget`` (counted with the same :class:`~retold.TokenCounter` rule
as the packer: the whole output, never a sum of parts) and the count within
``max_records``; a record that does not fit is skipped, never truncated. Each entry's text
is rendered with :func:`quote_text`, so a stored preference cannot start a line, forge a
section or pose as an instruction outside its quotes.

A session's profile is assembled on its first use and persisted, so every later turn of
that session, in this process or another worker on the same database, gets byte-identical
text until :meth:`ProfileAssembler.forget`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from pydantic import TypeAdapter, ValidationError

from ._activation_evidence import confirmed_evidence, unresolved_conflicts
from ._activation_rules import _about_principal
from ._activation_schema import ACTIVATION_CATEGORIES, EV_CHANGED
from ._erasure_fence import erased_since
from ._errors import InvalidInputError, UsageError
from ._records import (
    SEMANTIC_KINDS,
    Activation,
    LifecycleState,
    Principal,
    ProfileBlock,
    Record,
    ScopeId,
    utc,
)
from ._render import quote_text
from ._store import Store, iso
from ._tokens import TokenCounter, token_counter

__all__ = ["PROFILE_HEADER", "ProfileAssembler", "ProfileEntry", "render_profile"]

log = structlog.get_logger(__name__)

#: The first line of every non-empty profile.
PROFILE_HEADER = "Standing preferences the user stated (stored memory; each entry is quoted):"

_CATEGORY_ORDER = {"accessibility": 0, "response_language": 1, "answer_style": 2}
_SESSION_ID: TypeAdapter[str] = TypeAdapter(ScopeId)

_PROFILE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE profile_snapshots (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        text TEXT NOT NULL,
        record_ids TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        token_budget INTEGER NOT NULL,
        max_records INTEGER NOT NULL,
        unit TEXT NOT NULL,
        excluded TEXT NOT NULL,
        assembled_at TEXT NOT NULL,
        PRIMARY KEY (tenant, principal, session_id)
    );
    """,
)


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    """One profile line before rendering: a record id, its policy category and its text."""

    record_id: str
    category: str
    text: str


def _render(entries: Sequence[ProfileEntry]) -> str:
    if not entries:
        return ""
    lines = [PROFILE_HEADER]
    lines.extend(f"- {e.category}: {quote_text(e.text)}" for e in entries)
    return "\n".join(lines)


def render_profile(
    entries: Sequence[ProfileEntry],
    *,
    max_records: int,
    token_budget: int,
    counter: TokenCounter,
    finish: Callable[[str], str] | None = None,
) -> tuple[str, tuple[str, ...], int, dict[str, str]]:
    """Render ``entries`` in order within both budgets (pure).

    Each entry is tried whole: it is kept when the complete text with it (after ``finish``,
    e.g. redaction) is within ``token_budget`` and fewer than ``max_records`` are kept;
    otherwise it is skipped with the reason ``max_records`` or ``token_budget``.

    Returns:
        (text, included record ids, token count of text, excluded id -> reason).
    """
    done = finish or (lambda text: text)
    kept: list[ProfileEntry] = []
    excluded: dict[str, str] = {}
    for entry in entries:
        if len(kept) >= max_records:
            excluded[entry.record_id] = "max_records"
            continue
        trial = done(_render([*kept, entry]))
        if counter.count(trial) > token_budget:
            excluded[entry.record_id] = "token_budget"
            continue
        kept.append(entry)
    text = done(_render(kept))
    return text, tuple(e.record_id for e in kept), counter.count(text) if text else 0, excluded


class ProfileAssembler:
    """Builds ambient profiles and keeps one immutable snapshot per session.

    Args:
        store: the store holding records, events and the snapshot table.
        max_records: at most this many entries.
        token_budget: the complete rendered text never exceeds this many tokens.
        token_counter: the counter (default ``cl100k_base``, as the packer's default).
    """

    def __init__(
        self,
        store: Store,
        *,
        max_records: int = 8,
        token_budget: int = 400,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if max_records < 0:
            raise UsageError("max_records must be >= 0")
        if token_budget < 0:
            raise UsageError("token_budget must be >= 0")
        self.store = store
        self.max_records = max_records
        self.token_budget = token_budget
        self.counter = token_counter if token_counter is not None else _default_counter()
        store.ensure_schema("profile", _PROFILE_MIGRATIONS)

    # -- assembly -------------------------------------------------------------------

    def build(self, principal: Principal) -> ProfileBlock:
        """Assemble the profile from the store as it is now (no snapshot is read or written)."""
        scope = principal
        now = self.store.clock()
        ambient = self.store.list_records(
            scope,
            lifecycle=(LifecycleState.ACTIVE,),
            activation=Activation.AMBIENT,
            include_expired=True,
        )
        excluded: dict[str, str] = {}
        candidates: list[Record] = []
        for record in ambient:
            reason = self._exclusion(scope, record, now)
            if reason:
                excluded[record.id] = reason
            else:
                candidates.append(record)
        confirmed = confirmed_evidence(self.store, scope, candidates)
        for record in candidates:
            if record.id not in confirmed:
                excluded[record.id] = "not_confirmed"
        live = [r for r in candidates if r.id in confirmed]
        categories = self._categories(scope, [r.id for r in live])
        entries = [
            ProfileEntry(r.id, categories.get(r.id, "preference"), r.text)
            for r in sorted(
                live,
                key=lambda r: (
                    _CATEGORY_ORDER.get(categories.get(r.id, ""), len(_CATEGORY_ORDER)),
                    -r.created_at.timestamp(),
                    r.id,
                ),
            )
        ]
        text, ids, tokens, over = render_profile(
            entries,
            max_records=self.max_records,
            token_budget=self.token_budget,
            counter=self.counter,
            finish=self.store.redactor.redact,
        )
        excluded.update(over)
        log.debug("profile_assembled", tenant=scope.tenant, records=len(ids), tokens=tokens)
        return ProfileBlock(
            text=text,
            record_ids=ids,
            token_count=tokens,
            token_budget=self.token_budget,
            max_records=self.max_records,
            unit=self.counter.unit,
            excluded=dict(sorted(excluded.items())),
            assembled_at=now,
        )

    def _exclusion(self, scope: Principal, record: Record, now: datetime) -> str | None:
        if record.superseded_by:
            return "superseded"
        if not record.is_live(now):
            return "expired"
        if record.kind not in SEMANTIC_KINDS:
            return "not_semantic"
        if not _about_principal(record, scope):
            return "not_about_principal"
        if unresolved_conflicts(self.store, scope, record):
            return "unresolved_conflict"
        return None

    def _categories(self, scope: Principal, ids: Sequence[str]) -> dict[str, str]:
        """The category each record was promoted with (its latest change to ambient)."""
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = self.store.query(
            "SELECT record_id, data FROM events WHERE tenant = ? AND principal = ? AND type = ? "
            f"AND record_id IN ({marks}) ORDER BY id",
            [scope.tenant, scope.principal, EV_CHANGED, *ids],
        )
        out: dict[str, str] = {}
        for row in rows:
            data = json.loads(row["data"])
            if data.get("to") == Activation.AMBIENT.value:
                category = data.get("category")
                # Only the allowlisted names are ever rendered, whatever an event holds.
                out[row["record_id"]] = (
                    category if category in ACTIVATION_CATEGORIES else "preference"
                )
        return out

    # -- session snapshots ----------------------------------------------------------

    def for_session(self, principal: Principal, session_id: str) -> ProfileBlock:
        """The session's profile: assembled and persisted on first use, then returned as is.

        Concurrent first calls from several workers converge on one stored snapshot, and
        every call returns that row, so the text is byte-identical across workers. A profile
        assembled before the principal's erasure is not stored: it is assembled again.
        """
        session_id = _valid_session(session_id)
        stored = self.snapshot(principal, session_id)
        if stored is not None:
            return stored
        started = self.store.clock()
        block = self.build(principal)
        with self.store.write() as w:
            erased = erased_since(self.store, w, principal, started)
            written = not erased and w.insert(
                "profile_snapshots",
                {
                    "tenant": principal.tenant,
                    "principal": principal.principal,
                    "session_id": session_id,
                    "text": block.text,
                    "record_ids": json.dumps(list(block.record_ids)),
                    "token_count": block.token_count,
                    "token_budget": block.token_budget,
                    "max_records": block.max_records,
                    "unit": block.unit,
                    "excluded": json.dumps(block.excluded, sort_keys=True),
                    "assembled_at": iso(block.assembled_at),
                },
                or_ignore=True,
            )
        if erased:
            log.info("profile_after_erasure_reassembled", tenant=principal.tenant)
            return self.for_session(principal, session_id)
        if written:
            log.info(
                "profile_snapshot_created",
                tenant=principal.tenant,
                session_id=session_id,
                record_ids=list(block.record_ids),
            )
        stored = self.snapshot(principal, session_id)
        if stored is None:  # pragma: no cover - forgotten between our write and read
            return block.model_copy(update={"session_id": session_id})
        return stored

    def snapshot(self, principal: Principal, session_id: str) -> ProfileBlock | None:
        """The stored snapshot of ``session_id``, or None when the session has none (read-only)."""
        rows = self.store.query(
            "SELECT * FROM profile_snapshots WHERE tenant = ? AND principal = ? AND session_id = ?",
            [principal.tenant, principal.principal, session_id],
        )
        return _row_to_block(rows[0]) if rows else None

    def forget(self, principal: Principal, session_id: str) -> bool:
        """Drop the session's snapshot (call at session end); returns whether one existed.

        The next :meth:`for_session` for that id assembles a fresh profile.
        """
        with self.store.write() as w:
            gone = w.execute(
                "DELETE FROM profile_snapshots WHERE tenant = ? AND principal = ? "
                "AND session_id = ?",
                [principal.tenant, principal.principal, session_id],
            ).rowcount
        if gone:
            log.info("profile_snapshot_forgotten", tenant=principal.tenant, session_id=session_id)
        return bool(gone)


def _valid_session(session_id: str) -> str:
    try:
        return _SESSION_ID.validate_python(session_id)
    except ValidationError as exc:
        raise InvalidInputError("session_id", str(exc.errors()[0].get("msg", "invalid"))) from exc


def _row_to_block(row: dict[str, Any]) -> ProfileBlock:
    return ProfileBlock(
        text=row["text"],
        record_ids=tuple(json.loads(row["record_ids"])),
        token_count=int(row["token_count"]),
        token_budget=int(row["token_budget"]),
        max_records=int(row["max_records"]),
        unit=row["unit"],
        excluded=json.loads(row["excluded"]),
        session_id=row["session_id"],
        assembled_at=utc(datetime.fromisoformat(row["assembled_at"])),
    )


def _default_counter() -> TokenCounter:
    return token_counter("cl100k_base")
