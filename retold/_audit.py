"""The turn-decision log, ``search_log``, offline labels and the reports over them (§6).

Rows hold identifiers, codes and timings, not record bodies: the canonical record and the
session turn already exist. The one exception is ``search_log.context`` (the raw turn),
which the spec keeps in the audit trail; like every bound string it passes the store's
redactor first. A turn's decision row and its ``search_log`` rows are written in one
transaction, after every model call of the turn has returned.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from ._errors import InvalidInputError, StoreError
from ._policies import DecisionStatus, Disposition, FailureReason
from ._records import Principal
from ._store import SQLiteStore, iso

if TYPE_CHECKING:
    from ._orchestrator import TurnMemoryDecision

__all__ = ["AuditLog", "DecisionReport", "OfflineLabel", "percentile"]

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
)


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


class AuditLog:
    """Reads and writes the audit tables of one :class:`SQLiteStore`.

    Every method is blocking; async callers run them through ``anyio.to_thread.run_sync``
    (the orchestrator does, without abandoning them, so a cancelled turn never leaves a
    half-written row or a held lock).
    """

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        store.ensure_schema("audit", _AUDIT_MIGRATIONS)
        # Configuration snapshots already stored: a turn row references its snapshot by
        # hash, so the (long) snapshot is written and redacted once, not on every turn.
        self._configs: set[bytes] = set()
        # Running write-latency estimate (RFC 6298 style), which orchestrators hold back
        # from positive latency budgets; approximate under concurrency, and that is fine.
        self._write_mean = 0.0
        self._write_dev = 0.0
        self._writes = 0

    # -- writes -------------------------------------------------------------------------

    def write_decision(self, decision: TurnMemoryDecision) -> None:
        """Write a turn's decision row and its ``search_log`` rows in one transaction.

        Raises:
            StoreError: the database refused the write (nothing of the turn is written).
        """
        d = decision
        created = iso(d.created_at)
        timings = d.timings
        by_id = {v.record_id: v.reason.value for v in d.admission.verdicts} if d.admission else {}
        # Aligned with candidate_ids rather than keyed by id: ids are not written twice.
        verdicts = [by_id.get(i) for i in d.candidate_ids] if by_id else []
        config = json.dumps(d.config, sort_keys=True)
        # Digests are stored as BLOBs: they carry no text to redact, and skipping the
        # redactor for them keeps the write (which is on the turn's critical path) short.
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
                None
                if d.budget_permits_regeneration is None
                else int(d.budget_permits_regeneration)
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
            "gaps": json.dumps(
                [{"category": g.category.value, "query": g.query} for g in d.gap_decision.gaps]
            ),
            "search_ids": json.dumps(list(d.search_ids)),
            "ambient_ids": json.dumps(list(d.profile_record_ids)),
            "candidate_ids": json.dumps(list(d.candidate_ids)),
            "admitted_ids": json.dumps(list(d.admitted_ids)),
            "verdicts": json.dumps(verdicts),
            "gap_policy": d.gap_policy_id,
            "admission_policy": d.admission_policy_id,
            "serving_model": d.serving_model,
            "bundle_retrieval_verified": int(d.bundle_retrieval_verified),
            "config_sha256": config_sha,
            "draft_sha256": _digest(d.draft_sha256),
            "response_sha256": _digest(d.response_sha256),
        }
        try:
            with self.store.write() as w:
                if config_sha not in self._configs:
                    w.insert(
                        "turn_decision_configs",
                        {"sha256": config_sha, "config": config, "created_at": created},
                        or_ignore=True,
                    )
                w.insert("turn_decisions", row)
                w.step("turn_decision")
                for s in d.searches:
                    w.insert(
                        "search_log",
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
                        },
                    )
                w.step("search_log")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write the turn decision: {exc}") from exc
        self._configs.add(config_sha)
        log.debug("turn_decision_written", decision_id=d.decision_id)

    def observe_write(self, elapsed_ms: float) -> None:
        """Feed one observed turn-decision write latency into the running estimate."""
        if self._writes == 0:
            self._write_mean, self._write_dev = elapsed_ms, elapsed_ms / 2
        else:
            self._write_dev += 0.25 * (abs(elapsed_ms - self._write_mean) - self._write_dev)
            self._write_mean += 0.125 * (elapsed_ms - self._write_mean)
        self._writes += 1

    def write_reserve_ms(self) -> float:
        """How long a turn-decision write is expected to take (mean + 4 deviations)."""
        return max(0.0, self._write_mean + 4 * self._write_dev) if self._writes else 0.0

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
    ) -> str:
        """Log one retrieval that is not part of a turn decision (e.g. a model-issued
        ``memory_search``); returns its search id. Host-issued gap searches are written
        with their turn decision instead.
        """
        search_id = "s" + uuid.uuid4().hex
        with self.store.write() as w:
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

    # -- reads --------------------------------------------------------------------------

    def decision_rows(
        self,
        *,
        tenant: str | None = None,
        principal: str | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Turn-decision rows (JSON columns decoded), oldest first."""
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
        return [_decode(row) for row in rows]

    def search_rows(self, decision_id: str) -> list[dict[str, Any]]:
        """The ``search_log`` rows of one turn decision, in gap order."""
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


def _decode(row: Mapping[str, Any]) -> dict[str, Any]:
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
    )


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
