"""The examples run as written: offline, and against a model on the loopback server."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from retold.testing import LoopbackServer, RecordedRequest, loopback_fixture, openai_chat

from .conftest import POSTGRES_URL, STORE_KINDS, fresh_pg_schema
from .test_fitness import _small_set

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
loopback = loopback_fixture()


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model_reply(request: RecordedRequest) -> Any:
    """A scripted model: valid structured output for each policy, an echo for chat."""
    body = request.json
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    props = schema.get("properties", {})
    last = body["messages"][-1]["content"]
    if "gaps" in props:
        return openai_chat(
            json.dumps({"gaps": [{"category": "relationship_or_event", "query": "dog name"}]})
        )(request)
    if "verdicts" in props:
        ids = sorted(
            set(__import__("re").findall(r'"(r[0-9a-f]{32})"', json.dumps(body["messages"])))
        )
        verdicts = [{"id": i, "reason": "helpful"} for i in ids[:1]] + [
            {"id": i, "reason": "insufficient"} for i in ids[1:]
        ]
        return openai_chat(json.dumps({"verdicts": verdicts, "admitted": ids[:1]}))(request)
    if "decision" in props:
        return openai_chat(
            json.dumps(
                {"decision": "review", "category": None, "confidence": 0.5, "reason": "unsure"}
            )
        )(request)
    if "records" in props:
        return openai_chat(json.dumps({"records": []}))(request)
    return openai_chat(f"model says: {last}")(request)


@pytest.fixture(params=["offline", "loopback-model"])
def model_env(
    request: pytest.FixtureRequest, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Run each example with no model configured, and with RETOLD_* pointing at the loopback server."""
    for var in ("RETOLD_PROVIDER", "RETOLD_BASE_URL", "RETOLD_MODEL", "RETOLD_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    if request.param == "loopback-model":
        loopback.chat_completions.respond_with(_model_reply)
        monkeypatch.setenv("RETOLD_BASE_URL", loopback.openai_base_url)
        monkeypatch.setenv("RETOLD_MODEL", "loopback-model")
    return str(request.param)


def test_wrap_chat_loop(tmp_path: Path, model_env: str, loopback: LoopbackServer) -> None:
    """The chat-loop example answers every scripted turn and persists the transcript."""
    responses = anyio.run(lambda: load("wrap_chat_loop").main(tmp_path / "m.db"))
    assert len(responses) == 3
    if model_env == "loopback-model":
        assert all(r.startswith("model says:") for r in responses)
        assert loopback.chat_completions.requests


def test_latency_budget(tmp_path: Path, model_env: str) -> None:
    """A zero budget skips the conditional path; the chat budget runs it."""
    out = anyio.run(lambda: load("latency_budget").main(tmp_path / "m.db"))
    assert out["voice"] == "baseline_budget_exhausted"
    assert out["chat"] != "baseline_budget_exhausted"


def test_shadow_rollout(tmp_path: Path, model_env: str) -> None:
    """Shadow never applies memory; the report is read; going live follows the recorded verdict."""
    out = anyio.run(
        lambda: load("shadow_rollout").main(tmp_path / "m.db", scenarios=_small_set(tmp_path))
    )
    report = out["report"]
    assert report.turns == 5
    assert isinstance(out["live"], bool)


def test_reference_host_switches(tmp_path: Path, model_env: str) -> None:
    """Every config field is a flag; switching gaps off yields no-gap turns."""
    host = load("reference_host")
    assert set(host.SWITCHES) == {
        n for n in __import__("retold").UtilityAwareConfig.model_fields if n != "bundle"
    }
    out = anyio.run(
        lambda: host.main(["--db", str(tmp_path / "m.db"), "--no-gap-enabled", "Where do I live?"])
    )
    assert out == ["baseline_no_gaps"]


def test_reference_host_rejects_bad_switch(tmp_path: Path) -> None:
    """A bad switch value exits with a one-line error naming the field."""
    proc = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "reference_host.py"),
            "--db",
            str(tmp_path / "m.db"),
            "--gap-timeout-ms",
            "soon",
            "x",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "gap_timeout_ms" in proc.stderr


def test_example_script_prints_no_log_lines(tmp_path: Path) -> None:
    """Run as a script, an example's stdout holds only its own lines: Retold's logs are
    warnings-only and on stderr, with the host's one logging line from the README."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RETOLD_PROVIDER", "RETOLD_BASE_URL", "RETOLD_MODEL", "RETOLD_API_KEY")
    }
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "wrap_chat_loop.py"), "--db", str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("bundle: offline-reference")
    assert lines[-1] == f"memory is in {tmp_path / 'm.db'}"
    assert not [line for line in lines if "[debug" in line or "[info" in line]


def test_privacy_requests(tmp_path: Path) -> None:
    """The access request exports the user's words; after the erasure (and vacuum) neither
    the export nor the database file holds them, and the other user keeps theirs; the
    retention job blanks the other user's small talk and keeps what his record came from."""
    out = tmp_path / "alice.json"
    result = anyio.run(lambda: load("privacy_requests").main(tmp_path / "m.db", out))
    assert result == {
        "exported_records": result["exported_records"],
        "words_before": True,
        "words_after": False,
        "other_kept": True,
        "small_talk_pruned": True,
    }
    assert isinstance(result["exported_records"], int) and result["exported_records"] > 0
    assert "Okonkwo" in out.read_text(encoding="utf-8")
    assert out.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_move_store(tmp_path: Path, kind: str) -> None:
    """The memory served on the SQLite file moves to another file or to PostgreSQL, and a
    new session there has the user's profile and finds the stored fact."""
    expected = {"copied_records": 2, "profile_kept": True, "fact_found": True, "decisions": 3}
    if kind == "sqlite":
        to = str(tmp_path / "moved.db")
        assert anyio.run(lambda: load("move_store").main(tmp_path / "m.db", to)) == expected
        return
    with fresh_pg_schema() as schema:
        assert POSTGRES_URL is not None
        to = f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}retold_schema={schema}"
        assert anyio.run(lambda: load("move_store").main(tmp_path / "m.db", to)) == expected
