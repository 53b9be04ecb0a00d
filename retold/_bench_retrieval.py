"""``retold bench retrieval``: query latency (retrieval + packing) and write throughput.

N synthetic records for one principal are written through the normal write path, then a
set of queries drawn from the stored vocabulary is timed end to end: candidate generation
and packing into a budgeted context. Text is generated from a fixed seed, so runs compare.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from ._bench_evidence import _percentile
from ._packing import PackingConfig, pack
from ._records import Principal, RecordDraft, RecordKind
from ._retrieval import HybridRetriever, RetrievalConfig, index_entities
from ._store import SQLiteStore
from ._tokens import token_counter

__all__ = ["register", "run_retrieval_bench"]

_SYLLABLES = (
    "ka lo mi ne ru sa ti vo be da fe gi ho ju la mo ni pe qu ri so tu va we xi yo za".split()
)
_COMMON = (
    "the a and to of in I you we it is was that for on with my at this have had went got "
    "about really think just so but like yesterday today week weekend new good great"
).split()
_NAMES = ["Alder", "Brisa", "Corin", "Delta", "Ember", "Fenn", "Galen", "Hollis", "Isla", "Juno"]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _sentence(rng: random.Random, vocab: list[str]) -> str:
    n = rng.randint(8, 30)
    words = [
        rng.choice(_COMMON)
        if rng.random() < 0.45
        else (rng.choice(_NAMES) if rng.random() < 0.05 else rng.choice(vocab))
        for _ in range(n)
    ]
    return " ".join(words).capitalize() + "."


def run_retrieval_bench(
    n: int,
    *,
    store: SQLiteStore,
    queries: int = 50,
    budget: int = 4096,
    seed: int = 7,
    candidates: int = 300,
) -> dict[str, Any]:
    """Write ``n`` records, then time ``queries`` searches with packing; returns the report."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng, 5000)
    scope = Principal(tenant="bench", principal="retrieval")
    start = datetime(2024, 1, 1, tzinfo=UTC)
    texts = [_sentence(rng, vocab) for _ in range(n)]
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        store.add(
            scope,
            RecordDraft(
                text=text,
                kind=RecordKind.MESSAGE,
                speaker=_NAMES[i % 2],
                event_time=start + timedelta(minutes=i),
                session_id=f"s{i // 20}",
            ),
            actor="bench",
        )
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index_entities(store, scope)
    index_s = time.perf_counter() - t0

    retriever = HybridRetriever(store, config=RetrievalConfig(dense=False))
    counter = token_counter("cl100k_base")
    packing = PackingConfig()
    qs = []
    for _ in range(queries):
        words = rng.choice(texts).rstrip(".").split()
        picked = rng.sample(words, min(4, len(words)))
        qs.append("What did they say about " + " ".join(picked) + "?")

    async def timed() -> tuple[list[float], list[int]]:
        latencies: list[float] = []
        packed: list[int] = []
        await retriever.search(scope, qs[0], limit=candidates)  # warm the page cache
        for q in qs:
            t = time.perf_counter()
            result = await retriever.search(scope, q, limit=candidates)
            bundle = pack(result.candidates, budget=budget, counter=counter, config=packing)
            latencies.append((time.perf_counter() - t) * 1000)
            packed.append(bundle.metrics.records_included)
        return latencies, packed

    latencies, packed = anyio.run(timed)
    return {
        "records": n,
        "queries": queries,
        "budget": budget,
        "candidates": candidates,
        "p50_ms": _percentile(latencies, 0.5),
        "p95_ms": _percentile(latencies, 0.95),
        "mean_records_packed": sum(packed) / len(packed) if packed else 0.0,
        "write_records_per_s": n / write_s if write_s > 0 else 0.0,
        "entity_index_records_per_s": n / index_s if index_s > 0 else 0.0,
        "write_mode": "one transaction per record (SQLiteStore.add)",
        "retrieval": json.loads(retriever.config.canonical_json()),
    }


def register(sub: Any) -> None:
    p = sub.add_parser(
        "retrieval", help="query latency (retrieval + packing) and write throughput at N records"
    )
    p.add_argument("--records", type=int, default=10_000, help="records for one principal")
    p.add_argument("--queries", type=int, default=50, help="queries to time")
    p.add_argument("--budget", type=int, default=4096, help="context token budget")
    p.add_argument("--db", help="SQLite file (default: a temporary file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    from ._errors import InvalidInputError

    if args.records <= 0 or args.queries <= 0:
        raise InvalidInputError("records", "--records and --queries must be > 0")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or str(Path(tmp) / "retrieval.db")
        with SQLiteStore(path) as store:
            report = run_retrieval_bench(
                args.records, store=store, queries=args.queries, budget=args.budget
            )
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(
            f"{report['records']} records: query p50 {report['p50_ms']:.1f} ms, "
            f"p95 {report['p95_ms']:.1f} ms; writes {report['write_records_per_s']:.0f}/s"
        )
    return 0
