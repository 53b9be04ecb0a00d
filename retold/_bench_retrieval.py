"""``retold bench retrieval``: query latency of the shipping retrieval, and write throughput.

N synthetic records for one principal are written through the normal write path
(``SQLiteStore.add``, one transaction each). With ``--principals P`` (default 1) the store is
shared: P principals write N records each, in turns (one record each, round after round), so
every principal's rows interleave with the others' and the measured principal's words are
also in the others' rows, as in a multi-tenant store; only the measured principal is
searched. Its entity names are indexed, and, with dense
retrieval on (the default, as shipped), each record gets a stored vector through the same
``ensure_vectors`` path a search uses, from a synthetic embedder (see below), which also
builds the IVF vector index.

Then ``--queries`` searches (at least 200) are timed, one after another. Half are drawn from
the stored vocabulary; the other half use only words no record contains, so they have no
lexical hit and depend on the dense stage. Each timing **starts** when
``HybridRetriever.search`` is called with ``limit=--candidates`` (default 8, the
orchestrator's ``max_candidates`` per gap query) and covers embedding the query, the no-op
check for unembedded records, every stage, fusion, boosts, dedup, session-neighbour
expansion and building the returned records; it **ends** when those candidates are packed
into the ``--budget`` context (the orchestrator hands candidates to admission unpacked; the
packing step is kept so ``--candidates 300`` times ``bench evidence --path pack``'s work).
The configuration is the default :class:`RetrievalConfig` (dense on unless ``--no-dense``),
over a store opened with its defaults (on SQLite, the searches' pooled read connections
memory-map the file: ``SQLiteStore(mmap_bytes=...)``).

The vectors are written by the benchmark's own process, as a server that embeds on its
search path writes them, so its IVF cell cache (``retold._vectors``) holds the cells those
writes and rebuilds left; a process that did not write them reads each cell from SQLite on
its first query that probes it.

Garbage collection stays on, as in a host; before the timed queries a full collection runs
and every object then alive (the bench's own setup: the texts it wrote, the vocabulary,
the synthetic embedder's word vectors) is moved out of the collector's reach
(``gc.freeze()``, undone at the end), as ``bench latency`` does, so the collections the
queries trigger are timed but do not traverse the setup.

Besides wall-clock ``p50_ms``/``p95_ms``, ``cpu_p50_ms``/``cpu_p95_ms`` give the process's
CPU time per query (every thread), which does not include waiting for a core on a
shared machine.

After them, ``common_words_queries`` (a quarter as many, at least 50) more searches are timed
the same way and reported apart (``common_words_p50_ms``/``common_words_p95_ms``): each is
three words drawn from the fixed everyday words every synthetic record is full of ("week",
"good", "yesterday"), none of them a function word, so the lexical stage takes its path for a
query made only of common words (see ``lexical_common_postings``); in a shared store that is
where other principals' postings would be read.

Then ``relation_queries`` (as many) are timed the same way and reported apart
(``relation_p50_ms``/``relation_p95_ms``): each asks about one of the principal's people by
relation ("What does my sister think about ...?"), so the relation path runs: it reads the
newest introductions of that relation from the relation index, then the records naming the
person. For that, one record in 50 of the principal's opens with an introduction ("My sister
Mira ...", five relations, each with its own name) and another one in 50 opens with the
person's name; ``relation_found`` counts the relation queries whose path found the person.
Then ``named_queries`` (as many) the same way (``named_p50_ms``/``named_p95_ms``): each names
one of those people ("What does Mira think about ...?"), so the relation path runs the other
way: it reads the newest introductions of the name, then the owner's records using the
relation word; ``named_found`` counts the queries for which it returned records.

Last, ``after_writes_queries`` (as many) searches each follow four new records of the
principal (two exchanges of the conversation, written untimed through ``SQLiteStore.add``),
as a chat's next turn follows the last one's messages, and are reported apart
(``after_writes_p50_ms``/``after_writes_p95_ms``). Each asks about up to four content words
(of the synthetic vocabulary) of the newest of those records, so its timing also covers what
a search does first after writes: the entity and relation index and the vectors catching up
on the new records (the synthetic embedder embedding them). No recall is reported for them:
the synthetic vectors are random sums with no cluster structure, so the IVF probe's recall
on them says nothing about a real embedder's. These writes run last, so the figures above
are over the ``N`` records only.

Simulated: the embedder. ``synthetic-hash`` gives each word a fixed pseudo-random 384-float
vector (seeded by the word's SHA-256) and a text the normalised sum of its words' vectors,
so texts sharing words are near; it costs microseconds where a real model costs
milliseconds, so the figure is retrieval's own cost, not the embedder's. Text comes from a
fixed seed, so runs compare; ``config_sha256`` identifies the retrieval configuration.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import numpy as np

from ._bench_evidence import _percentile
from ._errors import InvalidInputError
from ._open import scratch_store
from ._packing import PackingConfig, pack
from ._records import Principal, RecordDraft, RecordKind
from ._retrieval import HybridRetriever, RetrievalConfig, index_entities, query_terms
from ._store import Store
from ._tokens import token_counter
from ._vectors import ensure_vectors

__all__ = ["register", "run_retrieval_bench"]

_SYLLABLES = (
    "ka lo mi ne ru sa ti vo be da fe gi ho ju la mo ni pe qu ri so tu va we xi yo za".split()
)
_COMMON = (
    "the a and to of in I you we it is was that for on with my at this have had went got "
    "about really think just so but like yesterday today week weekend new good great"
).split()
_NAMES = ["Alder", "Brisa", "Corin", "Delta", "Ember", "Fenn", "Galen", "Hollis", "Isla", "Juno"]
# The principal's people, introduced by relation in one record in 50 (see the module doc).
_PEOPLE = [
    ("sister", "Mira"),
    ("brother", "Tobin"),
    ("friend", "Orla"),
    ("boss", "Pell"),
    ("neighbour", "Sunniva"),
]


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


_START = datetime(2024, 1, 1, tzinfo=UTC)


def _message(i: int, text: str) -> RecordDraft:
    """The ``i``-th message of the synthetic conversation: two speakers in turn, a minute
    apart, 20 messages a session."""
    return RecordDraft(
        text=text,
        kind=RecordKind.MESSAGE,
        speaker=_NAMES[i % 2],
        event_time=_START + timedelta(minutes=i),
        session_id=f"s{i // 20}",
    )


class SyntheticEmbedder:
    """A deterministic stand-in embedder for timing: a text is the sum of its words' vectors.

    Each lower-cased word maps to a fixed pseudo-random unit vector seeded by its SHA-256,
    so the same text always gives the same bytes and texts sharing words are near.
    """

    def __init__(self, dimensions: int = 384) -> None:
        self._dims = dimensions
        self._words: dict[str, Any] = {}

    @property
    def model_id(self) -> str:
        return f"synthetic-hash:{self._dims}"

    @property
    def dimensions(self) -> int:
        return self._dims

    def _word(self, word: str) -> Any:
        vec = self._words.get(word)
        if vec is None:
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
            vec = np.random.default_rng(seed).standard_normal(self._dims).astype(np.float32)
            self._words[word] = vec
        return vec

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for text in texts:
            words = [w.lower().strip(".,?!") for w in text.split()]
            total = np.zeros(self._dims, dtype=np.float32)
            for w in words:
                if w:
                    total += self._word(w)
            norm = float(np.linalg.norm(total)) or 1.0
            out.append((total / norm).tolist())
        return out


def run_retrieval_bench(
    n: int,
    *,
    store: Store,
    queries: int = 200,
    budget: int = 4096,
    seed: int = 7,
    candidates: int = 8,
    dense: bool = True,
    principals: int = 1,
) -> dict[str, Any]:
    """Write ``n`` records (for each of ``principals``, in turns), then time ``queries``
    searches of the first principal with packing; returns the report.

    Raises:
        InvalidInputError: ``n`` < 1, ``principals`` < 1 or ``queries`` < 200.
    """
    if n < 1:
        raise InvalidInputError("records", f"must be >= 1, not {n}")
    if principals < 1:
        raise InvalidInputError("principals", f"must be >= 1, not {principals}")
    if candidates < 1:
        raise InvalidInputError("candidates", f"must be >= 1, not {candidates}")
    if queries < 200:
        raise InvalidInputError(
            "queries", f"must be >= 200 (half without a lexical hit), not {queries}"
        )
    rng = random.Random(seed)
    vocab = _vocabulary(rng, 5000)
    scope = Principal(tenant="bench", principal="retrieval")
    texts = [_sentence(rng, vocab) for _ in range(n)]
    for i in range(0, n, 50):
        relation, person = _PEOPLE[(i // 50) % len(_PEOPLE)]
        texts[i] = f"My {relation} {person} " + texts[i][0].lower() + texts[i][1:]
        if i + 25 < n:
            texts[i + 25] = f"{person} " + texts[i + 25][0].lower() + texts[i + 25][1:]
    others = [Principal(tenant="bench", principal=f"neighbour-{k}") for k in range(1, principals)]
    other_rng = random.Random(seed + 2)
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        for who, what in [(scope, text), *((o, _sentence(other_rng, vocab)) for o in others)]:
            store.add(who, _message(i, what), actor="bench")
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index_entities(store, scope)
    index_s = time.perf_counter() - t0

    config = RetrievalConfig(dense=dense)
    embedder = SyntheticEmbedder() if dense else None
    vector_s = 0.0
    if embedder is not None:
        t0 = time.perf_counter()
        anyio.run(ensure_vectors, store, scope, embedder)
        vector_s = time.perf_counter() - t0
    retriever = HybridRetriever(store, config=config, embedder=embedder)
    counter = token_counter("cl100k_base")
    packing = PackingConfig()
    stored = set(vocab) | {w.lower() for w in _COMMON} | {w.lower() for w in _NAMES}
    unseen = [w for w in _vocabulary(random.Random(seed + 1), 6000) if w not in stored]
    qs = []
    for i in range(queries):
        if i % 2 == 0:
            words = rng.choice(texts).rstrip(".").split()
            picked = rng.sample(words, min(4, len(words)))
        else:  # no stored record contains any of these words: no lexical hit
            picked = rng.sample(unseen, 4)
        qs.append("What did they say about " + " ".join(picked) + "?")

    async def timed() -> tuple[list[float], list[float], list[int]]:
        latencies: list[float] = []
        cpu: list[float] = []
        packed: list[int] = []
        await retriever.search(scope, qs[0], limit=candidates)  # warm the page cache
        for q in qs:
            t, c = time.perf_counter(), time.process_time()
            result = await retriever.search(scope, q, limit=candidates)
            bundle = pack(result.candidates, budget=budget, counter=counter, config=packing)
            latencies.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            packed.append(bundle.metrics.records_included)
        return latencies, cpu, packed

    everyday = query_terms(" ".join(_COMMON))
    common_qs = [" ".join(rng.sample(everyday, 3)) for _ in range(max(50, queries // 4))]

    relation_qs = [
        f"What does my {rng.choice(_PEOPLE)[0]} think about {' '.join(rng.sample(vocab, 2))}?"
        for _ in range(max(50, queries // 4))
    ]

    named_qs = [
        f"What does {rng.choice(_PEOPLE)[1]} think about {' '.join(rng.sample(vocab, 2))}?"
        for _ in range(max(50, queries // 4))
    ]

    after_writes = max(50, queries // 4)
    content = set(vocab)

    async def timed_after_writes() -> list[float]:
        """Latencies of searches that each follow four new records of the principal."""
        latencies: list[float] = []
        for k in range(after_writes):
            for j in range(4):
                i = n + 4 * k + j
                newest = store.add(scope, _message(i, _sentence(rng, vocab)), actor="bench")
            # Its content words (the synthetic vocabulary's), not its everyday or function ones.
            words = [w for w in newest.text.rstrip(".").lower().split() if w in content]
            q = "What did they say about " + " ".join(rng.sample(words, min(4, len(words))))
            t = time.perf_counter()
            result = await retriever.search(scope, q + "?", limit=candidates)
            pack(result.candidates, budget=budget, counter=counter, config=packing)
            latencies.append((time.perf_counter() - t) * 1000)
        return latencies

    async def timed_apart(group: list[str], stage: str) -> tuple[list[float], int]:
        """(latencies, how many searches ``stage`` returned records for)."""
        latencies: list[float] = []
        found = 0
        for q in group:
            t = time.perf_counter()
            result = await retriever.search(scope, q, limit=candidates)
            pack(result.candidates, budget=budget, counter=counter, config=packing)
            latencies.append((time.perf_counter() - t) * 1000)
            found += result.stage_counts.get(stage, 0) > 0
        return latencies, found

    # As in ``bench latency``: a full collection, then every object alive (the records'
    # texts and the rest of the bench's own setup) out of the collector's reach, so the
    # collections the queries trigger do not traverse the setup; collection stays on.
    gc.collect()
    gc.freeze()
    try:
        latencies, cpu, packed = anyio.run(timed)
        common_latencies, _ = anyio.run(timed_apart, common_qs, "lexical")
        relation_latencies, relation_found = anyio.run(timed_apart, relation_qs, "relation")
        named_latencies, named_found = anyio.run(timed_apart, named_qs, "relation_named")
        after_latencies = anyio.run(timed_after_writes)
    finally:
        gc.unfreeze()
    return {
        "dense": dense,
        "config_sha256": config.sha256(),
        "embedder": embedder.model_id if embedder is not None else None,
        "queries_without_lexical_hit": queries // 2,
        "vector_records_per_s": n / vector_s if vector_s > 0 else None,
        "records": n,
        "principals": principals,
        "queries": queries,
        "budget": budget,
        "candidates": candidates,
        "p50_ms": _percentile(latencies, 0.5),
        "p95_ms": _percentile(latencies, 0.95),
        # CPU time of this process per query (all its threads): what the query costs apart
        # from waiting for a core, so runs on a loaded machine can be compared.
        "cpu_p50_ms": _percentile(cpu, 0.5),
        "cpu_p95_ms": _percentile(cpu, 0.95),
        "mean_records_packed": sum(packed) / len(packed) if packed else 0.0,
        "common_words_queries": len(common_qs),
        "common_words_p50_ms": _percentile(common_latencies, 0.5),
        "common_words_p95_ms": _percentile(common_latencies, 0.95),
        "relation_queries": len(relation_qs),
        "relation_found": relation_found,
        "relation_p50_ms": _percentile(relation_latencies, 0.5),
        "relation_p95_ms": _percentile(relation_latencies, 0.95),
        "named_queries": len(named_qs),
        "named_found": named_found,
        "named_p50_ms": _percentile(named_latencies, 0.5),
        "named_p95_ms": _percentile(named_latencies, 0.95),
        "after_writes_queries": after_writes,
        "after_writes_p50_ms": _percentile(after_latencies, 0.5),
        "after_writes_p95_ms": _percentile(after_latencies, 0.95),
        "write_records_per_s": n * principals / write_s if write_s > 0 else 0.0,
        "entity_index_records_per_s": n / index_s if index_s > 0 else 0.0,
        "write_mode": f"one transaction per record ({type(store).__name__}.add)",
        "retrieval": json.loads(config.canonical_json()),
    }


def register(sub: Any) -> None:
    p = sub.add_parser(
        "retrieval", help="query latency (retrieval + packing) and write throughput at N records"
    )
    p.add_argument("--records", type=int, default=10_000, help="records for one principal")
    p.add_argument(
        "--principals",
        type=int,
        default=1,
        help="principals sharing the store, writing --records each in turns (the first is "
        "searched)",
    )
    p.add_argument(
        "--queries",
        type=int,
        default=200,
        help="queries to time (>= 200; half with no lexical hit)",
    )
    p.add_argument(
        "--dense",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="dense stage with stored synthetic vectors (on, as shipped)",
    )
    p.add_argument("--budget", type=int, default=4096, help="context token budget")
    p.add_argument(
        "--candidates", type=int, default=8, help="search limit (8: the orchestrator's cap)"
    )
    p.add_argument(
        "--db",
        help="SQLite file (default: a temporary file), or a postgresql:// URL (a fresh schema "
        "there, dropped afterwards)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    with scratch_store(args.db, "retrieval.db") as store:
        report = run_retrieval_bench(
            args.records,
            store=store,
            queries=args.queries,
            budget=args.budget,
            dense=args.dense,
            candidates=args.candidates,
            principals=args.principals,
        )
        report["store"] = store.dialect
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(
            f"{report['records']} records x {report['principals']} principal(s), "
            f"dense {'on' if report['dense'] else 'off'}: "
            f"query p50 {report['p50_ms']:.1f} ms, "
            f"p95 {report['p95_ms']:.1f} ms (CPU p95 {report['cpu_p95_ms']:.1f} ms); "
            f"common words only p50 {report['common_words_p50_ms']:.1f} ms, "
            f"p95 {report['common_words_p95_ms']:.1f} ms; "
            f"by relation p50 {report['relation_p50_ms']:.1f} ms, "
            f"p95 {report['relation_p95_ms']:.1f} ms; "
            f"by name p50 {report['named_p50_ms']:.1f} ms, "
            f"p95 {report['named_p95_ms']:.1f} ms; "
            f"writes {report['write_records_per_s']:.0f}/s"
        )
    return 0
