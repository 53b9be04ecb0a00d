"""``retold bench``: benchmarks that print JSON with ``--json``.

Each benchmark module exposes ``register(sub)`` and is listed in ``_BENCHMARKS``.
"""

from __future__ import annotations

from typing import Any

from .. import _bench_evidence, _bench_latency, _bench_redaction, _bench_retrieval

_BENCHMARKS: list[Any] = [_bench_evidence, _bench_retrieval, _bench_latency, _bench_redaction]


def register(sub: Any) -> None:
    bench = sub.add_parser("bench", help="run a benchmark and report machine-independent figures")
    bsub = bench.add_subparsers(dest="command", required=True, metavar="BENCHMARK")
    for module in _BENCHMARKS:
        module.register(bsub)
