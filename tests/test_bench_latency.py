"""``retold bench latency``: the report's shape (figures are measured, not asserted)."""

from __future__ import annotations

import json

import pytest

from retold._bench_latency import FAULTS
from retold.cli import main

KEYS = {
    "overhead_ms_p50",
    "overhead_ms_p95",
    "empty_gap_added_ms_p95",
    "budget_overrun_ms_max",
    "budget_overrun_ms_p99",
    "turns_per_second",
}


@pytest.mark.parametrize(
    ("backend", "retriever", "contention"),
    [
        pytest.param("asyncio", "fake", False, id="asyncio-fake"),
        pytest.param("trio", "hybrid", True, id="trio-hybrid-contention"),
    ],
)
def test_bench_latency_prints_the_figures(
    backend: str, retriever: str, contention: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --json the benchmark prints one object holding every required figure, the
    worst overrun per fault kind, and one decision row per turn."""
    argv = ["bench", "latency", "--turns", str(2 * len(FAULTS)), "--concurrency", "3"]
    argv += ["--retriever", retriever, "--records", "60", "--backend", backend, "--json"]
    assert main([*argv, *(["--contention"] if contention else [])]) == 0
    data = json.loads(capsys.readouterr().out)
    assert KEYS <= set(data)
    assert (data["turns"], data["concurrency"], data["backend"]) == (2 * len(FAULTS), 3, backend)
    assert (data["retriever"], data["records"], data["contention"]) == (retriever, 60, contention)
    for key in KEYS:
        assert isinstance(data[key], float) and data[key] >= 0
    assert set(data["overrun_by_fault"]) == set(FAULTS)
    assert all(v >= 0 for v in data["overrun_by_fault"].values())
    assert data["decision_rows_missing"] == 0
    # Collection pauses of the timed turns are reported, not hidden.
    assert isinstance(data["gc_pause_ms_max"], float) and data["gc_pause_ms_max"] >= 0
    assert isinstance(data["gc_full_collections"], int) and data["gc_full_collections"] >= 0
    assert data["loop_cpu_wait_ms"] is None or data["loop_cpu_wait_ms"] >= 0
    assert (data["contention_holds"] > 0) == contention


@pytest.mark.parametrize("flag", ["--turns", "--concurrency", "--records"])
def test_bench_latency_rejects_non_positive_counts(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zero turns, zero concurrency or zero records is a usage error."""
    assert main(["bench", "latency", flag, "0"]) == 2
    assert flag.strip("-") in capsys.readouterr().err
