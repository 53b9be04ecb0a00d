"""The serving gate: may this bundle serve live against this store?

The fitness harness writes its results here (:func:`write_fitness_record`) and the
orchestrator reads them before serving (:func:`require_fitness`). Both build on this
module; the orchestrator never imports the harness.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from ._errors import UnfittedBundleError
from ._store import Store, iso

__all__ = [
    "MINIMUM_CASES",
    "REVIEW_OWNER_ENV",
    "FitnessRecord",
    "GateResult",
    "insufficient_categories",
    "model_identity",
    "policy_model",
    "recorded_fitness",
    "require_fitness",
    "write_fitness_record",
]

Verdict = Literal["pass", "fail", "insufficient"]

#: The fewest cases per gated category a verdict may rest on. Below any of them the fitness
#: verdict is ``insufficient``, and no recorded result unlocks live serving, whatever its
#: gates say. ``ambient_preference`` counts the cases expected to become ambient.
MINIMUM_CASES: Mapping[str, int] = {
    "ordinary": 20,
    "conditional_fact": 20,
    "ambient_preference": 5,
    "safety": 10,
}

#: The environment variable naming who owns the activation review backlog (the host's
#: configuration; ``retold fitness --review-owner`` overrides it).
REVIEW_OWNER_ENV = "RETOLD_REVIEW_OWNER"


def model_identity(model: Any) -> str:
    """``provider:model`` for a chat model (``openai:llama3.1:8b``), what a fitness result
    measured with it is bound to; the model id alone when the model names no provider."""
    provider = getattr(model, "provider", "") or ""
    name = getattr(model, "model", None) or type(model).__name__
    return f"{provider}:{name}" if provider else str(name)


def _models(policies: Sequence[object]) -> dict[str, Any]:
    """The chat models the policies call, by :func:`model_identity` (sorted)."""
    found: dict[str, Any] = {}
    for policy in policies:
        model = getattr(policy, "model", None)
        if model is not None and callable(getattr(model, "complete", None)):
            found.setdefault(model_identity(model), model)
    return dict(sorted(found.items()))


def policy_model(*policies: object) -> str:
    """The models the given policies call (:func:`model_identity`, sorted and comma-joined),
    or ``""`` when none calls a model (the model-free bundles)."""
    return ",".join(_models(policies))


def insufficient_categories(counts: Mapping[str, int]) -> dict[str, int]:
    """The gated categories with fewer cases than :data:`MINIMUM_CASES` asks (name -> count)."""
    return {k: int(counts.get(k, 0)) for k, v in MINIMUM_CASES.items() if counts.get(k, 0) < v}


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
    cases: int = 0
    failure: str = ""
    """Why the gate failed, in words (empty when it passed)."""


class FitnessRecord(BaseModel):
    """A fitness result as recorded in a host's store (:func:`record_fitness`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    bundle: str
    bundle_sha256: str
    scenario_set_sha256: str
    verdict: Verdict
    gates: tuple[GateResult, ...]
    category_counts: dict[str, int] = Field(default_factory=dict)
    policy_model: str = ""
    """The model the bundle's policies called (:func:`policy_model`); empty for a
    model-free bundle. A result unlocks serving only with the same policy model."""
    harness_version: str
    created_at: datetime

    @property
    def passed(self) -> bool:
        """A passing verdict measured on at least :data:`MINIMUM_CASES` per category."""
        return self.verdict == "pass" and not insufficient_categories(self.category_counts)


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
    # v2: the 'insufficient' verdict and the per-category case counts a pass rests on.
    # Results recorded before it carry no counts, so they no longer unlock serving.
    """
    CREATE TABLE fitness_results_v2 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        bundle TEXT NOT NULL,
        bundle_sha256 TEXT NOT NULL,
        scenario_set_sha256 TEXT NOT NULL,
        verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail', 'insufficient')),
        gates TEXT NOT NULL,
        category_counts TEXT NOT NULL DEFAULT '{}',
        result TEXT NOT NULL,
        harness_version TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    INSERT INTO fitness_results_v2
        (id, bundle, bundle_sha256, scenario_set_sha256, verdict, gates, result,
         harness_version, created_at)
        SELECT id, bundle, bundle_sha256, scenario_set_sha256, verdict, gates, result,
               harness_version, created_at
        FROM fitness_results;
    DROP TABLE fitness_results;
    ALTER TABLE fitness_results_v2 RENAME TO fitness_results;
    CREATE INDEX fitness_results_bundle ON fitness_results (bundle_sha256, id);
    """,
    # v3: the policy model a result was measured with. A model-backed bundle's earlier
    # results say none, so they no longer unlock serving; model-free bundles' still do.
    """
    ALTER TABLE fitness_results ADD COLUMN policy_model TEXT NOT NULL DEFAULT '';
    """,
)


def _ensure_schema(store: Store) -> None:
    store.ensure_schema("fitness", _MIGRATIONS)


def _row_to_record(row: Mapping[str, Any]) -> FitnessRecord:
    return FitnessRecord(
        id=int(row["id"]),
        bundle=str(row["bundle"]),
        bundle_sha256=str(row["bundle_sha256"]),
        scenario_set_sha256=str(row["scenario_set_sha256"]),
        verdict=row["verdict"],
        gates=tuple(GateResult.model_validate(g) for g in json.loads(row["gates"])),
        category_counts=json.loads(row["category_counts"] or "{}"),
        policy_model=str(row["policy_model"]),
        harness_version=str(row["harness_version"]),
        created_at=datetime.fromisoformat(str(row["created_at"])),
    )


def write_fitness_record(
    store: Store,
    *,
    bundle: str,
    bundle_sha256: str,
    scenario_set_sha256: str,
    verdict: Verdict,
    gates: Sequence[GateResult],
    category_counts: Mapping[str, int],
    result_json: str,
    harness_version: str,
    policy_model: str = "",
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
                "category_counts": json.dumps(dict(sorted(category_counts.items()))),
                "policy_model": policy_model,
                "result": result_json,
                "harness_version": harness_version,
                "created_at": iso(w.now),
            },
        )
        last = "lastval()" if store.dialect == "postgresql" else "last_insert_rowid()"
        row = w.query(f"SELECT * FROM fitness_results WHERE id = {last}")[0]
    return _row_to_record(row)


def recorded_fitness(
    store: Store, bundle_sha256: str, *, policy_model: str | None = None
) -> FitnessRecord | None:
    """The newest fitness result recorded for ``bundle_sha256``, or None.

    With ``policy_model`` (:func:`policy_model`; ``""`` for a model-free bundle), the newest
    measured with that policy model: a result earned with one model says nothing about
    another. A host serving a bundle checks ``recorded_fitness(store, sha,
    policy_model=...) is not None and .passed``: the newest result counts, so a later
    failing run withdraws an earlier pass.
    """
    _ensure_schema(store)
    sql = "SELECT * FROM fitness_results WHERE bundle_sha256 = ?"
    params: list[Any] = [bundle_sha256]
    if policy_model is not None:
        sql += " AND policy_model = ?"
        params.append(policy_model)
    rows = store.query(sql + " ORDER BY id DESC LIMIT 1", params)
    return _row_to_record(rows[0]) if rows else None


def _suggested_owner() -> str:
    """Who the printed command names as review owner: the host's ``RETOLD_REVIEW_OWNER``,
    else the account the host runs as."""
    owner = os.environ.get(REVIEW_OWNER_ENV, "").strip()
    if owner:
        return owner
    try:
        return getpass.getuser() or "memory-team"
    except (OSError, KeyError):  # no login name in this environment
        return "memory-team"


def fitness_command(
    store: Store, bundle_name: str | None, models: Sequence[Any] = ()
) -> str | None:
    """The ``retold fitness`` command that records a result for this bundle in ``store``,
    measured with ``models`` (the policies' model, named by the ``RETOLD_*`` variables the
    command reads; its key is never printed).

    None when it cannot be printed so that it works as printed: an in-memory store, a
    bundle without a registry name, or policies calling more than one model.
    """
    if not bundle_name or store.location is None or len(models) > 1:
        return None
    parts = [*(_model_env(m) for m in models)]
    parts += [
        "retold fitness",
        f"--bundle {shlex.quote(bundle_name)}",
        f"--db {shlex.quote(store.location)}",
        "--record",
        f"--review-owner {shlex.quote(_suggested_owner())}",
    ]
    return " ".join(parts)


def _model_env(model: Any) -> str:
    """The variables ``retold fitness`` builds ``model`` from (``adapters.from_env``)."""
    parts = []
    provider = getattr(model, "provider", "")
    if provider:
        parts.append(f"RETOLD_PROVIDER={shlex.quote(provider)}")
    base = getattr(model, "base_url", None)
    if isinstance(base, str) and base:
        # Scheme, host, port and path only: credentials or a query never reach a message.
        url = urlsplit(base)
        host = url.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if url.port is not None:
            netloc += f":{url.port}"
        parts.append(f"RETOLD_BASE_URL={shlex.quote(f'{url.scheme}://{netloc}{url.path}')}")
    parts.append(f"RETOLD_MODEL={shlex.quote(str(getattr(model, 'model', '')))}")
    return " ".join(parts)


def _why(record: FitnessRecord | None, policy_model: str) -> str:
    if record is None:
        if policy_model:
            return (
                "no fitness result measured with its policy model "
                f"({policy_model}) is recorded in this database"
            )
        return "no fitness result is recorded for it in this database"
    short = insufficient_categories(record.category_counts)
    if record.verdict == "insufficient" or (record.verdict == "pass" and short):
        counts = ", ".join(f"{k} {v} < {MINIMUM_CASES[k]}" for k, v in short.items())
        return (
            f"its newest fitness result (#{record.id}) was measured on too few cases "
            f"({counts or 'no per-category counts recorded'})"
        )
    failed = [f"{g.name} ({g.failure or 'failed'})" for g in record.gates if not g.passed]
    return f"its newest fitness result (#{record.id}) failed: " + "; ".join(failed or ["fail"])


def require_fitness(
    store: Store,
    bundle_sha: str,
    *,
    bundle_name: str | None = None,
    policies: Sequence[object] = (),
) -> None:
    """Refuse a bundle whose newest recorded fitness result, measured with the model its
    ``policies`` call (none for a model-free bundle), is missing, failing, or measured on
    fewer cases than :data:`MINIMUM_CASES` (§5).

    The error names the bundle and prints the command that records a result for it in this
    store (``--review-owner`` from ``RETOLD_REVIEW_OWNER``, else the host's login name).
    """
    models = _models(policies)
    identity = ",".join(models)
    record = recorded_fitness(store, bundle_sha, policy_model=identity)
    if record is not None and record.passed:
        return
    label = f"{bundle_name!r} ({bundle_sha[:12]})" if bundle_name else bundle_sha[:12]
    command = fitness_command(store, bundle_name, list(models.values()))
    if command is not None:
        key = "; set RETOLD_API_KEY too if the model's server needs a key" if models else ""
        how = (
            f"record a passing result in this database with:\n    {command}\n"
            "(--review-owner names who answers for the activation review backlog; "
            f"{REVIEW_OWNER_ENV} sets it for every command; the default scenario set is the "
            f"packaged test split{key}), "
        )
    elif len(models) > 1:
        how = (
            f"its policies call several models ({identity}) and `retold fitness` measures "
            "one: run retold._fitness.run_fitness with them and store the result with "
            "record_fitness(), "
        )
    elif not bundle_name:
        how = (
            "this bundle has no registry name, so `retold fitness` cannot load it: run "
            "retold._fitness.run_fitness on it and store the result with record_fitness(), "
        )
    else:
        how = (
            "this store is in memory, so a command cannot reach it: run "
            f"retold._fitness.run_fitness(load_bundle({bundle_name!r}), ...) and store the "
            "result in this store with record_fitness(), "
        )
    raise UnfittedBundleError(
        f"bundle {label} may not serve live: {_why(record, identity)}. To serve it, {how}"
        "or run it in shadow mode (shadow=True)"
    )
