"""``retold bench latency``: the report's shape (figures are measured, not asserted)."""

from __future__ import annotations

import json

import pytest

from retold.cli import main

KEYS = {
    "overhead_ms_p50",
    "overhead_ms_p95",
    "empty_gap_added_ms_p95",
    "budget_overrun_ms_max",
    "budget_overrun_ms_p99",
    "turns_per_second",
}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_bench_latency_prints_the_figures(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    """With --json the benchmark prints one object holding every required figure."""
    argv = ["bench", "latency", "--turns", "12", "--concurrency", "3", "--json"]
    assert main([*argv, "--backend", backend]) == 0
    data = json.loads(capsys.readouterr().out)
    assert KEYS <= set(data)
    assert data["turns"] == 12 and data["concurrency"] == 3 and data["backend"] == backend
    for key in KEYS:
        assert isinstance(data[key], float) and data[key] >= 0


@pytest.mark.parametrize("flag", ["--turns", "--concurrency"])
def test_bench_latency_rejects_non_positive_counts(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zero turns or zero concurrency is a usage error."""
    assert main(["bench", "latency", flag, "0"]) == 2
    assert flag.strip("-") in capsys.readouterr().err
