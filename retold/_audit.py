"""The turn-decision log, ``search_log``, offline labels and the reports over them (§6).

Rows hold identifiers, codes and timings, not record bodies: the canonical record and the
session turn already exist. The one exception is ``search_log.context`` (the raw turn),
which the spec keeps in the audit trail; like every bound string it passes the store's
redactor first. A turn's decision row and its ``search_log`` rows are written in one
transaction, after every model call of the turn has returned.

How the decision write stays off the turn's critical path (:class:`DecisionWriter`):

* a turn *hands over* its decision to the store's one writer thread and returns; the
  handover is an append to a bounded in-memory queue (microseconds, no lock, no SQL);
* the writer drains the queue in batches, each batch one ``BEGIN IMMEDIATE`` transaction
  (group commit: under a busy store a lock wait is paid once per batch, not per turn); a
  batch that fails is retried row by row, so one bad row cannot sink the others;
* a row is durable before the next turn of its session starts (``prepare_turn`` waits for
  it), on ``flush()``, on ``close()`` of the store, and before any read of this log;
* a failed write is loud: logged as ``turn_decision_write_failed`` (error level),
  counted in ``DecisionWriter.failed``, and raised as :class:`~retold.StoreError` by the
  next ``prepare_turn``, by ``flush()`` and by the store's ``close()``;
* when the queue is full (the database has not accepted a write for a long while) a turn
  waits for room, bounded by the store's busy timeout, and then raises: no row is dropped.

Every turn still writes exactly one decision row. ``total_ms`` is the true wall time of the
call (handover included); ``write_ms`` is the row's own wall time from handover to its
insertion, queueing and lock waits included.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from ._erasure_fence import erased_since, last_erasures
from ._errors import InvalidInputError, StoreError, store_rolled_back, store_unavailable
from ._policies import DecisionStatus, Disposition, FailureReason
from ._records import Principal, RowCounts
from ._store import Store, WriteTx, iso

if TYPE_CHECKING:
    from ._orchestrator import TurnMemoryDecision

__all__ = [
    "AuditLog",
    "AuditPrune",
    "DecisionReport",
    "DecisionWriter",
    "OfflineLabel",
    "percentile",
]

log = structlog.get_logger(__name__)

_AUDIT_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE turn_decision_configs (
        sha256 BLOB PRIMARY KEY,
        config TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE turn_decisions (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_index INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        disposition TEXT NOT NULL,
        shadow INTEGER NOT NULL,
        applied INTEGER NOT NULL,
        failure_stage TEXT,
        failure_reason TEXT,
        failure_detail TEXT,
        requested_budget_ms INTEGER,
        effective_budget_ms INTEGER,
        budget_permits_regeneration INTEGER,
        budget_reserve_ms REAL,
        regeneration_estimate_ms REAL,
        draft_ms REAL,
        gap_ms REAL,
        retrieval_ms REAL,
        admission_ms REAL,
        regeneration_ms REAL,
        total_ms REAL,
        added_ms REAL,
        stage_timeouts TEXT NOT NULL DEFAULT '{}',
        gap_status TEXT NOT NULL,
        admission_status TEXT NOT NULL,
        gap_count INTEGER NOT NULL,
        gaps TEXT NOT NULL DEFAULT '[]',
        search_ids TEXT NOT NULL DEFAULT '[]',
        ambient_ids TEXT NOT NULL DEFAULT '[]',
        candidate_ids TEXT NOT NULL DEFAULT '[]',
        admitted_ids TEXT NOT NULL DEFAULT '[]',
        verdicts TEXT NOT NULL DEFAULT '{}',
        gap_policy TEXT,
        admission_policy TEXT,
        serving_model TEXT,
        bundle_retrieval_verified INTEGER NOT NULL DEFAULT 0,
        config_sha256 BLOB NOT NULL REFERENCES turn_decision_configs (sha256),
        draft_sha256 BLOB,
        response_sha256 BLOB
    );
    CREATE INDEX turn_decisions_turn ON turn_decisions (tenant, principal, session_id, turn_index);
    CREATE INDEX turn_decisions_disposition ON turn_decisions (disposition);
    CREATE TABLE search_log (
        id TEXT PRIMARY KEY,
        decision_id TEXT REFERENCES turn_decisions (id),
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_index INTEGER NOT NULL,
        origin TEXT NOT NULL,
        gap_index INTEGER,
        category TEXT,
        query TEXT NOT NULL,
        context TEXT,
        result_ids TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL,
        elapsed_ms REAL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX search_log_decision ON search_log (decision_id);
    CREATE TABLE offline_labels (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        decision_id TEXT NOT NULL REFERENCES turn_decisions (id),
        subset TEXT NOT NULL,
        labeler_version TEXT NOT NULL,
        model_family TEXT NOT NULL,
        provenance TEXT NOT NULL,
        useful INTEGER NOT NULL,
        verdict TEXT NOT NULL DEFAULT '',
        weak INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL,
        UNIQUE (decision_id, subset, labeler_version, model_family, provenance)
    );
    """,
    # The decision write left the turn's critical path: its own wall time, recorded apart.
    """
    ALTER TABLE turn_decisions ADD COLUMN write_ms REAL;
    """,
    # Retention (AuditLog.prune) reads the oldest rows first.
    """
    CREATE INDEX turn_decisions_created ON turn_decisions (created_at);
    CREATE INDEX search_log_created ON search_log (created_at);
    """,
    # A principal's searches (erasure, export, one turn's searches) without a scan.
    """
    CREATE INDEX search_log_scope ON search_log (tenant, principal, session_id, turn_index);
    """,
    # The models the gap and admission policies called (§6), beside the serving model.
    """
    ALTER TABLE turn_decisions ADD COLUMN policy_model TEXT;
    """,
)

#: Decisions (with their searches and labels) one prune transaction deletes: the turn
#: path's decision writes wait for at most one such transaction, and the ids stay under
#: SQLite's bound-parameter limit on every build.
_PRUNE_BATCH = 900
#: The tables :meth:`AuditLog.prune` deletes from, as its counts name them.
PRUNED_TABLES = ("turn_decisions", "search_log", "offline_labels")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class OfflineLabel(BaseModel):
    """One offline utility label, keyed as §6 says.

    Attributes:
        decision_id: the turn decision it labels.
        subset: the candidate subset (record ids) the label is about; stored sorted.
        labeler_version / model_family / provenance: the rest of the key;
            ``provenance`` is e.g. ``hosted_judge``, ``deletion_test`` or ``hand_authored``.
        useful: whether giving the subset to the serving model improved the response.
        verdict: the labeler's raw verdict (``improved``, ``equivalent``, ...).
        weak: model-judged evidence rather than independent ground truth (production).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision_id: str = Field(min_length=1)
    subset: tuple[str, ...] = Field(min_length=1)
    labeler_version: str = Field(min_length=1, max_length=200)
    model_family: str = Field(min_length=1, max_length=200)
    provenance: str = Field(min_length=1, max_length=100)
    useful: bool
    verdict: str = Field(default="", max_length=100)
    weak: bool = True


class LatencySummary(BaseModel):
    """Added latency over the draft for one population of turns."""

    model_config = ConfigDict(frozen=True)

    turns: int
    p50_ms: float | None
    p95_ms: float | None


class AdmissionQuality(BaseModel):
    """Record-level admission precision and recall against offline labels."""

    model_config = ConfigDict(frozen=True)

    labeled_turns: int
    labeled_records: int
    precision: float | None
    recall: float | None


class DecisionReport(BaseModel):
    """Aggregates over the turn-decision log (``retold decisions report``).

    Attributes:
        turns / shadow_turns: decisions counted (shadow rows record what live would do).
        dispositions: count of every disposition (zeros included).
        injection_rate: share of turns whose disposition is ``regenerated``.
        added_latency: ``empty_gap`` and ``gap`` turns reported apart (§6); turns whose
            planner failed or was skipped belong to neither.
        budget_withhold_rate: share of ``admitted_not_applied`` turns; they are excluded
            from precision and recall.
        budget_exhausted: turns withheld for budget before admission completed.
        policy_failures: stage -> reason -> count (budget withholding excluded).
        admission: provenance -> precision/recall, only where offline labels exist.
        serving_models / policy_models: turns per model that wrote the answers, and per
            model the gap and admission policies called (``none``: no model), so a log
            spanning a change of model shows it.
    """

    model_config = ConfigDict(frozen=True)

    turns: int
    shadow_turns: int
    dispositions: dict[str, int]
    injection_rate: float | None
    added_latency: dict[str, LatencySummary]
    budget_withhold_rate: float | None
    budget_exhausted: int
    policy_failures: dict[str, dict[str, int]]
    admission: dict[str, AdmissionQuality]
    serving_models: dict[str, int] = Field(default_factory=dict)
    policy_models: dict[str, int] = Field(default_factory=dict)


SessionKey = tuple[str, str, str]

#: Decisions waiting for the writer before a turn has to wait for room.
_MAX_PENDING = 4096
#: Decisions written in one transaction at most.
_MAX_BATCH = 256
#: Times a batch the database rolled back (deadlock, serialization conflict) runs again.
_ROLLBACK_RETRIES = 2
#: Seconds the writer thread stays up with nothing to write (it restarts on demand).
_IDLE_S = 0.5
#: How often an idle writer looks at its queue: the most a row waits before its write starts.
_POLL_S = 0.002


def _session_key(d: TurnMemoryDecision) -> SessionKey:
    return (d.scope.tenant, d.scope.principal, d.session_id)


def writer_wait_s(store: Store) -> float:
    """The longest a wait for the decision writer may take: the store's lock wait (each
    write the writer makes is bounded by it), plus slack."""
    return store.busy_timeout_ms / 1000 + 5.0


class DecisionWriter:
    """The store's turn-decision writer: a bounded queue drained by one thread (see module doc).

    One per store (``AuditLog`` finds it with the store's ``shared``), so
    every orchestrator over a store shares its queue, order and failures. The thread is not
    a daemon: a process exiting normally writes what is queued first.

    Attributes:
        written / failed: rows written, and rows that could not be written, so far.
    """

    def __init__(self, store: Store, *, max_pending: int = _MAX_PENDING) -> None:
        self.store = store
        self.max_pending = max_pending
        self.written = 0
        self.failed = 0
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, TurnMemoryDecision, float]] = deque()
        self._sessions: Counter[SessionKey] = Counter()
        self._submitted = 0  # sequence number of the last handed-over decision
        self._done = 0  # every decision up to this sequence number is written or failed
        self._errors: list[tuple[str, BaseException]] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        # Configuration snapshots already stored: a turn row references its snapshot by
        # hash, so the (long) snapshot is written and redacted once, not on every turn.
        self._configs: set[bytes] = set()
        # Rows a caller writes in the same transaction as a decision (MemoryChat: the
        # turn's user row and reply), by sequence number. The flag says the principal was
        # erased after the turn began: write the rows without their words.
        self._also: dict[int, Callable[[WriteTx, bool], None]] = {}

    # -- the turn's side ------------------------------------------------------------------

    def submit(
        self,
        decision: TurnMemoryDecision,
        also: Callable[[WriteTx, bool], None] | None = None,
    ) -> int | None:
        """Hand ``decision`` over; returns its sequence number, or None when the queue is full.

        ``also(w, erased)`` writes more rows in the decision's own transaction (all or
        none); ``erased``: the principal was erased after the turn began, so the rows are
        to be written without their words.

        Raises:
            StoreError: the store is closed.
        """
        with self._cond:
            if self._closed:
                raise StoreError("the store is closed; the turn decision cannot be written")
            if len(self._queue) >= self.max_pending:
                return None
            self._submitted += 1
            self._queue.append((self._submitted, decision, time.monotonic()))
            if also is not None:
                self._also[self._submitted] = also
            self._sessions[_session_key(decision)] += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="retold-decision-writer", daemon=False
                )
                self._thread.start()
            # No notify: the writer polls (see _POLL_S), so the turn never pays for waking
            # another thread, and rows arriving together are committed together.
            return self._submitted

    def pending(self, key: SessionKey | None = None) -> int:
        """Rows handed over and not yet written (for one session, or in all)."""
        with self._cond:
            return self._sessions[key] if key is not None else self._submitted - self._done

    def wait_session(self, key: SessionKey, timeout: float | None) -> bool:
        """Block until the session's handed-over rows are written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._sessions[key] == 0, timeout)

    def wait_room(self, timeout: float) -> bool:
        """Block until the queue has room; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) < self.max_pending, timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """Block until every row handed over so far is written (or failed); False on timeout."""
        with self._cond:
            self._cond.notify_all()
            target = self._submitted
            return self._cond.wait_for(lambda: self._done >= target, timeout)

    def wait_for(self, seq: int, timeout: float | None = None) -> bool:
        """Block until the row with sequence number ``seq`` is written (or failed)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._done >= seq, timeout)

    def raise_failures(self, decision_id: str | None = None) -> None:
        """Raise the failed writes not raised yet (only ``decision_id``'s, when given).

        Raises:
            StoreError: naming how many rows were lost and the first cause.
        """
        with self._cond:
            if decision_id is None:
                failures, self._errors = self._errors, []
            else:
                failures = [e for e in self._errors if e[0] == decision_id]
                self._errors = [e for e in self._errors if e[0] != decision_id]
        if failures:
            first_id, cause = failures[0]
            raise StoreError(
                f"{len(failures)} turn-decision row(s) could not be written "
                f"(first: {first_id}: {type(cause).__name__}: {cause})"
            ) from cause

    def flush(self, timeout: float | None = None) -> None:
        """Make every handed-over row durable, then raise any failed write.

        Raises:
            StoreError: a row could not be written, or the writer did not finish in time.
        """
        if not self.drain(timeout):
            raise StoreError(f"turn-decision rows not written within {timeout} s")
        self.raise_failures()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then refuse further rows (the store calls this when it closes)."""
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    # -- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._cond:  # whatever ended the loop, the next submit starts a new thread
                if self._thread is threading.current_thread():
                    self._thread = None
                self._cond.notify_all()

    def _loop(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                if not self._queue:
                    if self._closed or time.monotonic() - idle_since > _IDLE_S:
                        self._thread = None  # idle or closed: the next submit starts one
                        self._cond.notify_all()
                        return
                    self._cond.wait(_POLL_S)  # woken early by close() and flush()
                    continue
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), _MAX_BATCH))]
            outcomes = self._write(batch)
            idle_since = time.monotonic()
            with self._cond:
                for (seq, d, _), error in zip(batch, outcomes, strict=True):
                    self._also.pop(seq, None)
                    self._sessions[_session_key(d)] -= 1
                    if self._sessions[_session_key(d)] <= 0:
                        del self._sessions[_session_key(d)]
                    if error is None:
                        self.written += 1
                    else:
                        self.failed += 1
                        self._errors.append((d.decision_id, error))
                    self._done = max(self._done, seq)
                self._cond.notify_all()

    def _write(
        self, batch: list[tuple[int, TurnMemoryDecision, float]]
    ) -> list[BaseException | None]:
        for attempt in range(1, _ROLLBACK_RETRIES + 2):
            try:
                self._write_rows(batch)
                return [None] * len(batch)
            except Exception as exc:
                # PostgreSQL chose this transaction to roll back (a deadlock, a serialization
                # conflict): nothing was wrong with it, so it runs again.
                if store_rolled_back(exc) and attempt <= _ROLLBACK_RETRIES:
                    continue
                # The store refused the transaction itself (a lock held past the busy
                # timeout, a lost connection, a full disk): every row would wait and fail
                # the same way on its own, so the batch fails once. Otherwise one row broke
                # it: find which.
                if len(batch) == 1 or store_unavailable(exc):
                    for item in batch:
                        self._report(item[1], exc)
                    return [exc] * len(batch)
                break
        outcomes: list[BaseException | None] = []
        for item in batch:  # the group failed: find the rows that cannot be written
            try:
                self._write_rows([item])
                outcomes.append(None)
            except Exception as exc:
                self._report(item[1], exc)
                outcomes.append(exc)
        return outcomes

    @staticmethod
    def _report(d: TurnMemoryDecision, exc: BaseException) -> None:
        log.error(
            "turn_decision_write_failed",
            decision_id=d.decision_id,
            session_id=d.session_id,
            turn_index=d.turn_index,
            error=type(exc).__name__,
        )

    def _write_rows(self, batch: Sequence[tuple[int, TurnMemoryDecision, float]]) -> None:
        new_configs: set[bytes] = set()
        with self.store.write() as w:
            erased = last_erasures(self.store, w, {d.scope for _, d, _ in batch})
            for seq, decision, handed_at in batch:
                row, config = _decision_row(decision, (time.monotonic() - handed_at) * 1000)
                searches = _search_rows(decision, row["created_at"])
                # A turn that began before its principal's erasure keeps the skeleton the
                # erasure leaves of older turns: no gap queries, no search text, no
                # transcript words (``also`` writes the turn's user row and reply, blank).
                forgotten = _turn_start(decision) < erased.get(decision.scope, "")
                if forgotten:
                    row["gaps"] = "[]"
                    searches = [{**s, "query": "", "context": None} for s in searches]
                    log.info("turn_after_erasure_scrubbed", decision_id=decision.decision_id)
                config_sha = row["config_sha256"]
                if config_sha not in self._configs and config_sha not in new_configs:
                    w.insert(
                        "turn_decision_configs",
                        {"sha256": config_sha, "config": config, "created_at": row["created_at"]},
                        or_ignore=True,
                    )
                    new_configs.add(config_sha)
                w.insert("turn_decisions", row)
                w.step("turn_decision")
                for search in searches:
                    w.insert("search_log", search)
                w.step("search_log")
                also = self._also.get(seq)
                if also is not None:
                    also(w, forgotten)
        self._configs |= new_configs
        for _, decision, _ in batch:
            log.debug("turn_decision_written", decision_id=decision.decision_id)


def _turn_start(decision: TurnMemoryDecision) -> str:
    """When the turn began (its decision's time less its wall time), as canonical text."""
    total_ms = decision.timings.total_ms or 0.0
    return iso(decision.created_at - timedelta(milliseconds=total_ms)) or ""


def _decision_row(decision: TurnMemoryDecision, write_ms: float) -> tuple[dict[str, Any], str]:
    """The ``turn_decisions`` row of ``decision`` and its configuration snapshot's JSON."""
    d = decision
    created = iso(d.created_at)
    timings = d.timings
    by_id = {v.record_id: v.reason.value for v in d.admission.verdicts} if d.admission else {}
    # Aligned with candidate_ids rather than keyed by id: ids are not written twice.
    verdicts = [by_id.get(i) for i in d.candidate_ids] if by_id else []
    config = json.dumps(d.config, sort_keys=True)
    # Digests are stored as BLOBs: they carry no text to redact, and skipping the
    # redactor for them keeps the write short.
    config_sha = hashlib.sha256(config.encode("utf-8")).digest()
    row: dict[str, Any] = {
        "id": d.decision_id,
        "tenant": d.scope.tenant,
        "principal": d.scope.principal,
        "session_id": d.session_id,
        "turn_index": d.turn_index,
        "created_at": created,
        "disposition": d.disposition.value,
        "shadow": int(d.shadow),
        "applied": int(d.applied),
        "failure_stage": d.failure.stage.value if d.failure else None,
        "failure_reason": d.failure.reason.value if d.failure else None,
        "failure_detail": d.failure.detail if d.failure else None,
        "requested_budget_ms": d.requested_budget_ms,
        "effective_budget_ms": d.effective_budget_ms,
        "budget_permits_regeneration": (
            None if d.budget_permits_regeneration is None else int(d.budget_permits_regeneration)
        ),
        "budget_reserve_ms": d.budget_reserve_ms,
        "regeneration_estimate_ms": d.regeneration_estimate_ms,
        "draft_ms": timings.draft_ms,
        "gap_ms": timings.gap_ms,
        "retrieval_ms": timings.retrieval_ms,
        "admission_ms": timings.admission_ms,
        "regeneration_ms": timings.regeneration_ms,
        "total_ms": timings.total_ms,
        "added_ms": timings.added_ms,
        "stage_timeouts": json.dumps(d.stage_timeouts_ms, sort_keys=True),
        "gap_status": d.gap_decision.status.value,
        "admission_status": (
            d.admission.status.value if d.admission else DecisionStatus.SKIPPED.value
        ),
        "gap_count": len(d.gap_decision.gaps),
        # A list, not JSON text: the writer redacts each query, then encodes (SR-1).
        "gaps": [{"category": g.category.value, "query": g.query} for g in d.gap_decision.gaps],
        "search_ids": json.dumps(list(d.search_ids)),
        "ambient_ids": json.dumps(list(d.profile_record_ids)),
        "candidate_ids": json.dumps(list(d.candidate_ids)),
        "admitted_ids": json.dumps(list(d.admitted_ids)),
        "verdicts": json.dumps(verdicts),
        "gap_policy": d.gap_policy_id,
        "admission_policy": d.admission_policy_id,
        "serving_model": d.serving_model,
        "policy_model": d.policy_model,
        "bundle_retrieval_verified": int(d.bundle_retrieval_verified),
        "config_sha256": config_sha,
        "draft_sha256": _digest(d.draft_sha256),
        "response_sha256": _digest(d.response_sha256),
        "write_ms": round(write_ms, 3),
    }
    return row, config


def _search_rows(d: TurnMemoryDecision, created: str | None) -> list[dict[str, Any]]:
    return [
        {
            "id": s.search_id,
            "decision_id": d.decision_id,
            "tenant": d.scope.tenant,
            "principal": d.scope.principal,
            "session_id": d.session_id,
            "turn_index": d.turn_index,
            "origin": "host",
            "gap_index": s.gap_index,
            "category": s.category.value,
            "query": s.query,
            "context": s.context,
            "result_ids": json.dumps(list(s.result_ids)),
            "status": s.status.value,
            "elapsed_ms": s.elapsed_ms,
            "created_at": created,
        }
        for s in d.searches
    ]


class AuditPrune(RowCounts):
    """What :meth:`AuditLog.prune` deleted, as row counts per table."""

    before: datetime
    tenant: str | None


class AuditLog:
    """Reads and writes the audit tables of one store (SQLite or PostgreSQL).

    Turn decisions go through the store's :class:`DecisionWriter` (``submit`` hands one
    over without waiting; ``write_decision`` waits for it). Every other method is blocking;
    async callers run them through ``anyio.to_thread.run_sync``. Reads first wait for the
    rows already handed over, so a reader sees every decision made before it asked.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_schema("audit", _AUDIT_MIGRATIONS)
        self.writer: DecisionWriter = store.shared(
            "retold.audit.decision_writer", lambda: DecisionWriter(store)
        )

    # -- writes -------------------------------------------------------------------------

    def submit(self, decision: TurnMemoryDecision) -> int | None:
        """Hand a turn decision to the writer without waiting (None: the queue is full)."""
        return self.writer.submit(decision)

    def write_decision(self, decision: TurnMemoryDecision) -> None:
        """Write a turn's decision row and its ``search_log`` rows, and wait until durable.

        Raises:
            StoreError: the database refused the write (nothing of the turn is written).
        """
        seq = self.writer.submit(decision)
        while seq is None:
            self.writer.wait_room(1.0)
            seq = self.writer.submit(decision)
        self.writer.wait_for(seq)
        self.writer.raise_failures(decision.decision_id)

    def flush(self, timeout: float | None = None) -> None:
        """Make every handed-over decision durable; raise any write that failed.

        Raises:
            StoreError: a decision row could not be written (also raised by the next
                ``prepare_turn`` and by the store's ``close()`` if not raised here).
        """
        self.writer.flush(timeout)

    def write_search(
        self,
        scope: Principal,
        *,
        session_id: str,
        turn_index: int,
        origin: str,
        query: str,
        result_ids: Sequence[str],
        elapsed_ms: float | None = None,
        context: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        """Log one retrieval that is not part of a turn decision (e.g. a model-issued
        ``memory_search``); returns its search id. Host-issued gap searches are written
        with their turn decision instead.

        ``started_at`` is when the work the search belongs to began (its turn, say): when
        the principal was erased after it, the row is written without its query and
        context, as the erasure leaves the rows it found.
        """
        search_id = "s" + uuid.uuid4().hex
        # The session's decisions handed over earlier are written first, so search_log
        # keeps the session's order.
        limit = writer_wait_s(self.store)
        self.writer.wait_session((scope.tenant, scope.principal, session_id), limit)
        with self.store.write() as w:
            if started_at is not None and erased_since(self.store, w, scope, started_at):
                query, context = "", None
                log.info("search_after_erasure_scrubbed", search_id=search_id)
            w.insert(
                "search_log",
                {
                    "id": search_id,
                    "decision_id": None,
                    "tenant": scope.tenant,
                    "principal": scope.principal,
                    "session_id": session_id,
                    "turn_index": turn_index,
                    "origin": origin,
                    "gap_index": None,
                    "category": None,
                    "query": query,
                    "context": context,
                    "result_ids": json.dumps(list(result_ids)),
                    "status": DecisionStatus.OK.value,
                    "elapsed_ms": elapsed_ms,
                    "created_at": iso(w.now),
                },
            )
        return search_id

    def search_rows_for_turn(
        self, scope: Principal, session_id: str, turn_index: int
    ) -> list[dict[str, Any]]:
        """Every ``search_log`` row of one turn (host-issued and model-issued), in write order."""
        self.writer.drain()
        rows = self.store.query(
            "SELECT * FROM search_log WHERE tenant = ? AND principal = ? AND session_id = ? "
            "AND turn_index = ? ORDER BY rowid",
            [scope.tenant, scope.principal, session_id, turn_index],
        )
        return [{**row, "result_ids": json.loads(row["result_ids"])} for row in rows]

    def add_label(self, label: OfflineLabel) -> bool:
        """Store one offline label; returns False when its key is already stored.

        Raises:
            InvalidInputError: no turn decision has ``label.decision_id``.
        """
        self.writer.drain()
        if not self.store.query("SELECT 1 FROM turn_decisions WHERE id = ?", [label.decision_id]):
            raise InvalidInputError("decision_id", f"no turn decision {label.decision_id!r}")
        with self.store.write() as w:
            written = w.insert(
                "offline_labels",
                {
                    "decision_id": label.decision_id,
                    "subset": json.dumps(sorted(set(label.subset))),
                    "labeler_version": label.labeler_version,
                    "model_family": label.model_family,
                    "provenance": label.provenance,
                    "useful": int(label.useful),
                    "verdict": label.verdict,
                    "weak": int(label.weak),
                    "created_at": iso(w.now),
                },
                or_ignore=True,
            )
        return written == 1

    def prune(self, before: datetime, *, tenant: str | None = None) -> AuditPrune:
        """Delete the audit rows logged before ``before``: turn decisions with their
        ``search_log`` rows and offline labels, and the searches logged apart from a
        decision (model-issued ``memory_search`` calls). ``tenant`` limits it to one
        tenant's rows.

        A retention policy for the audit trail: its searches keep the turn's text (the
        ``context`` column) and the gap queries. Records, the transcript, review items, the
        ``events`` log and the decision configs (settings shared by many decisions, no
        user text) are not touched. Rows go oldest first, in transactions of at most
        :data:`_PRUNE_BATCH` decisions, each whole (a decision never loses its searches
        without going itself), so turns keep writing their decisions meanwhile and a
        failure leaves every remaining row intact. Run ``vacuum`` afterwards for the
        deleted text to leave the database files.

        Raises:
            InvalidInputError: ``before`` has no time zone.
            StoreError: the store refused a statement (the batches before it stay pruned).
        """
        if before.tzinfo is None:
            raise InvalidInputError("before", "needs a time zone (e.g. UTC)")
        self.writer.drain()
        cutoff = iso(before)
        only, only_params = (" AND tenant = ?", [tenant]) if tenant is not None else ("", [])
        counts = dict.fromkeys(PRUNED_TABLES, 0)
        for table in ("turn_decisions", "search_log"):
            apart = " AND decision_id IS NULL" if table == "search_log" else ""
            while True:
                with self.store.write() as w:
                    ids = [
                        r["id"]
                        for r in w.query(
                            f"SELECT id FROM {table} WHERE created_at < ?{only}{apart} "
                            "ORDER BY created_at, id LIMIT ?",
                            [cutoff, *only_params, _PRUNE_BATCH],
                        )
                    ]
                    if not ids:
                        break
                    marks = ", ".join("?" for _ in ids)
                    if table == "turn_decisions":
                        for child in ("search_log", "offline_labels"):
                            counts[child] += int(
                                w.execute(
                                    f"DELETE FROM {child} WHERE decision_id IN ({marks})", ids
                                ).rowcount
                            )
                    counts[table] += int(
                        w.execute(f"DELETE FROM {table} WHERE id IN ({marks})", ids).rowcount
                    )
        log.info("audit_pruned", before=cutoff, tenant=tenant, **counts)
        return AuditPrune(before=before, tenant=tenant, counts=counts)

    # -- reads --------------------------------------------------------------------------

    def decision_rows(
        self,
        *,
        tenant: str | None = None,
        principal: str | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Turn-decision rows (JSON columns decoded), oldest first."""
        self.writer.drain()
        where, params = ["1 = 1"], []
        for column, value in (
            ("tenant", tenant),
            ("principal", principal),
            ("session_id", session_id),
        ):
            if value is not None:
                where.append(f"d.{column} = ?")
                params.append(value)
        rows = self.store.query(
            "SELECT d.*, c.config FROM turn_decisions d "
            "JOIN turn_decision_configs c ON c.sha256 = d.config_sha256 "
            f"WHERE {' AND '.join(where)} "
            "ORDER BY d.created_at, d.session_id, d.turn_index, d.id",
            params,
        )
        return [decode_decision_row(row) for row in rows]

    def search_rows(self, decision_id: str) -> list[dict[str, Any]]:
        """The ``search_log`` rows of one turn decision, in gap order."""
        self.writer.drain()
        rows = self.store.query(
            "SELECT * FROM search_log WHERE decision_id = ? ORDER BY gap_index", [decision_id]
        )
        return [{**row, "result_ids": json.loads(row["result_ids"])} for row in rows]

    def report(self, *, tenant: str | None = None) -> DecisionReport:
        """Aggregate the turn-decision log (and offline labels) into a report."""
        rows = self.decision_rows(tenant=tenant)
        labels = self._labels(tenant)
        return build_report(rows, labels)

    def _labels(self, tenant: str | None) -> list[dict[str, Any]]:
        sql = "SELECT l.* FROM offline_labels l JOIN turn_decisions d ON d.id = l.decision_id" + (
            " WHERE d.tenant = ?" if tenant is not None else ""
        )
        rows = self.store.query(sql, [tenant] if tenant is not None else [])
        return [{**row, "subset": json.loads(row["subset"])} for row in rows]


_JSON_COLUMNS = (
    "stage_timeouts",
    "gaps",
    "search_ids",
    "ambient_ids",
    "candidate_ids",
    "admitted_ids",
    "verdicts",
    "config",
)


def _digest(hex_digest: str | None) -> bytes | None:
    return None if hex_digest is None else bytes.fromhex(hex_digest)


def decode_decision_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with JSON decoded, digests as hex and ``verdicts`` as record id -> reason."""
    out = dict(row)
    for column in ("config_sha256", "draft_sha256", "response_sha256"):
        if isinstance(out[column], bytes):
            out[column] = out[column].hex()
    for column in _JSON_COLUMNS:
        out[column] = json.loads(out[column])
    out["verdicts"] = {
        record_id: reason
        for record_id, reason in zip(out["candidate_ids"], out["verdicts"], strict=False)
        if reason is not None
    }
    return out


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _latency(values: Iterable[float]) -> LatencySummary:
    vals = list(values)
    return LatencySummary(turns=len(vals), p50_ms=percentile(vals, 50), p95_ms=percentile(vals, 95))


def build_report(
    rows: Sequence[Mapping[str, Any]], labels: Sequence[Mapping[str, Any]]
) -> DecisionReport:
    """The report over decoded decision rows and label rows (pure; see :class:`AuditLog`)."""
    total = len(rows)
    dispositions = Counter(row["disposition"] for row in rows)
    empty_gap = [
        row["added_ms"]
        for row in rows
        if row["gap_status"] == DecisionStatus.OK and row["gap_count"] == 0
        if row["added_ms"] is not None
    ]
    gap = [row["added_ms"] for row in rows if row["gap_count"] > 0 if row["added_ms"] is not None]
    failures: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        reason = row["failure_reason"]
        if reason is not None and reason != FailureReason.BUDGET_EXHAUSTED:
            failures[row["failure_stage"]][reason] += 1
    withheld = dispositions[Disposition.ADMITTED_NOT_APPLIED.value]
    budget_exhausted = dispositions[Disposition.BASELINE_BUDGET_EXHAUSTED.value]
    return DecisionReport(
        turns=total,
        shadow_turns=sum(1 for row in rows if row["shadow"]),
        dispositions={d.value: dispositions[d.value] for d in Disposition},
        injection_rate=_rate(dispositions[Disposition.REGENERATED.value], total),
        added_latency={"empty_gap": _latency(empty_gap), "gap": _latency(gap)},
        budget_withhold_rate=_rate(withheld, total),
        budget_exhausted=budget_exhausted,
        policy_failures={
            stage: dict(sorted(counts.items())) for stage, counts in sorted(failures.items())
        },
        admission=_admission_quality(rows, labels),
        serving_models=_per_model(rows, "serving_model"),
        policy_models=_per_model(rows, "policy_model"),
    )


def _per_model(rows: Sequence[Mapping[str, Any]], column: str) -> dict[str, int]:
    """Turns per value of a model column (``none`` where no model was recorded)."""
    counts = Counter(row.get(column) or "none" for row in rows)
    return dict(sorted(counts.items()))


def _admission_quality(
    rows: Sequence[Mapping[str, Any]], labels: Sequence[Mapping[str, Any]]
) -> dict[str, AdmissionQuality]:
    """Record-level precision/recall per label provenance.

    A record is useful in a turn when some label of that provenance marks a subset holding
    it useful, and not useful when it is only in subsets marked not useful. Predictions are
    the admitted ids. ``admitted_not_applied`` turns are excluded (§6).
    """
    by_id = {
        row["id"]: row
        for row in rows
        if row["disposition"] != Disposition.ADMITTED_NOT_APPLIED.value
    }
    grouped: dict[str, dict[str, dict[str, bool]]] = defaultdict(lambda: defaultdict(dict))
    for label in labels:
        if label["decision_id"] not in by_id:
            continue
        per_record = grouped[label["provenance"]][label["decision_id"]]
        for record_id in label["subset"]:
            per_record[record_id] = per_record.get(record_id, False) or bool(label["useful"])
    out: dict[str, AdmissionQuality] = {}
    for provenance, decisions in sorted(grouped.items()):
        tp = predicted = useful = labeled = 0
        for decision_id, per_record in decisions.items():
            admitted = set(by_id[decision_id]["admitted_ids"])
            for record_id, is_useful in per_record.items():
                labeled += 1
                predicted += record_id in admitted
                useful += is_useful
                tp += is_useful and record_id in admitted
        out[provenance] = AdmissionQuality(
            labeled_turns=len(decisions),
            labeled_records=labeled,
            precision=_rate(tp, predicted),
            recall=_rate(tp, useful),
        )
    return out
