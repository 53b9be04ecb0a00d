"""``retold decisions``: reports over the turn-decision log, and its retention."""

from __future__ import annotations

import argparse
from typing import Any

from .._audit import PRUNED_TABLES, AuditLog, AuditPrune, DecisionReport, build_report
from ._common import (
    add_cutoff,
    add_db,
    add_json,
    add_tenant_scope,
    confirmed_cutoff,
    emit,
    emit_counts,
    open_store,
)


def register(sub: Any) -> None:
    decisions = sub.add_parser("decisions", help="report on the utility-aware turn decisions")
    dsub = decisions.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = dsub.add_parser(
        "report",
        help="dispositions, injection rate, added latency, budget withholding, failures",
    )
    add_db(report)
    add_tenant_scope(report, "turns")
    add_json(report)
    report.set_defaults(handler=_report)
    prune = dsub.add_parser(
        "prune",
        help="delete turn decisions, their searches and offline labels logged before a date",
    )
    add_db(prune)
    add_tenant_scope(prune, "audit rows")
    add_cutoff(prune, "rows logged")
    add_json(prune)
    prune.set_defaults(handler=_prune)


def _prune(args: argparse.Namespace) -> int:
    before = confirmed_cutoff(args, "pruning the audit rows logged")
    with open_store(args, must_exist=True) as store:
        if store.schema_version("audit") == 0:  # no turn was ever decided; create nothing
            none = dict.fromkeys(PRUNED_TABLES, 0)
            pruned = AuditPrune(before=before, tenant=args.tenant, counts=none)
        else:
            pruned = AuditLog(store).prune(before, tenant=args.tenant)
    emit_counts(args, pruned, f"pruned the audit rows logged before {before.isoformat()}")
    return 0


def _fmt(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.1f}{unit}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def render(report: DecisionReport) -> str:
    """The human-readable report."""
    lines = [f"turns: {report.turns} (shadow: {report.shadow_turns})"]
    for label, models in (
        ("serving models", report.serving_models),
        ("policy models", report.policy_models),
    ):
        if models:
            lines.append(f"{label}: " + ", ".join(f"{m} ({n})" for m, n in models.items()))
    lines.append("dispositions:")
    lines += [f"  {name}: {count}" for name, count in report.dispositions.items()]
    note = (
        " (shadow turns count what live serving would have injected)" if report.shadow_turns else ""
    )
    lines.append(f"conditional-memory injection rate: {_pct(report.injection_rate)}{note}")
    for population, summary in report.added_latency.items():
        lines.append(
            f"added latency, {population.replace('_', '-')} turns ({summary.turns}): "
            f"p50 {_fmt(summary.p50_ms, ' ms')}, p95 {_fmt(summary.p95_ms, ' ms')}"
        )
    lines.append(
        f"budget-withhold rate (admitted_not_applied): {_pct(report.budget_withhold_rate)}"
    )
    lines.append(f"withheld for budget before admission: {report.budget_exhausted}")
    if report.policy_failures:
        lines.append("policy failures:")
        for stage, reasons in report.policy_failures.items():
            lines += [f"  {stage}/{reason}: {n}" for reason, n in reasons.items()]
    else:
        lines.append("policy failures: none")
    if report.admission:
        lines.append("admission against offline labels (admitted_not_applied excluded):")
        for provenance, q in report.admission.items():
            lines.append(
                f"  {provenance}: precision {_pct(q.precision)}, recall {_pct(q.recall)} "
                f"({q.labeled_records} records in {q.labeled_turns} turns)"
            )
    else:
        lines.append("admission precision/recall: no offline labels")
    return "\n".join(lines)


def _report(args: argparse.Namespace) -> int:
    with open_store(args, must_exist=True) as store:
        if store.schema_version("audit") == 0:
            report = build_report([], [])  # no turn was ever decided; create nothing
        else:
            report = AuditLog(store).report(tenant=args.tenant)
    if args.json:
        emit(report.model_dump(mode="json"))
    else:
        print(render(report))
    return 0
