"""The loopback server: real sockets on 127.0.0.1, scripted replies, recorded requests."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from retold.testing import (
    LoopbackServer,
    Reply,
    anthropic_json,
    anthropic_message,
    embeddings_reply,
    hashed_embedding,
    loopback_fixture,
    openai_chat,
    openai_json,
    tool_call,
)

loopback = loopback_fixture()

CHAT = "/v1/chat/completions"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}


def post(server: LoopbackServer, path: str, body: object, **kw: object) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=5, **kw)  # type: ignore[arg-type]


def test_binds_loopback_interface_on_ephemeral_port(loopback: LoopbackServer) -> None:
    """The server listens on 127.0.0.1 and advertises provider base URLs."""
    assert loopback.url.startswith("http://127.0.0.1:")
    assert loopback.port > 0
    assert loopback.openai_base_url == f"{loopback.url}/v1"
    assert loopback.anthropic_base_url == loopback.url


def test_records_every_request(loopback: LoopbackServer) -> None:
    """Method, path, lower-cased headers and body are recorded per route and overall."""
    post(loopback, CHAT, {"model": "m", "messages": []}, headers={"X-Trace": "t1"})
    (request,) = loopback.chat_completions.requests
    assert request.method == "POST"
    assert request.path == CHAT
    assert request.headers["x-trace"] == "t1"
    assert request.json == {"model": "m", "messages": []}
    assert loopback.requests == [request]


def test_scripted_replies_are_fifo_then_default_echo(loopback: LoopbackServer) -> None:
    """Scripted replies are used in order; an empty queue falls back to echoing the user."""
    loopback.chat_completions.push(openai_chat("one"), openai_json({"n": 2}))
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    texts = [post(loopback, CHAT, body).json()["choices"][0]["message"]["content"] for _ in "abc"]
    assert texts == ["one", '{"n": 2}', "echo: hello"]
    assert loopback.chat_completions.pending == 0


def test_openai_tool_calls_follow_the_wire_format(loopback: LoopbackServer) -> None:
    """Scripted tool calls come back as function calls with JSON-string arguments."""
    loopback.chat_completions.push(
        openai_chat(None, tool_calls=[tool_call("lookup", {"q": "tea"}, id="call_1")])
    )
    choice = post(loopback, CHAT, {"model": "m", "messages": []}).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "call_1"
    assert call["function"] == {"name": "lookup", "arguments": '{"q": "tea"}'}


def test_anthropic_route_speaks_messages_api(loopback: LoopbackServer) -> None:
    """The Messages route answers with content blocks and needs anthropic-version."""
    loopback.messages.push(anthropic_message("hi", tool_calls=[tool_call("f", {"a": 1})]))
    body = {"model": "c", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    answer = post(loopback, "/v1/messages", body, headers=ANTHROPIC_HEADERS).json()
    assert [b["type"] for b in answer["content"]] == ["text", "tool_use"]
    assert answer["stop_reason"] == "tool_use"
    assert post(loopback, "/v1/messages", body).status_code == 400


def test_anthropic_json_answers_the_forced_tool(loopback: LoopbackServer) -> None:
    """anthropic_json replies through whichever tool the request forced."""
    loopback.messages.push(anthropic_json({"ok": True}))
    body = {
        "model": "c",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
        "tool_choice": {"type": "tool", "name": "emit"},
    }
    answer = post(loopback, "/v1/messages", body, headers=ANTHROPIC_HEADERS).json()
    assert answer["content"][0] == {
        "type": "tool_use",
        "id": answer["content"][0]["id"],
        "name": "emit",
        "input": {"ok": True},
    }


def test_rate_limited_reply_carries_retry_after(loopback: LoopbackServer) -> None:
    """Reply.rate_limited sends 429 with Retry-After and retry-after-ms as asked."""
    loopback.chat_completions.push(Reply.rate_limited(3, retry_after_ms=2500))
    response = post(loopback, CHAT, {})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3"
    assert response.headers["retry-after-ms"] == "2500"


def test_malformed_reply_is_complete_but_not_json(loopback: LoopbackServer) -> None:
    """A malformed reply arrives whole (status 200) and fails to parse."""
    loopback.chat_completions.push(Reply.malformed())
    response = post(loopback, CHAT, {})
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_truncated_reply_closes_before_content_length(loopback: LoopbackServer) -> None:
    """A truncated reply promises more bytes than it sends, then closes the connection."""
    loopback.chat_completions.push(Reply.truncated({"text": "x" * 200}))
    with pytest.raises(httpx.RemoteProtocolError):
        post(loopback, CHAT, {})


def test_dropped_reply_sends_nothing(loopback: LoopbackServer) -> None:
    """Reply.dropped closes the connection without a status line."""
    loopback.chat_completions.push(Reply.dropped())
    with pytest.raises(httpx.RemoteProtocolError):
        post(loopback, CHAT, {})


def test_delay_holds_reply_back(loopback: LoopbackServer) -> None:
    """A delayed reply is not sent before its delay has passed."""
    loopback.chat_completions.push(openai_chat("slow", delay=0.05))
    started = time.monotonic()
    assert post(loopback, CHAT, {}).status_code == 200
    assert time.monotonic() - started >= 0.05


def test_stop_cuts_pending_delays_short() -> None:
    """Stopping the server does not wait out a long scripted delay."""
    server = LoopbackServer().start()
    server.chat_completions.push(openai_chat("never", delay=30))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}{CHAT}", json={}, timeout=0.05)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5
    server.stop()  # idempotent


def test_api_key_is_enforced_when_configured() -> None:
    """With api_key set, a missing or wrong key gets 401 and the right key gets through."""
    key = "loopback-" + "secret-1234"
    with LoopbackServer(api_key=key) as server:
        assert post(server, CHAT, {}).status_code == 401
        assert post(server, CHAT, {}, headers={"authorization": "Bearer nope"}).status_code == 401
        ok = post(server, CHAT, {"messages": []}, headers={"authorization": f"Bearer {key}"})
        assert ok.status_code == 200
        headers = {"x-api-key": key, **ANTHROPIC_HEADERS}
        body = {"max_tokens": 5, "messages": []}
        assert post(server, "/v1/messages", body, headers=headers).status_code == 200
        assert key not in post(server, CHAT, {}).text


def test_default_embeddings_are_deterministic(loopback: LoopbackServer) -> None:
    """Unscripted embeddings are hashed unit vectors of the requested or default size."""
    data = post(loopback, "/v1/embeddings", {"model": "e", "input": ["tea time", "x"]}).json()
    assert [d["embedding"] for d in data["data"]] == [
        hashed_embedding("tea time", 8),
        hashed_embedding("x", 8),
    ]
    sized = post(loopback, "/v1/embeddings", {"input": "tea", "dimensions": 4}).json()
    assert len(sized["data"][0]["embedding"]) == 4
    norm = sum(x * x for x in hashed_embedding("green tea", 16))
    assert abs(norm - 1.0) < 1e-9


def test_scripted_embeddings_can_arrive_out_of_order(loopback: LoopbackServer) -> None:
    """embeddings_reply(shuffle=True) reverses data order but keeps indices."""
    loopback.embeddings.push(embeddings_reply([[1.0], [2.0]], shuffle=True))
    data = post(loopback, "/v1/embeddings", {"input": ["a", "b"]}).json()["data"]
    assert [(d["index"], d["embedding"]) for d in data] == [(1, [2.0]), (0, [1.0])]


def test_unknown_paths_404_and_custom_routes_can_be_scripted(loopback: LoopbackServer) -> None:
    """Unknown paths get 404; route(path) scripts any extra endpoint."""
    assert httpx.get(f"{loopback.url}/v1/models", timeout=5).status_code == 404
    loopback.route("/v1/models").push(Reply.json({"data": []}))
    assert httpx.get(f"{loopback.url}/v1/models", timeout=5).json() == {"data": []}
    assert httpx.get(f"{loopback.url}{CHAT}", timeout=5).status_code == 405


def test_responder_replaces_default(loopback: LoopbackServer) -> None:
    """respond_with installs a request-dependent default."""
    loopback.chat_completions.respond_with(
        lambda request: openai_chat(str(len(request.json["messages"])))(request)
    )
    body = {"messages": [{"role": "user", "content": "a"}] * 3}
    assert post(loopback, CHAT, body).json()["choices"][0]["message"]["content"] == "3"


@pytest.mark.anyio
async def test_serves_async_clients_on_every_backend(loopback: LoopbackServer) -> None:
    """An httpx.AsyncClient on asyncio or trio reaches the threaded server."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.post(
            f"{loopback.openai_base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "ping"}]},
        )
    assert response.json()["choices"][0]["message"]["content"] == "echo: ping"
    assert response.json()["model"] == "m"


def test_context_manager_starts_and_stops() -> None:
    """The server runs inside `with` and refuses connections after it."""
    with LoopbackServer() as server:
        url = server.url
        assert post(server, CHAT, {"messages": []}).status_code == 200
    assert repr(server) == "LoopbackServer(stopped)"
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{url}{CHAT}", json={}, timeout=1)


def test_public_names_are_importable() -> None:
    """retold.testing.__all__ has no duplicates and every name in it exists."""
    import retold.testing as testing

    assert len(testing.__all__) == len(set(testing.__all__))
    assert all(hasattr(testing, name) for name in testing.__all__)
