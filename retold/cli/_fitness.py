"""``retold fitness``: the acceptance gates of spec §8 on a scenario set.

Exit status 0 when the verdict is ``pass``, 1 when it is ``fail`` or ``insufficient`` (too
few cases in a category to judge), 2 on a usage error. The default scenario set is the
packaged held-out ``test`` split; ``--scenarios`` chooses another directory (for example
``policies/scenarios/dev`` while developing a bundle).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from .. import _fitness
from .._errors import UsageError
from ..adapters.local import OfflineResponder
from ._common import DB_HELP, add_json, emit, open_store


def default_scenarios() -> Path:
    """The packaged held-out scenario split (``retold.policy``'s ``scenarios/test``)."""
    import retold.policy

    return Path(retold.policy.__file__).resolve().parent / "scenarios" / "test"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fitness",
        help="run the acceptance gates (spec §8) for a policy bundle on a scenario set",
        description=(
            "Replay every scenario through the bundle's pipeline twice (preferences ambient, "
            "then conditional) and check the acceptance gates. Exit 0 on pass, 1 on fail."
        ),
    )
    p.add_argument(
        "--scenarios",
        default=None,
        help="directory of scenario *.jsonl files (default: the packaged held-out test split; "
        "use policies/scenarios/dev while tuning)",
    )
    p.add_argument(
        "--bundle",
        required=True,
        help=(
            "policy bundle name (offline-reference and local: no model; reference: the "
            "model named by RETOLD_PROVIDER, RETOLD_BASE_URL, RETOLD_MODEL and "
            "RETOLD_API_KEY, which the recorded result is bound to)"
        ),
    )
    p.add_argument("--db", help=f"the host's store (with --record): {DB_HELP}")
    p.add_argument(
        "--record", action="store_true", help="store the result in --db (fitness_results)"
    )
    p.add_argument("--report", help="write a markdown acceptance report to this file")
    p.add_argument(
        "--review-owner",
        help="owner of the activation review backlog (default: $RETOLD_REVIEW_OWNER, else the "
        "bundle's; without one the review_backlog gate fails)",
    )
    p.add_argument(
        "--review-backlog-max",
        type=int,
        default=_fitness.DEFAULT_BACKLOG_BOUND,
        help="most pending review items the backlog gate allows (default %(default)s)",
    )
    add_json(p)
    p.set_defaults(handler=_run)


def _model_for(bundle: _fitness.FitnessBundle) -> Any:
    if bundle.offline:
        return None
    from ..adapters import from_env

    model = from_env()
    if model is None:
        raise UsageError(
            f"bundle {bundle.name!r} needs a model: set RETOLD_BASE_URL and RETOLD_MODEL "
            "(or use --bundle offline-reference)"
        )
    return model


def _run(args: argparse.Namespace) -> int:
    if args.record and not args.db:
        raise UsageError("--record needs --db PATH|URL (the host's store)")
    if args.db and not args.record:
        raise UsageError("--db is only used with --record")
    bundle = _fitness.load_bundle(args.bundle)
    model = _model_for(bundle)
    result = anyio.run(
        lambda: _fitness.run_fitness(
            bundle,
            args.scenarios or default_scenarios(),
            model=model,
            review_owner=args.review_owner,
            review_backlog_bound=args.review_backlog_max,
        )
    )
    recorded: _fitness.FitnessRecord | None = None
    if args.record:
        store = open_store(args)
        try:
            recorded = _fitness.record_fitness(store, result)
        finally:
            store.close()
    if args.report:
        Path(args.report).write_text(_fitness.render_report(result) + "\n", encoding="utf-8")
    if args.json:
        data = result.model_dump(mode="json")
        data["recorded_id"] = recorded.id if recorded is not None else None
        emit(data)
    else:
        _print_text(result, recorded)
    return 0 if result.passed else 1


def _print_text(result: _fitness.FitnessResult, recorded: _fitness.FitnessRecord | None) -> None:
    out = sys.stdout
    out.write(f"fitness {result.bundle} ({result.bundle_sha256[:12]}): {result.verdict.upper()}\n")
    out.write(f"scenario_set_sha256 {result.scenario_set_sha256}\n")
    out.write(
        "cases: "
        + ", ".join(
            f"{k} {v} (min {result.minimum_cases.get(k, 0)})"
            for k, v in result.category_counts.items()
        )
        + "\n"
    )
    if result.responder == OfflineResponder.name:
        out.write("responder: deterministic local responder (offline; no model)\n")
    for g in result.gates:
        runs = ", ".join(f"{r} {_show(g, v)}" for r, v in g.runs.items())
        flag = "pass" if g.passed else "FAIL"
        out.write(
            f"  {flag:4}  {g.name}: {_show(g, g.value)} {g.comparator} {_show(g, g.threshold)}"
            f"  ({runs}; {g.cases} cases)\n"
        )
        if not g.passed:
            out.write(f"        why: {g.failure}\n")
            for key, ids in _misses_for(result, g.name):
                shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
                out.write(f"        {key}: {shown}\n")
    for label, have in result.insufficient.items():
        out.write(
            f"  INSUFFICIENT  {label}: {have} cases, a verdict needs at least "
            f"{result.minimum_cases[label]}\n"
        )
    if recorded is not None:
        out.write(f"recorded as fitness result #{recorded.id}\n")
    out.write(f"{result.elapsed_s:.1f}s\n")


_MISS_KEYS = {
    "ordinary_injection_rate": ("ordinary_injected",),
    "conditional_fact_recall": (
        "conditional_not_applied",
        "conditional_evidence_missing",
        "conditional_stale_admitted",
        "conditional_unrelated_admitted",
    ),
    "ambient_preference_recall": ("ambient_missed",),
    "trigger_preference_promotions": ("trigger_promoted",),
    "withdrawn_preferences_in_force": ("withdrawn_in_force",),
    "unsafe_automatic_promotions": ("unsafe_promoted",),
}


def _misses_for(result: _fitness.FitnessResult, gate: str) -> list[tuple[str, list[str]]]:
    """The failing cases behind ``gate``, per run and reason."""
    out: list[tuple[str, list[str]]] = []
    for run, m in result.runs.items():
        for key in _MISS_KEYS.get(gate, ()):
            if m.misses.get(key):
                out.append((f"{run} {key}", m.misses[key]))
    return out


def _show(gate: _fitness.GateResult, value: float) -> str:
    if gate.name.endswith(("_rate", "_recall")):
        return f"{value * 100:.1f}%"
    return f"{value:g}"
