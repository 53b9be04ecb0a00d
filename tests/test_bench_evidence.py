"""The evidence and retrieval benchmarks, run on a small hand-written LoCoMo-format fixture."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retold import Principal, RecordDraft, SQLiteStore
from retold._bench_evidence import parse_session_time
from retold.cli import main

DATA = Path(__file__).parent / "data" / "locomo_mini.json"


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_parse_session_time() -> None:
    """LoCoMo session times parse to UTC datetimes; other text gives None."""
    assert parse_session_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_time("12:05 am on 1 Jan, 2024") == datetime(2024, 1, 1, 0, 5, tzinfo=UTC)
    assert parse_session_time("sometime") is None


def test_bench_evidence_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    """The evidence benchmark reports the required keys and scores categories 1-4 only."""
    report = run_json(
        [
            "bench",
            "evidence",
            "--data",
            str(DATA),
            "--budget",
            "4096",
            "--json",
            "--retrieval",
            "lexical",
        ],
        capsys,
    )
    for key in (
        "budget",
        "questions",
        "all_evidence_packed",
        "rate",
        "by_category",
        "retrieval",
        "mean_utilization",
        "mean_records_packed",
        "p50_ms",
        "p95_ms",
    ):
        assert key in report
    assert report["budget"] == 4096 and report["questions"] == 30
    assert set(report["by_category"]) == {"1", "2", "3", "4"}  # type: ignore[arg-type]
    assert report["retrieval"]["dense"] is False  # type: ignore[index]
    assert report["retrieval"]["mode"] == "lexical"  # type: ignore[index]
    assert 0.85 <= report["rate"] <= 1.0  # type: ignore[operator]


def test_bench_evidence_smaller_budget_packs_less(capsys: pytest.CaptureFixture[str]) -> None:
    """A tight budget packs fewer records and never more than the budget."""
    small = run_json(
        ["bench", "evidence", "--data", str(DATA), "--budget", "300", "--json"], capsys
    )
    assert small["rate"] < 0.9  # type: ignore[operator]
    assert 0 < small["mean_utilization"] <= 1.0  # type: ignore[operator]


def test_bench_evidence_rejects_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that is not LoCoMo-format JSON is a usage error (exit status 2)."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    assert main(["bench", "evidence", "--data", str(bad), "--budget", "100"]) == 2
    assert "conversation" in capsys.readouterr().err


def test_bench_retrieval_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    """The retrieval benchmark reports latency percentiles and write throughput."""
    report = run_json(
        ["bench", "retrieval", "--records", "300", "--queries", "5", "--json"], capsys
    )
    assert report["records"] == 300
    assert report["p95_ms"] >= report["p50_ms"] > 0  # type: ignore[operator]
    assert report["write_records_per_s"] > 0  # type: ignore[operator]


def test_memory_search_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`retold memory search` prints the packed context and, with --json, its metadata."""
    db = tmp_path / "m.db"
    scope = Principal(tenant="acme", principal="alice")
    with SQLiteStore(db) as store:
        store.add(scope, RecordDraft(text="The spare key is under the blue pot", speaker="Ana"))
        store.add(Principal(tenant="acme", principal="bob"), RecordDraft(text="Bob's spare key"))
    base = [
        "memory",
        "search",
        "--db",
        str(db),
        "--tenant",
        "acme",
        "--principal",
        "alice",
        "--query",
        "where is the spare key",
        "--budget",
        "200",
    ]
    assert main(base) == 0
    out = capsys.readouterr()
    assert 'Ana: "The spare key is under the blue pot"' in out.out
    assert "Bob" not in out.out
    report = run_json([*base, "--json", "--format", "auditable"], capsys)
    assert report["format"] == "auditable" and len(report["record_ids"]) == 1  # type: ignore[arg-type]
    assert report["tokens_used"] <= 200  # type: ignore[operator]
    assert main([*base[:-1], "0"]) == 2  # bad input: a budget must be positive
    assert capsys.readouterr().err.startswith("retold: error: budget:")
