"""The README stays true: its snippets run as written, its commands do what it says, and its
claims about shadow mode and model-call costs hold on a real (loopback) model server."""

from __future__ import annotations

import ast
import importlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from retold import Principal, SQLiteStore, TurnOptions
from retold._store import draft_from
from retold.cli import main
from retold.testing import LoopbackServer, RecordedRequest, loopback_fixture, openai_chat

README = Path(__file__).resolve().parents[1] / "README.md"
loopback = loopback_fixture()


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", _text(), re.S)


def _run_blocks() -> list[list[str]]:
    """The ``sh`` blocks marked ``<!-- test: run -->``, as lists of command lines."""
    blocks = re.findall(r"<!-- test: run -->\n```sh\n(.*?)```", _text(), re.S)
    return [[line for line in b.splitlines() if line.strip()] for b in blocks]


def _block_with(marker: str) -> str:
    (block,) = [b for b in _python_blocks() if marker in b]
    return block


def _cli(
    capsys: pytest.CaptureFixture[str], line: str, db: Path, **subst: str
) -> tuple[int, str, str]:
    """Run one README command line in-process, with ``memory.db`` pointing into tmp_path."""
    words = shlex.split(line)
    assert words[0] == "retold", line
    argv = [str(db) if w == "memory.db" else subst.get(w, w) for w in words[1:]]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = cwd / "snippet.py"
    path.write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_readme_python_blocks_import_real_names() -> None:
    """Each ```python block parses and its `from X import Y` names resolve."""
    blocks = _python_blocks()
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_readme_cli_commands_exist() -> None:
    """Every `retold <group> <command>` line in the README is a real command."""
    from retold.cli import build_parser

    parser = build_parser()
    for line in _text().splitlines():
        if line.startswith("retold "):
            words = line.split()
            args = [w for w in words[1:3] if not w.startswith("-")]
            try:
                parser.parse_args([*args, "--help"])
            except SystemExit as exc:
                assert exc.code == 0, line


def test_first_cli_example_has_a_visible_effect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first CLI block, run as written: the added fact is found by search and listed as conditional."""
    first = _run_blocks()[0]
    db = tmp_path / "memory.db"
    outputs = []
    for line in first:
        code, out, err = _cli(capsys, line, db)
        assert code == 0, (line, err)
        outputs.append(out)
    added, found, listed = outputs
    assert "My sister Ines lives in Porto." in found
    assert "[fact, conditional] My sister Ines lives in Porto." in listed
    assert added.split()[0] in listed


def test_preference_path_runs_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The preference snippet and the commands after it: one preference promoted, one resolved
    through review, both in the profile; the snippet prints no log line on stdout."""
    proc = _run_snippet(_block_with("first_session"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # the host's one logging line keeps debug/info lines away
    db = tmp_path / "memory.db"
    listed, before, queue, resolved, after = _run_blocks()[1]
    code, out, _ = _cli(capsys, listed, db)
    assert code == 0 and "[preference, ambient] Please always answer me concisely." in out
    code, out, _ = _cli(capsys, before, db)
    assert code == 0 and "Please always answer me concisely." in out
    assert "Portuguese" not in out
    code, out, _ = _cli(capsys, queue, db)
    assert code == 0
    (review_id,) = re.findall(r"^(rv\w+)\s", out, re.M)
    assert "Portuguese" not in out  # the queue lists ids and reasons, not record text
    code, out, err = _cli(capsys, resolved, db, **{"<REVIEW_ID>": review_id})
    assert code == 0 and "applied=True" in out, err
    code, out, _ = _cli(capsys, after, db)
    assert code == 0
    assert "Please always answer me concisely." in out
    assert "Bullet points in Portuguese, please." in out


def _scripted_model(request: RecordedRequest) -> Any:
    """A model that follows each policy's schema: one gap, admits every candidate, promotes,
    extracts the one stated preference; chat requests get an echo."""
    body = request.json
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    props = schema.get("properties", {})
    everything = json.dumps(body["messages"])
    if "gaps" in props:
        gaps = [{"category": "relationship_or_event", "query": "dog name"}]
        return openai_chat(json.dumps({"gaps": gaps}))(request)
    if "verdicts" in props:
        contents = " ".join(str(m["content"]) for m in body["messages"])
        ids = sorted(set(re.findall(r'id="(r[0-9a-f]{32})"', contents)))
        verdicts = [{"id": i, "reason": "helpful"} for i in ids]
        return openai_chat(json.dumps({"verdicts": verdicts, "admitted": ids}))(request)
    if "decision" in props:
        out = {"decision": "promote", "category": "answer_style", "confidence": 0.95}
        return openai_chat(json.dumps({**out, "reason": "explicit standing instruction"}))(request)
    if "records" in props:
        records = []
        if "Always answer me concisely." in everything:
            records += [
                {
                    "kind": "preference",
                    "text": "Always answer me concisely.",
                    "evidence_turns": [0],
                    "confidence": 0.9,
                },
                {
                    "kind": "relationship",
                    "text": "My sister Ines lives in Porto.",
                    "evidence_turns": [0],
                    "confidence": 0.9,
                },
            ]
        return openai_chat(json.dumps({"records": records}))(request)
    return openai_chat(f"model says: {body['messages'][-1]['content']}")(request)


def test_wrap_snippet_runs_against_a_model_server(tmp_path: Path, loopback: LoopbackServer) -> None:
    """The first snippet, pointed at a loopback model server: one line of output, no log lines."""
    loopback.chat_completions.respond_with(_scripted_model)
    code = _block_with("OpenAIChatAdapter").replace(
        "http://localhost:11434/v1", loopback.openai_base_url
    )
    proc = _run_snippet(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("model says: Where does my sister live again? baseline_")
    assert (tmp_path / "memory.db").exists()
    # system_prompt= is sent first on every chat call.
    chats = [r.json for r in loopback.chat_completions.requests if "response_format" not in r.json]
    assert chats and all(
        c["messages"][0]["content"].startswith("You are Acme's support assistant.") for c in chats
    )


def _kind(request: RecordedRequest) -> str:
    body = request.json
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    for prop, kind in (
        ("gaps", "planner"),
        ("verdicts", "judge"),
        ("decision", "classifier"),
        ("records", "extractor"),
    ):
        if prop in schema.get("properties", {}):
            return kind
    return "chat"


def test_model_calls_and_shadow_mode_as_the_readme_states(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """Reference bundle: 1 call while there is no memory, then 2 a turn, +1 admission with
    candidates, +1 regeneration live, 1 at budget 0, 1 extraction + 1 classification (not
    for the relationship) at session end; shadow sends the ambient
    profile and offers memory_search, but never puts conditional memory in a chat call."""
    from retold.adapters import MemoryChat, OpenAIChatAdapter
    from retold.policy.reference import get_bundle

    loopback.chat_completions.respond_with(_scripted_model)
    alice = Principal(tenant="acme", principal="alice")
    bundle = get_bundle("reference")

    def requests() -> list[RecordedRequest]:
        return list(loopback.chat_completions.requests)

    def since(n: int) -> list[str]:
        return [_kind(r) for r in requests()[n:]]

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with SQLiteStore(tmp_path / "m.db") as store:
            async with OpenAIChatAdapter("m", base_url=loopback.openai_base_url) as model:
                shadow = MemoryChat.from_bundle(
                    store=store, bundle=bundle, model=model, config=bundle.config(shadow=True)
                )
                live = MemoryChat.from_bundle(
                    store=store, bundle=bundle, model=model, require_fitness=False
                )
                n = len(requests())
                await shadow.turn(
                    alice, "s1", "Always answer me concisely. My sister Ines lives in Porto."
                )
                seen["first turn"] = since(n)
                store.add(alice, draft_from({"text": "I live in Porto.", "kind": "fact"}))
                n = len(requests())
                await shadow.turn(alice, "s1", "What should I cook tonight?")
                seen["plain turn"] = since(n)
                n = len(requests())
                await shadow.end_session(alice, "s1")
                seen["session end"] = since(n)
                store.add(alice, draft_from({"text": "My dog is called Rex.", "kind": "fact"}))
                n = len(requests())
                reply = await shadow.turn(alice, "s2", "What is my dog called?")
                seen["shadow turn"] = since(n)
                seen["shadow requests"] = [r.json for r in requests()[n:]]
                seen["shadow decision"] = reply.decision
                n = len(requests())
                reply = await live.turn(alice, "s3", "What is my dog called?")
                seen["live turn"] = since(n)
                seen["live last"] = requests()[-1].json
                seen["live decision"] = reply.decision
                n = len(requests())
                await live.turn(
                    alice, "s3", "And my dog?", options=TurnOptions(latency_budget_ms=0)
                )
                seen["budget 0"] = since(n)
        return seen

    seen = anyio.run(scenario)
    assert seen["first turn"] == ["chat"]  # no conditional memory yet: nothing to plan for
    assert sorted(seen["plain turn"]) == ["chat", "planner"]  # no candidates: no admission
    # Two records extracted; only the preference can become ambient, so one classification.
    assert sorted(seen["session end"]) == ["classifier", "extractor"]
    assert sorted(seen["shadow turn"]) == ["chat", "judge", "planner"]
    assert sorted(seen["live turn"]) == ["chat", "chat", "judge", "planner"]
    assert seen["budget 0"] == ["chat"]

    shadow_decision = seen["shadow decision"]
    assert shadow_decision.shadow and not shadow_decision.applied
    assert shadow_decision.disposition.value == "regenerated"  # what live would have done
    (draft,) = [r for r in seen["shadow requests"] if "response_format" not in r]
    assert "Always answer me concisely." in draft["messages"][0]["content"]  # the profile
    assert "Rex" not in json.dumps(draft["messages"])  # no conditional memory
    assert [t["function"]["name"] for t in draft["tools"]] == ["memory_search"]
    (judge,) = [r for r in seen["shadow requests"] if "verdicts" in json.dumps(r)]
    assert "Rex" in json.dumps(judge["messages"])  # the judge sees the candidates
    assert seen["live decision"].applied
    assert "Rex" in json.dumps(seen["live last"]["messages"])  # live: the regeneration has it
