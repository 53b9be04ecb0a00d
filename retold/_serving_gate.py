"""The serving gate: may this bundle serve live against this store?

The fitness harness writes its results here (:func:`write_fitness_record`) and the
orchestrator reads them before serving (:func:`require_fitness`). Both build on this
module; the orchestrator never imports the harness.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._errors import UnfittedBundleError
from ._store import SQLiteStore, iso

__all__ = [
    "FitnessRecord",
    "GateResult",
    "recorded_fitness",
    "require_fitness",
    "write_fitness_record",
]


class GateResult(BaseModel):
    """One acceptance gate: its worst value over the runs it applies to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: float
    threshold: float
    comparator: Literal["<=", ">=", "=="]
    passed: bool
    runs: dict[str, float] = Field(default_factory=dict)
    detail: str = ""


class FitnessRecord(BaseModel):
    """A fitness result as recorded in a host's store (:func:`record_fitness`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    bundle: str
    bundle_sha256: str
    scenario_set_sha256: str
    verdict: Literal["pass", "fail"]
    gates: tuple[GateResult, ...]
    harness_version: str
    created_at: datetime

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


_MIGRATIONS = (
    """
    CREATE TABLE fitness_results (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        bundle TEXT NOT NULL,
        bundle_sha256 TEXT NOT NULL,
        scenario_set_sha256 TEXT NOT NULL,
        verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail')),
        gates TEXT NOT NULL,
        result TEXT NOT NULL,
        harness_version TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX fitness_results_bundle ON fitness_results (bundle_sha256, id);
    """,
)


def _ensure_schema(store: SQLiteStore) -> None:
    store.ensure_schema("fitness", _MIGRATIONS)


def _row_to_record(row: Mapping[str, Any]) -> FitnessRecord:
    return FitnessRecord(
        id=int(row["id"]),
        bundle=str(row["bundle"]),
        bundle_sha256=str(row["bundle_sha256"]),
        scenario_set_sha256=str(row["scenario_set_sha256"]),
        verdict=row["verdict"],
        gates=tuple(GateResult.model_validate(g) for g in json.loads(row["gates"])),
        harness_version=str(row["harness_version"]),
        created_at=datetime.fromisoformat(str(row["created_at"])),
    )


def write_fitness_record(
    store: SQLiteStore,
    *,
    bundle: str,
    bundle_sha256: str,
    scenario_set_sha256: str,
    verdict: Literal["pass", "fail"],
    gates: Sequence[GateResult],
    result_json: str,
    harness_version: str,
) -> FitnessRecord:
    """Store one fitness verdict with every gate value; returns the stored record."""
    _ensure_schema(store)
    with store.write() as w:
        w.insert(
            "fitness_results",
            {
                "bundle": bundle,
                "bundle_sha256": bundle_sha256,
                "scenario_set_sha256": scenario_set_sha256,
                "verdict": verdict,
                "gates": json.dumps([g.model_dump(mode="json") for g in gates]),
                "result": result_json,
                "harness_version": harness_version,
                "created_at": iso(w.now),
            },
        )
        row = w.query("SELECT * FROM fitness_results WHERE id = last_insert_rowid()")[0]
    return _row_to_record(row)


def recorded_fitness(store: SQLiteStore, bundle_sha256: str) -> FitnessRecord | None:
    """The newest fitness result recorded for ``bundle_sha256``, or None.

    A host serving a bundle checks ``recorded_fitness(store, sha) is not None and
    .passed``: the newest result counts, so a later failing run withdraws an earlier pass.
    """
    _ensure_schema(store)
    rows = store.query(
        "SELECT * FROM fitness_results WHERE bundle_sha256 = ? ORDER BY id DESC LIMIT 1",
        [bundle_sha256],
    )
    return _row_to_record(rows[0]) if rows else None


def require_fitness(store: SQLiteStore, bundle_sha: str) -> None:
    """Refuse a bundle whose newest recorded fitness result is missing or failing (§5)."""
    record = recorded_fitness(store, bundle_sha)
    if record is None or not record.passed:
        state = (
            "no fitness result is" if record is None else "the newest fitness result failed and is"
        )
        raise UnfittedBundleError(
            f"bundle {bundle_sha[:12]}: {state} recorded in this store, so it may not serve; "
            "run `retold fitness --bundle NAME --db PATH --record` against this database, "
            "or run the bundle in shadow mode (shadow=True)"
        )
