"""``retold bench evidence``: share of LoCoMo-format questions whose evidence is all packed.

Every turn of each sample is stored through the normal write path (one principal per
sample; speaker kept; the session date as event time), then each scored question (category
1-4 with evidence) is answered by the same retrieval and packing the orchestrator uses, with
the question as the query. No model is called at query time.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ._errors import InvalidInputError, UsageError
from ._packing import PackingConfig, pack
from ._records import Principal, RecordDraft, RecordKind, SourceType
from ._retrieval import HybridRetriever, RetrievalConfig, index_entities
from ._store import SQLiteStore
from ._tokens import TokenCounter, token_counter
from ._typing import Embedder

__all__ = ["parse_session_time", "register", "run_evidence"]

SCORED_CATEGORIES = (1, 2, 3, 4)
_MONTHS = {
    m: i
    for i, m in enumerate(
        "january february march april may june july august september october november december".split(),
        start=1,
    )
}
_TIME = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.IGNORECASE
)
_SAFE = re.compile(r"[^A-Za-z0-9._:@-]+")


def parse_session_time(text: str) -> datetime | None:
    """Parse a LoCoMo session time such as ``"1:56 pm on 8 May, 2023"`` (None if it is not one)."""
    m = _TIME.search(text or "")
    if not m:
        return None
    hour, minute, half, day, month, year = m.groups()
    month_no = _MONTHS.get(month.lower()) or next(
        (v for k, v in _MONTHS.items() if k.startswith(month.lower()[:3])), None
    )
    if month_no is None:
        return None
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), month_no, int(day), h, int(minute), tzinfo=UTC)


def _scope_id(text: str) -> str:
    cleaned = _SAFE.sub("-", str(text)).strip("-.") or "sample"
    return cleaned[:200] if cleaned[0].isalnum() else f"s{cleaned}"[:200]


def _turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text") or "").strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shared an image: {caption}]".strip()
    return text


def _sessions(conversation: dict[str, Any]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    keys = [k for k in conversation if re.fullmatch(r"session_\d+", k)]
    out = []
    for key in sorted(keys, key=lambda k: int(k.split("_")[1])):
        k = int(key.split("_")[1])
        out.append((k, str(conversation.get(f"{key}_date_time", "")), list(conversation[key])))
    return out


def _evidence_ids(evidence: Sequence[Any]) -> list[str]:
    ids: list[str] = []
    for item in evidence:
        ids.extend(re.findall(r"D\d+:\d+", str(item)))
    return ids


def _ingest(store: SQLiteStore, scope: Principal, sample: dict[str, Any]) -> dict[str, str]:
    """Store every turn of one sample; returns dia_id -> record id."""
    ids: dict[str, str] = {}
    conversation = sample["conversation"]
    for k, when_text, turns in _sessions(conversation):
        when = parse_session_time(when_text)
        session = f"{scope.principal}.s{k}"
        for turn in turns:
            text = _turn_text(turn)
            if not text:
                continue
            dia = str(turn.get("dia_id", ""))
            draft = RecordDraft(
                text=text,
                kind=RecordKind.MESSAGE,
                speaker=str(turn.get("speaker") or "") or None,
                source_type=SourceType.USER_STATED,
                event_time=when,
                session_id=session,
                idempotency_key=f"locomo:{dia}" if dia else None,
            )
            record = store.add(scope, draft, actor="bench")
            if dia:
                ids[dia] = record.id
    index_entities(store, scope)
    return ids


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def run_evidence(
    data: Sequence[dict[str, Any]],
    *,
    budget: int,
    store: SQLiteStore,
    config: RetrievalConfig,
    packing: PackingConfig,
    counter: TokenCounter,
    embedder: Embedder | None = None,
    candidates: int = 300,
    misses: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Ingest ``data`` into ``store`` and score every question; returns the report dict."""
    retriever = HybridRetriever(store, config=config, embedder=embedder)
    per_cat: dict[int, list[int]] = {c: [0, 0] for c in SCORED_CATEGORIES}
    latencies: list[float] = []
    utilizations: list[float] = []
    packed_counts: list[int] = []
    unresolved = 0
    turns = 0
    for sample in data:
        scope = Principal(tenant="bench", principal=_scope_id(sample.get("sample_id", "sample")))
        ids = await anyio.to_thread.run_sync(_ingest, store, scope, sample)
        turns += len(ids)
        for qa in sample.get("qa", []):
            category = qa.get("category")
            evidence = _evidence_ids(qa.get("evidence") or [])
            if category not in SCORED_CATEGORIES or not evidence:
                continue
            if any(e not in ids for e in evidence):
                unresolved += 1
                continue
            question = str(qa.get("question", ""))
            t0 = time.perf_counter()
            result = await retriever.search(scope, question, limit=candidates)
            bundle = pack(result.candidates, budget=budget, counter=counter, config=packing)
            latencies.append((time.perf_counter() - t0) * 1000)
            packed = set(bundle.record_ids)
            # A folded duplicate's text is in the context through the record it folded into.
            for survivor, folded in result.folded.items():
                if survivor in packed:
                    packed.update(folded)
            hit = all(ids[e] in packed for e in evidence)
            per_cat[category][0] += 1
            per_cat[category][1] += int(hit)
            utilizations.append(bundle.metrics.utilization)
            packed_counts.append(bundle.metrics.records_included)
            if not hit and misses is not None:
                misses.append(
                    {
                        "sample_id": sample.get("sample_id"),
                        "question": question,
                        "category": category,
                        "missing": [e for e in evidence if ids[e] not in packed],
                    }
                )
    questions = sum(v[0] for v in per_cat.values())
    packed_all = sum(v[1] for v in per_cat.values())
    return {
        "budget": budget,
        "unit": counter.unit,
        "samples": len(data),
        "turns": turns,
        "questions": questions,
        "all_evidence_packed": packed_all,
        "rate": packed_all / questions if questions else 0.0,
        "by_category": {
            str(c): {
                "questions": n,
                "all_evidence_packed": k,
                "rate": k / n if n else 0.0,
            }
            for c, (n, k) in per_cat.items()
        },
        "unresolved_evidence_questions": unresolved,
        "mean_utilization": statistics.fmean(utilizations) if utilizations else 0.0,
        "mean_records_packed": statistics.fmean(packed_counts) if packed_counts else 0.0,
        "p50_ms": _percentile(latencies, 0.5),
        "p95_ms": _percentile(latencies, 0.95),
        "candidates": candidates,
        "retrieval": {
            **json.loads(config.canonical_json()),
            "sha256": config.sha256(),
            "embedder": embedder.model_id if embedder is not None else None,
        },
        "packing": packing.model_dump(mode="json"),
    }


def _load(path: str) -> list[dict[str, Any]]:
    file = Path(path)
    if not file.exists():
        raise InvalidInputError("data", f"no file at {path!r}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError("data", f"cannot read LoCoMo JSON from {path!r}: {exc}") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(
        isinstance(s, dict) and "conversation" in s for s in data
    ):
        raise InvalidInputError(
            "data", "expected a JSON list of samples, each with 'conversation' and 'qa'"
        )
    return data


def _configs(mode: str) -> tuple[RetrievalConfig, Embedder | None]:
    if mode == "lexical":
        return RetrievalConfig(dense=False), None
    if mode == "hybrid":
        from ._embedding import LocalEmbedder

        return RetrievalConfig(), LocalEmbedder()
    if mode == "default":
        return RetrievalConfig(), None
    raise UsageError(f"unknown retrieval {mode!r}; choose lexical, hybrid or default")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "evidence", help="share of LoCoMo-format questions with all evidence packed at a budget"
    )
    p.add_argument("--data", required=True, help="LoCoMo-format JSON file")
    p.add_argument("--budget", type=int, default=4096, help="context token budget")
    p.add_argument(
        "--retrieval",
        choices=["default", "lexical", "hybrid"],
        default="default",
        help="default: the library default (no embedder); hybrid adds the local embedder",
    )
    p.add_argument("--ordering", choices=["balanced", "score", "density"], default=None)
    p.add_argument("--format", choices=["reader", "auditable"], default="reader")
    p.add_argument("--unit", default="cl100k_base", help="token counter unit")
    p.add_argument("--candidates", type=int, default=300, help="candidates passed to packing")
    p.add_argument("--db", help="SQLite file to ingest into (default: a temporary file)")
    p.add_argument(
        "--backfill",
        action="store_true",
        help="fill the candidate list with the newest records when retrieval finds too few",
    )
    p.add_argument("--misses", action="store_true", help="list the questions that missed")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    data = _load(args.data)
    config, embedder = _configs(args.retrieval)
    if args.backfill:
        config = config.model_copy(update={"backfill": True})
    packing = PackingConfig(format=args.format)
    if args.ordering:
        packing = packing.model_copy(update={"ordering": args.ordering})
    counter = token_counter(args.unit)
    misses: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or str(Path(tmp) / "evidence.db")
        with SQLiteStore(path) as store:
            report = anyio.run(
                lambda: run_evidence(
                    data,
                    budget=args.budget,
                    store=store,
                    config=config,
                    packing=packing,
                    counter=counter,
                    embedder=embedder,
                    candidates=args.candidates,
                    misses=misses,
                )
            )
    report["retrieval"]["mode"] = args.retrieval
    if args.misses:
        report["misses"] = misses
    if args.json:
        print(json.dumps(report, sort_keys=True, ensure_ascii=False))
        return 0
    print(
        f"{report['all_evidence_packed']}/{report['questions']} questions with all evidence "
        f"packed ({report['rate']:.1%}) at {report['budget']} {report['unit']} tokens "
        f"[{args.retrieval}]"
    )
    for cat, row in report["by_category"].items():
        print(
            f"  category {cat}: {row['all_evidence_packed']}/{row['questions']} ({row['rate']:.1%})"
        )
    print(
        f"  mean utilization {report['mean_utilization']:.1%}, mean records packed "
        f"{report['mean_records_packed']:.1f}, p50 {report['p50_ms']:.1f} ms, "
        f"p95 {report['p95_ms']:.1f} ms"
    )
    for miss in misses if args.misses else []:
        print(f"  miss [{miss['category']}] {miss['question']} missing {miss['missing']}")
    return 0
