"""Structured output falls back when a server refuses ``json_schema`` (llama.cpp answers 500)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from retold import AdapterHTTPError, SQLiteStore
from retold._keys import KeyFile
from retold.adapters import ChatMessage, OpenAIChatAdapter, RetryPolicy
from retold.adapters.openai import refuses_structured_output
from retold.cli import main
from retold.gateway import GatewayConfig, build_gateway
from retold.testing import (
    LoopbackServer,
    RecordedRequest,
    Reply,
    loopback_fixture,
    openai_chat,
    openai_json,
)

loopback = loopback_fixture()

SCHEMA = {"type": "object", "properties": {"tea": {"type": "string"}}, "required": ["tea"]}
USER = [ChatMessage.user("Which tea?")]
FAST = RetryPolicy(initial_backoff=0.001, jitter=0)
# llama-cpp-python's server validates response_format.type as "text" | "json_object"; its
# route handler (llama_cpp/server/errors.py) turns the validation error into a 500 carrying
# the error's text. This body follows that shape (read from the source; not captured live).
LLAMA_REFUSAL = Reply.json(
    {
        "error": {
            "message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
            "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    },
    status=500,
)


def _adapter(loopback: LoopbackServer) -> OpenAIChatAdapter:
    return OpenAIChatAdapter("m", base_url=loopback.openai_base_url, retry=FAST)


@pytest.mark.anyio
async def test_json_schema_refusal_falls_back_to_json_object_with_schema(
    loopback: LoopbackServer,
) -> None:
    """A 500 naming response_format is not retried; the same call succeeds with json_object."""
    loopback.chat_completions.push(LLAMA_REFUSAL, openai_json({"tea": "green"}))
    async with _adapter(loopback) as model:
        with capture_logs() as logs:
            reply = await model.complete(USER, response_schema=SCHEMA)
        assert reply.parse_json() == {"tea": "green"}
        assert model.accepted_structured_output == "json_object"
        loopback.chat_completions.push(openai_json({"tea": "black"}))
        await model.complete(USER, response_schema=SCHEMA)
    sent = [r.json["response_format"] for r in loopback.chat_completions.requests]
    assert [f["type"] for f in sent] == ["json_schema", "json_object", "json_object"]
    assert sent[1]["schema"] == SCHEMA
    events = [e["event"] for e in logs]
    assert "structured_output_refused" in events and "structured_output_mode_accepted" in events


@pytest.mark.anyio
async def test_second_refusal_falls_back_to_prompt_mode(loopback: LoopbackServer) -> None:
    """A server refusing json_object too is served in prompt mode: no response_format at all."""
    loopback.chat_completions.push(
        LLAMA_REFUSAL,
        Reply.error(400, "response_format is not supported"),
        openai_json({"tea": "oolong"}),
    )
    async with _adapter(loopback) as model:
        reply = await model.complete(USER, response_schema=SCHEMA)
        assert model.accepted_structured_output == "prompt"
    assert reply.parse_json() == {"tea": "oolong"}
    last = loopback.chat_completions.requests[-1].json
    assert "response_format" not in last
    assert last["messages"][0]["role"] == "system" and '"tea"' in last["messages"][0]["content"]


@pytest.mark.anyio
async def test_transient_500_is_retried_not_taken_for_a_refusal(loopback: LoopbackServer) -> None:
    """A plain 500 keeps its retries and the json_schema mode; only a named refusal falls back."""
    loopback.chat_completions.push(Reply.error(500, "overloaded"), openai_json({"tea": "green"}))
    async with _adapter(loopback) as model:
        await model.complete(USER, response_schema=SCHEMA)
        assert model.accepted_structured_output == "json_schema"
    sent = [r.json["response_format"]["type"] for r in loopback.chat_completions.requests]
    assert sent == ["json_schema", "json_schema"]


@pytest.mark.anyio
async def test_unstructured_calls_never_fall_back(loopback: LoopbackServer) -> None:
    """A 400 on a plain chat call is raised as is, whatever its body says."""
    loopback.chat_completions.push(Reply.error(400, "response_format is weird"))
    async with _adapter(loopback) as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
        assert model.structured_output == "json_schema"
    assert caught.value.status_code == 400
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.parametrize(
    ("status", "body", "refused"),
    [
        (500, '{"error": "response_format: json_schema not allowed"}', True),
        (422, "Invalid schema", True),
        (500, "internal error", False),
        (429, "response_format", False),
        (503, "json_schema", False),
    ],
    ids=["llama-500", "422-schema", "plain-500", "429", "503"],
)
def test_refusal_detection(status: int, body: str, refused: bool) -> None:
    """Only validation-style statuses whose body names the structured-output field count."""
    assert refuses_structured_output(status, body) is refused


@pytest.mark.anyio
async def test_gateway_turn_survives_a_refusing_upstream_and_reports_the_mode(
    loopback: LoopbackServer, tmp_path: Path
) -> None:
    """With the model-backed bundle the refused policy calls fall back; the turn answers 200."""

    def upstream(request: RecordedRequest) -> Reply:
        fmt = request.json.get("response_format")
        if fmt is not None and fmt["type"] == "json_schema":
            return LLAMA_REFUSAL
        if fmt is not None:
            return openai_chat("Sure! I think the answer is yes.")(request)  # prose, not JSON
        return openai_chat("plain answer")(request)

    loopback.chat_completions.respond_with(upstream)
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.add("acme", "alice")
    db = str(tmp_path / "g.db")
    seeded = ["memory", "add", "--db", db, "--tenant", "acme", "--principal", "alice"]
    assert main([*seeded, "--kind", "fact", "My sister Ana lives in Lisbon."]) == 0
    store = SQLiteStore(db)
    gateway = build_gateway(
        store=store,
        keys=keys,
        bundle="reference",
        live=False,
        upstream_base_url=loopback.openai_base_url,
        upstream_model="m",
        upstream_retry=FAST,
        config=GatewayConfig(upstream_model="m"),
    )
    async with (
        gateway,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gateway.app), base_url="http://gw"
        ) as client,
    ):
        response = await client.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"messages": [{"role": "user", "content": "What did I say about my sister?"}]},
        )
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "plain answer"
    assert 'retold_gateway_upstream_structured_output_mode{mode="json_object"} 1.0' in metrics
    assert 'retold_gateway_upstream_structured_output_mode{mode="json_schema"} 0.0' in metrics
    store.close()
