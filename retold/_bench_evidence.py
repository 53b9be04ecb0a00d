"""``retold bench evidence``: share of LoCoMo-format questions whose evidence all gets through.

Every turn of each sample is stored through the normal write path (one principal per
sample; speaker kept; the session date as event time; the session as ``session_id``), then
each scored question (category 1-4 with evidence) is run through one of three paths. A
question counts when every one of its evidence turns is in what the path hands on (a
near-duplicate folded into a surviving record counts as handed on, since its text is).
No model is called at query time; the clock starts at the search and ends after the path's
last step (packing, or the merge of the gap lists). In the store the benchmark makes itself
(no ``--db``, or a fresh PostgreSQL schema) record ids are sequential, so two runs over the
same data give the same bytes. Ranking never breaks ties by id (equal scores go newest first),
so the figures are those a store drawing random ids gets.

Paths (``--path``):

``pack``
    The question is the query; retrieval returns up to ``--candidates`` candidates (300 by
    default), which are packed into ``--budget`` tokens. Measures: evidence in the packed
    context.
``orchestrator``
    What the orchestrator hands to admission. With ``--bundle``, the bundle's gap planner
    plans gaps for the question (store inventory, empty profile); each gap query retrieves
    up to the cap, with the question as the search's context, and the lists are merged
    round-robin to the cap, as the orchestrator does. Without a bundle the question is the
    one query. The cap is ``--candidates`` when given, else the orchestrator's
    ``max_candidates`` (8). No packing: measures evidence among the candidates. A question
    the planner plans no gap for counts as a miss.
``tool``
    What ``memory_search`` returns to a model: the question as the tool's ``query`` with
    its default ``limit`` (8, or ``--candidates``), the same over-fetch and cut as
    :class:`~retold.adapters.MemoryChat`, packed into the tool's default 1,024-token budget
    (or ``--budget`` when given). Measures: evidence in the packed tool result.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import re
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from ._config import UtilityAwareConfig
from ._errors import InvalidInputError, UsageError
from ._open import scratch_store
from ._packing import PackingConfig, pack
from ._records import Candidate, Principal, ProfileBlock, RecordDraft, RecordKind, SourceType
from ._retrieval import HybridRetriever, RetrievalConfig, index_entities
from ._store import Store
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


def _ingest(store: Store, scope: Principal, sample: dict[str, Any]) -> dict[str, str]:
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


PATHS = ("pack", "orchestrator", "tool")
# memory_search's defaults (retold.adapters.chat): limit 8, 1,024 tokens, over-fetch 4x >= 20.
TOOL_LIMIT = 8
TOOL_BUDGET = 1024


def _tool_fetch(limit: int) -> int:
    return max(limit * 4, 20)


async def _orchestrator_candidates(
    retriever: HybridRetriever,
    store: Store,
    scope: Principal,
    question: str,
    cap: int,
    planner: Any,
) -> tuple[list[Candidate], dict[str, tuple[str, ...]], int]:
    """The candidates the orchestrator would hand to admission; returns (cands, folded, gaps)."""
    from ._orchestrator import _merge, store_inventory

    if planner is None:
        queries = [question]
    else:
        inventory = await anyio.to_thread.run_sync(store_inventory, store, scope)
        decision = planner.plan(question, None, ProfileBlock.empty(), inventory)
        if inspect.isawaitable(decision):
            decision = await decision
        queries = [g.query for g in decision.gaps]
    lists: list[list[Candidate]] = []
    folded: dict[str, tuple[str, ...]] = {}
    for q in queries:
        # The turn is the search's context, as the orchestrator passes it.
        result = await retriever.search(scope, q, limit=cap, context=question)
        lists.append(list(result.candidates))
        folded.update(result.folded)
    return _merge(lists, cap), folded, len(queries)


async def run_evidence(
    data: Sequence[dict[str, Any]],
    *,
    budget: int,
    store: Store,
    config: RetrievalConfig,
    packing: PackingConfig,
    counter: TokenCounter,
    embedder: Embedder | None = None,
    candidates: int = 300,
    misses: list[dict[str, Any]] | None = None,
    path: str = "pack",
    planner: Any = None,
) -> dict[str, Any]:
    """Ingest ``data`` into ``store`` and score every question on ``path``; returns the report.

    ``candidates`` is the retrieval limit (pack), the cap (orchestrator) or the tool's
    ``limit`` (tool); ``budget`` is the packing budget (unused on the orchestrator path);
    ``planner`` is the gap planner of the orchestrator path (None: the question is the query).

    Raises:
        UsageError: an unknown path, or candidates < 1.
    """
    if path not in PATHS:
        raise UsageError(f"unknown path {path!r}; choose one of {', '.join(PATHS)}")
    if candidates < 1:
        raise UsageError(f"candidates must be >= 1, not {candidates}")
    retriever = HybridRetriever(store, config=config, embedder=embedder)
    no_gap = 0
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
            folded: dict[str, tuple[str, ...]]
            if path == "orchestrator":
                cands, folded, gaps = await _orchestrator_candidates(
                    retriever, store, scope, question, candidates, planner
                )
                no_gap += int(gaps == 0)
                packed = {c.record.id for c in cands}
                packed_counts.append(len(packed))
            else:
                fetch = candidates if path == "pack" else _tool_fetch(candidates)
                result = await retriever.search(scope, question, limit=fetch)
                chosen = list(result.candidates)[:candidates]
                bundle = pack(chosen, budget=budget, counter=counter, config=packing)
                folded = result.folded
                packed = set(bundle.record_ids)
                utilizations.append(bundle.metrics.utilization)
                packed_counts.append(bundle.metrics.records_included)
            latencies.append((time.perf_counter() - t0) * 1000)
            # A folded duplicate's text is in the context through the record it folded into.
            for survivor, gone in folded.items():
                if survivor in packed:
                    packed.update(gone)
            hit = all(ids[e] in packed for e in evidence)
            per_cat[category][0] += 1
            per_cat[category][1] += int(hit)
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
        "path": path,
        "budget": budget if path != "orchestrator" else None,
        "questions_without_gap": no_gap,
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
        "evidence",
        help="share of LoCoMo-format questions whose evidence all reaches the packed context "
        "(pack), the admission candidates (orchestrator) or the memory_search result (tool)",
    )
    p.add_argument("--data", required=True, help="LoCoMo-format JSON file")
    p.add_argument(
        "--path",
        choices=PATHS,
        default="pack",
        help="pack: retrieval + packing; orchestrator: candidates at the orchestrator's cap; "
        "tool: what memory_search returns",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help=f"packing token budget (pack: 4096, tool: {TOOL_BUDGET}; unused by orchestrator)",
    )
    p.add_argument(
        "--retrieval",
        choices=["default", "lexical", "hybrid"],
        default="default",
        help="default: the library default (no embedder); hybrid adds the local embedder",
    )
    p.add_argument(
        "--bundle",
        default=None,
        help="policy bundle (e.g. offline-reference): its retrieval config, and on the "
        "orchestrator path its gap planner",
    )
    p.add_argument("--ordering", choices=["balanced", "score", "density"], default=None)
    p.add_argument("--format", choices=["reader", "auditable"], default="reader")
    p.add_argument("--unit", default="cl100k_base", help="token counter unit")
    p.add_argument(
        "--candidates",
        type=int,
        default=None,
        help=f"pack: retrieval limit (300); orchestrator: the cap (max_candidates, 8); "
        f"tool: memory_search's limit ({TOOL_LIMIT})",
    )
    p.add_argument(
        "--db",
        help="SQLite file to ingest into (default: a temporary file), or a postgresql:// URL "
        "(a fresh schema there, dropped afterwards)",
    )
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
    planner: Any = None
    if args.bundle:
        from retold.policy.reference import get_bundle

        bundle = get_bundle(args.bundle)
        dense = embedder is not None or (
            args.retrieval == "default" and bundle.retrieval_config.dense
        )
        config = bundle.retrieval_config.model_copy(update={"dense": dense})
        if args.path == "orchestrator":
            planner = bundle.gap_policy()
    if args.backfill:
        config = config.model_copy(update={"backfill": True})
    packing = PackingConfig(format=args.format)
    if args.ordering:
        packing = packing.model_copy(update={"ordering": args.ordering})
    counter = token_counter(args.unit)
    candidates = args.candidates
    if candidates is None:
        candidates = {"pack": 300, "tool": TOOL_LIMIT}.get(args.path) or (
            UtilityAwareConfig().max_candidates
        )
    budget = (
        args.budget if args.budget is not None else (TOOL_BUDGET if args.path == "tool" else 4096)
    )
    if budget <= 0 or candidates <= 0:
        raise InvalidInputError("budget", "--budget and --candidates must be > 0")
    misses: list[dict[str, Any]] = []
    # Sequential record ids in a store made here, so two runs give the same bytes: ranking
    # does not break ties by id, but the packer and the dense stage's row limit do at their
    # edges.
    ids = (f"r{n:012d}" for n in itertools.count(1))
    with scratch_store(args.db, "evidence.db", id_factory=lambda: next(ids)) as store:
        report = anyio.run(
            lambda: run_evidence(
                data,
                budget=budget,
                store=store,
                config=config,
                packing=packing,
                counter=counter,
                embedder=embedder,
                candidates=candidates,
                misses=misses,
                path=args.path,
                planner=planner,
            )
        )
    report["retrieval"]["mode"] = args.retrieval
    report["bundle"] = args.bundle
    if args.misses:
        report["misses"] = misses
    if args.json:
        print(json.dumps(report, sort_keys=True, ensure_ascii=False))
        return 0
    where = (
        f"among {candidates} candidates"
        if args.path == "orchestrator"
        else f"at {report['budget']} {report['unit']} tokens"
    )
    print(
        f"{report['all_evidence_packed']}/{report['questions']} questions with all evidence "
        f"through ({report['rate']:.1%}) {where} [path {args.path}, {args.retrieval}]"
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
