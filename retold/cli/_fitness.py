"""``retold fitness``: the acceptance gates of spec §8 on a scenario set.

Exit status 0 when the verdict is ``pass``, 1 when it is ``fail``, 2 on a usage error.
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
from ._common import add_json, emit, open_store

_DEFAULT_SCENARIOS = Path(__file__).resolve().parents[1] / "policy" / "scenarios"


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
        default=str(_DEFAULT_SCENARIOS),
        help="directory of scenario *.jsonl files (default: the packaged set)",
    )
    p.add_argument(
        "--bundle",
        required=True,
        help="policy bundle name (offline-reference: no model; reference: needs a model)",
    )
    p.add_argument("--db", help="the host's SQLite database (with --record)")
    p.add_argument(
        "--record", action="store_true", help="store the result in --db (fitness_results)"
    )
    p.add_argument("--report", help="write a markdown acceptance report to this file")
    p.add_argument(
        "--review-owner",
        help="owner of the activation review backlog (default: the bundle's; 'unassigned' fails)",
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
        raise UsageError("--record needs --db PATH (the host's store)")
    if args.db and not args.record:
        raise UsageError("--db is only used with --record")
    bundle = _fitness.load_bundle(args.bundle)
    model = _model_for(bundle)
    result = anyio.run(
        lambda: _fitness.run_fitness(
            bundle,
            args.scenarios,
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
    if result.responder == OfflineResponder.name:
        out.write("responder: deterministic local responder (offline; no model)\n")
    for g in result.gates:
        runs = ", ".join(f"{r} {v:g}" for r, v in g.runs.items())
        flag = "pass" if g.passed else "FAIL"
        out.write(f"  {flag:4}  {g.name}: {g.value:g} {g.comparator} {g.threshold:g}  ({runs})\n")
    if recorded is not None:
        out.write(f"recorded as fitness result #{recorded.id}\n")
    out.write(f"{result.elapsed_s:.1f}s\n")
