"""tools/synth_relations.py writes relation data sets that the evidence benchmark reads, and
on them the relation path finds what the question's words alone do not."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from retold import SQLiteStore
from retold._bench_evidence import run_evidence
from retold._packing import PackingConfig
from retold._retrieval import RetrievalConfig
from retold._tokens import token_counter

sys.path.insert(0, str(Path(__file__).parent.parent / "tools"))
import synth_relations


def write(tmp_path: Path, name: str, *argv: str) -> list[dict[str, Any]]:
    out = tmp_path / name
    synth_relations.main([str(out), *argv])
    data: list[dict[str, Any]] = json.loads(out.read_text("utf-8"))
    return data


def recall(tmp_path: Path, data: list[dict[str, Any]], **config: object) -> float:
    """Candidate recall at the orchestrator's cap of 8, lexical retrieval, no gap planner."""
    cfg = RetrievalConfig(dense=False).model_copy(update=config)
    with SQLiteStore(tmp_path / f"e{len(list(tmp_path.iterdir()))}.db") as store:
        report = anyio.run(
            lambda: run_evidence(
                data,
                budget=4096,
                store=store,
                config=cfg,
                packing=PackingConfig(),
                counter=token_counter("cl100k_base"),
                candidates=8,
                path="orchestrator",
            )
        )
    return float(report["rate"])


def test_the_same_arguments_write_the_same_bytes(tmp_path: Path) -> None:
    write(tmp_path, "a.json", "--seed", "2", "--mentions", "2")
    write(tmp_path, "b.json", "--seed", "2", "--mentions", "2")
    write(tmp_path, "c.json", "--seed", "2", "--mentions", "2", "--variant", "test")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_bytes() != (tmp_path / "c.json").read_bytes()


def test_every_question_has_its_introduction_and_fact_as_evidence(tmp_path: Path) -> None:
    data = write(tmp_path, "d.json", "--seed", "1", "--by-other")
    for sample in data:
        conversation = sample["conversation"]
        turns = {
            t["dia_id"]: t
            for key, value in conversation.items()
            if key.startswith("session_") and not key.endswith("_date_time")
            for t in value
        }
        assert len(sample["qa"]) == 18  # two speakers, three people, three facts
        for qa in sample["qa"]:
            intro, fact = (turns[e] for e in qa["evidence"])
            owner = qa["question"].split("'s ")[0].split()[-1]
            # --by-other: the other speaker introduces the owner's person ("your brother").
            assert intro["speaker"] != owner and "your " in intro["text"]
            assert fact["speaker"] == owner and qa["answer"] in fact["text"]


@pytest.mark.parametrize(
    "options", [(), ("--chatter", "80"), ("--ask-by-name",)], ids=["plain", "chatter", "by-name"]
)
def test_the_relation_path_reaches_the_fact_through_the_introduction(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """Without the path a question by relation shares no word with the fact's turn; with it,
    most questions get both turns among 8, also when every relation word is used 80 more
    times after its introduction, and when the question names the person whom the fact
    calls by relation."""
    data = write(tmp_path, "r.json", "--seed", "1", "--mentions", "6", *options)
    off = recall(tmp_path, data, relation_path=False)
    on = recall(tmp_path, data)
    assert off < 0.2
    assert on > 0.75


def test_the_orchestrator_path_gives_the_planner_s_queries_the_turn_as_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The offline planner lower-cases the question into its gap query ("luis work"); as in
    the orchestrator, the question is the search's context, so the names in it still count
    (without it, 11% of these questions had their evidence among the 8)."""
    from retold.cli import main

    write(tmp_path, "n.json", "--seed", "1", "--mentions", "6", "--ask-by-name")
    argv = ["bench", "evidence", "--data", str(tmp_path / "n.json"), "--path", "orchestrator"]
    argv += ["--bundle", "offline-reference", "--retrieval", "lexical", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["questions_without_gap"] == 0
    assert report["rate"] > 0.75
