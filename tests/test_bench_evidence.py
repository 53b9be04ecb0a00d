"""The evidence and retrieval benchmarks, run on a small hand-written LoCoMo-format fixture."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retold import Principal, RecordDraft, SQLiteStore
from retold._bench_evidence import parse_session_time
from retold._retrieval import RetrievalConfig
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
    """The retrieval benchmark runs dense on by default, 200 queries, and names its config."""
    report = run_json(
        ["bench", "retrieval", "--records", "300", "--queries", "200", "--json"], capsys
    )
    assert report["records"] == 300 and report["queries"] == 200
    assert report["dense"] is True and report["embedder"] == "synthetic-hash:384"
    assert report["queries_without_lexical_hit"] == 100
    assert report["config_sha256"] == RetrievalConfig().sha256()
    assert report["p95_ms"] >= report["p50_ms"] > 0  # type: ignore[operator]
    assert report["common_words_queries"] == 50
    assert report["common_words_p95_ms"] >= report["common_words_p50_ms"] > 0  # type: ignore[operator]
    # every relation query reaches someone the principal introduced by that relation
    assert report["relation_queries"] == report["relation_found"] == 50
    assert report["relation_p95_ms"] >= report["relation_p50_ms"] > 0  # type: ignore[operator]
    # every query naming one of them reaches the records that call them by relation
    assert report["named_queries"] == report["named_found"] == 50
    assert report["named_p95_ms"] >= report["named_p50_ms"] > 0  # type: ignore[operator]
    # searches that each follow four writes are timed apart
    assert report["after_writes_queries"] == 50
    assert report["after_writes_p95_ms"] >= report["after_writes_p50_ms"] > 0  # type: ignore[operator]
    assert report["write_records_per_s"] > 0  # type: ignore[operator]
    off = run_json(["bench", "retrieval", "--records", "50", "--no-dense", "--json"], capsys)
    assert off["dense"] is False and off["embedder"] is None
    assert off["config_sha256"] == RetrievalConfig(dense=False).sha256()
    assert report["principals"] == off["principals"] == 1


def test_bench_retrieval_shares_the_store_between_principals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--principals P: P principals write --records each in turns into one store (their rows
    interleave); only the first is searched, and what it packs is its own."""
    db = tmp_path / "shared.db"
    args = ["bench", "retrieval", "--records", "40", "--principals", "3", "--no-dense"]
    report = run_json([*args, "--db", str(db), "--json"], capsys)
    assert report["principals"] == 3 and report["records"] == 40
    assert report["mean_records_packed"] > 0  # type: ignore[operator]
    with SQLiteStore(db) as kept:
        order = [r["principal"] for r in kept.query("SELECT principal FROM records ORDER BY rowid")]
    # then the four records before each of the 50 after-writes searches, the measured one's
    assert len(order) == 120 + 200 and order[:6] == ["retrieval", "neighbour-1", "neighbour-2"] * 2
    assert set(order[120:]) == {"retrieval"}
    assert main(["bench", "retrieval", "--records", "10", "--principals", "0"]) == 2
    assert "principals" in capsys.readouterr().err


def test_bench_retrieval_rejects_too_few_queries(capsys: pytest.CaptureFixture[str]) -> None:
    """Fewer than 200 queries is bad input: exit 2, naming the field."""
    assert main(["bench", "retrieval", "--records", "10", "--queries", "5"]) == 2
    assert "queries" in capsys.readouterr().err


def test_bench_evidence_paths(capsys: pytest.CaptureFixture[str]) -> None:
    """Each path reports itself, its cap and budget; the 8-candidate paths see less than packing."""
    base = ["bench", "evidence", "--data", str(DATA), "--retrieval", "lexical", "--json"]
    pack = run_json([*base, "--path", "pack"], capsys)
    orch = run_json([*base, "--path", "orchestrator"], capsys)
    tool = run_json([*base, "--path", "tool"], capsys)
    assert (pack["path"], pack["candidates"], pack["budget"]) == ("pack", 300, 4096)
    assert (orch["path"], orch["candidates"], orch["budget"]) == ("orchestrator", 8, None)
    assert (tool["path"], tool["candidates"], tool["budget"]) == ("tool", 8, 1024)
    for report in (orch, tool):
        assert report["questions"] == pack["questions"] == 30
        assert 0 < report["rate"] < pack["rate"]  # type: ignore[operator]
        assert set(report["by_category"]) == {"1", "2", "3", "4"}  # type: ignore[arg-type]
    assert orch["mean_records_packed"] <= 8  # type: ignore[operator]
    wide = run_json([*base, "--path", "orchestrator", "--candidates", "300"], capsys)
    assert wide["rate"] >= orch["rate"]  # type: ignore[operator]


def test_bench_evidence_orchestrator_uses_the_bundle_gap_planner(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With --bundle, gap queries come from the bundle's planner; unplanned questions miss."""
    report = run_json(
        [
            "bench",
            "evidence",
            "--data",
            str(DATA),
            "--path",
            "orchestrator",
            "--bundle",
            "offline-reference",
            "--json",
        ],
        capsys,
    )
    assert report["bundle"] == "offline-reference"
    no_gap = report["questions_without_gap"]
    assert 0 < no_gap < report["questions"]  # type: ignore[operator]
    assert report["all_evidence_packed"] <= report["questions"] - no_gap  # type: ignore[operator]


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
    assert '"Ana": "The spare key is under the blue pot"' in out.out
    assert "Bob" not in out.out
    report = run_json([*base, "--json", "--format", "auditable"], capsys)
    assert report["format"] == "auditable" and len(report["record_ids"]) == 1  # type: ignore[arg-type]
    assert report["tokens_used"] <= 200  # type: ignore[operator]
    assert main([*base[:-1], "0"]) == 2  # bad input: a budget must be positive
    assert capsys.readouterr().err.startswith("retold: error: budget:")


def test_scratch_store_ids_only_in_a_store_it_makes(tmp_path: Path) -> None:
    """A benchmark's own store takes the injected ids (reproducible ties); a store the user
    names keeps its own, since it may hold records already."""
    from itertools import count

    from retold._open import scratch_store

    scope = Principal(tenant="t", principal="p")
    numbers = count(1)
    with scratch_store(None, "x.db", id_factory=lambda: f"r{next(numbers)}") as store:
        ids = [store.add(scope, RecordDraft(text=f"note {i}")).id for i in range(3)]
    assert ids == ["r1", "r2", "r3"]
    named = tmp_path / "named.db"
    with scratch_store(str(named), "x.db", id_factory=lambda: "fixed") as store:
        first = store.add(scope, RecordDraft(text="one")).id
        second = store.add(scope, RecordDraft(text="two")).id
    assert first != "fixed" and second != first and named.exists()


def test_bench_evidence_breaks_ties_the_same_way_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Twelve turns that score alike (one word apart, so none folds), one per session on one
    date: which eight reach the cap is decided by write order, newest first, so the last
    eight written do, in every run (ranking never breaks ties by record id)."""
    conversation: dict[str, object] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for k in range(1, 13):
        conversation[f"session_{k}_date_time"] = "1:00 pm on 8 May, 2023"
        conversation[f"session_{k}"] = [
            {"speaker": "Ben", "dia_id": f"D{k}:1", "text": f"Ana waved at the bakery, table {k}."}
        ]
    last_eight = [f"D{k}:1" for k in range(5, 13)]
    qa = [
        {"question": "Who waved at the bakery?", "answer": "Ana", "evidence": last_eight,
         "category": 4},
        {"question": "Who waved at the bakery?", "answer": "Ana", "evidence": ["D4:1"],
         "category": 4},
    ]  # fmt: skip
    data = tmp_path / "ties.json"
    data.write_text(json.dumps([{"sample_id": "ties", "conversation": conversation, "qa": qa}]))
    argv = ["bench", "evidence", "--data", str(data), "--retrieval", "lexical", "--json"]
    argv += ["--path", "orchestrator", "--misses"]
    for _ in range(2):
        report = run_json(argv, capsys)
        assert report["all_evidence_packed"] == 1
        assert [m["missing"] for m in report["misses"]] == [["D4:1"]]  # type: ignore[union-attr]
