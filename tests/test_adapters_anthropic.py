"""The Anthropic Messages adapter against the loopback server."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from retold import AdapterHTTPError, UsageError
from retold.adapters import (
    AnthropicChatAdapter,
    ChatMessage,
    MalformedResponseError,
    RetryPolicy,
    ToolSpec,
)
from retold.testing import (
    LoopbackServer,
    Reply,
    anthropic_json,
    anthropic_message,
    loopback_fixture,
    tool_call,
)

KEY = "loopback-" + "k3y-anthr0pic-4b2d"
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02)

loopback = loopback_fixture(api_key=KEY)

MakeAdapter = Callable[..., AnthropicChatAdapter]

SEARCH_TOOL = ToolSpec(
    name="memory_search",
    description="Search the user's memory.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
USER = [ChatMessage.system("Be brief."), ChatMessage.user("What tea do I like?")]


@pytest.fixture
def make_adapter(loopback: LoopbackServer) -> MakeAdapter:
    def make(**kw: Any) -> AnthropicChatAdapter:
        kw.setdefault("base_url", loopback.anthropic_base_url)
        kw.setdefault("api_key", KEY)
        kw.setdefault("retry", FAST_RETRY)
        return AnthropicChatAdapter(kw.pop("model", "claude-test"), **kw)

    return make


def exception_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)


@pytest.mark.anyio
async def test_happy_path(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """Text, usage and stop reason come back; the system prompt is hoisted and headers are set."""
    loopback.messages.push(anthropic_message("Green tea.", usage=(30, 4)))
    async with make_adapter(max_tokens=256) as model:
        reply = await model.complete(USER, temperature=0.2)
    assert reply.text == "Green tea."
    assert reply.finish_reason == "end_turn"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (30, 4)
    assert (reply.model, reply.provider) == ("claude-test", "anthropic")
    (request,) = loopback.messages.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 256,
        "system": "Be brief.",
        "temperature": 0.2,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What tea do I like?"}]}
        ],
    }


@pytest.mark.anyio
async def test_tool_use_round_trip(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """Parallel tool_use blocks are parsed; their results go back merged in one user turn."""
    loopback.messages.push(
        anthropic_message(
            "Let me look.",
            tool_calls=[
                tool_call("memory_search", {"query": "tea"}, id="toolu_1"),
                tool_call("memory_search", {"query": "drinks"}, id="toolu_2"),
            ],
        ),
        anthropic_message("You like green tea."),
    )
    async with make_adapter() as model:
        first = await model.complete(USER, tools=[SEARCH_TOOL], tool_choice="required")
        assert first.text == "Let me look."
        assert first.finish_reason == "tool_use"
        assert [(c.id, c.arguments) for c in first.tool_calls] == [
            ("toolu_1", {"query": "tea"}),
            ("toolu_2", {"query": "drinks"}),
        ]
        history = [
            *USER,
            first.to_message(),
            ChatMessage.tool_result(first.tool_calls[0], "green tea"),
            ChatMessage.tool_result(first.tool_calls[1], "no match", is_error=True),
        ]
        final = await model.complete(history, tools=[SEARCH_TOOL])
    assert final.text == "You like green tea."
    sent = loopback.messages.requests
    assert sent[0].json["tools"] == [
        {
            "name": "memory_search",
            "description": "Search the user's memory.",
            "input_schema": SEARCH_TOOL.parameters,
        }
    ]
    assert sent[0].json["tool_choice"] == {"type": "any"}
    assert sent[1].json["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "memory_search",
                    "input": {"query": "tea"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "memory_search",
                    "input": {"query": "drinks"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "green tea"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "no match",
                    "is_error": True,
                },
            ],
        },
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("memory_search", {"type": "tool", "name": "memory_search"}),
    ],
    ids=["auto", "none", "named"],
)
async def test_tool_choice_mapping(
    make_adapter: MakeAdapter, loopback: LoopbackServer, choice: str, wire: dict[str, str]
) -> None:
    """Neutral tool_choice values map onto the Messages API's tool_choice objects."""
    async with make_adapter() as model:
        await model.complete(USER, tools=[SEARCH_TOOL], tool_choice=choice)
    assert loopback.messages.requests[0].json["tool_choice"] == wire


@pytest.mark.anyio
async def test_json_output_through_forced_tool(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """response_schema forces a single tool with that schema; its input becomes the reply text."""
    schema = {"type": "object", "properties": {"tea": {"type": "string"}}}
    loopback.messages.push(anthropic_json({"tea": "green"}))
    async with make_adapter() as model:
        reply = await model.complete(USER, response_schema=schema)
    assert reply.parse_json() == {"tea": "green"}
    assert reply.tool_calls == ()
    sent = loopback.messages.requests[0].json
    assert sent["tools"][0]["input_schema"] == schema
    assert sent["tool_choice"] == {"type": "tool", "name": sent["tools"][0]["name"]}


@pytest.mark.anyio
async def test_json_output_missing_forced_tool_is_malformed(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """A structured-output reply without the forced tool call raises MalformedResponseError."""
    loopback.messages.push(anthropic_message("{not via the tool}"))
    async with make_adapter() as model:
        with pytest.raises(MalformedResponseError, match="forced"):
            await model.complete(USER, json_mode=True)


@pytest.mark.anyio
async def test_json_output_with_tools_is_refused(make_adapter: MakeAdapter) -> None:
    """Structured output plus tools is a UsageError, since the forced tool excludes the others."""
    async with make_adapter() as model:
        with pytest.raises(UsageError, match="cannot be combined"):
            await model.complete(USER, tools=[SEARCH_TOOL], response_schema={"type": "object"})


@pytest.mark.anyio
async def test_system_only_conversation_is_refused(make_adapter: MakeAdapter) -> None:
    """A request with no user or assistant turn is a UsageError before any network call."""
    async with make_adapter() as model:
        with pytest.raises(UsageError, match="at least one"):
            await model.complete([ChatMessage.system("only me")])


@pytest.mark.anyio
@pytest.mark.parametrize(
    "limited",
    [Reply.rate_limited(retry_after=0), Reply.error(529, "overloaded")],
    ids=["429", "529-overloaded"],
)
async def test_429_then_success_within_deadline(
    make_adapter: MakeAdapter, loopback: LoopbackServer, limited: Reply
) -> None:
    """A 429 (or 529 overloaded) is retried within the deadline and the retry's answer wins."""
    loopback.messages.push(limited, anthropic_message("after the wait"))
    async with make_adapter() as model:
        reply = await model.complete(USER, deadline=anyio.current_time() + 5)
    assert reply.text == "after the wait"
    assert len(loopback.messages.requests) == 2


@pytest.mark.anyio
async def test_429_past_the_deadline_fails_fast(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """A Retry-After beyond the deadline raises at once with status 429."""
    loopback.messages.push(Reply.rate_limited(retry_after=20))
    started = anyio.current_time()
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER, deadline=anyio.current_time() + 1)
    assert anyio.current_time() - started < 1
    assert caught.value.status_code == 429
    assert len(loopback.messages.requests) == 1


@pytest.mark.anyio
async def test_5xx_exhausts_retries(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """Repeated 500s are retried max_attempts times, then raised with status and body."""
    loopback.messages.push(*[Reply.error(500, "internal")] * 3)
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 500
    assert "internal" in caught.value.body
    assert len(loopback.messages.requests) == 3


@pytest.mark.anyio
async def test_read_timeout(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """A reply slower than read_timeout raises AdapterHTTPError with status 0."""
    loopback.messages.push(anthropic_message("late", delay=2))
    async with make_adapter(read_timeout=0.05) as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 0
    assert len(loopback.messages.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        Reply.malformed(b'{"type": "message", "content": [{"ty'),
        Reply.json({"type": "message"}),
        Reply.json({"content": [{"type": "tool_use", "name": "f", "id": "t", "input": "x"}]}),
        Reply.json({"content": [{"type": "text", "text": 7}]}),
        Reply.truncated({"type": "message", "content": [{"type": "text", "text": "y" * 300}]}),
    ],
    ids=["not-json", "no-content", "bad-tool-input", "bad-text", "truncated"],
)
async def test_malformed_and_truncated_bodies(
    make_adapter: MakeAdapter, loopback: LoopbackServer, bad: Reply
) -> None:
    """A 2xx body that is cut off, not JSON or the wrong shape raises MalformedResponseError."""
    loopback.messages.push(bad)
    async with make_adapter() as model:
        with pytest.raises(MalformedResponseError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 200


@pytest.mark.anyio
async def test_unknown_blocks_are_ignored(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """Block kinds the adapter does not use (e.g. thinking) are skipped, text is kept."""
    loopback.messages.push(
        Reply.json(
            {
                "model": "claude-test",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Done."},
                ],
                "stop_reason": "end_turn",
            }
        )
    )
    async with make_adapter() as model:
        reply = await model.complete(USER)
    assert reply.text == "Done."
    assert reply.usage.input_tokens == 0


@pytest.mark.anyio
async def test_api_key_never_in_logs_or_exceptions(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """Across retries, key-echoing errors, timeouts and bad bodies, the key never leaks."""
    loopback.messages.push(
        Reply.error(529, "overloaded"),
        anthropic_message("ok"),
        Reply.error(401, f"invalid x-api-key: {KEY}"),
        *[Reply.error(503, f"proxy saw {KEY}")] * 3,
        Reply.malformed(f'{{"content": "{KEY}'.encode()),
        Reply.json({"content": f"{KEY}"}),
        anthropic_message("slow", delay=1),
    )
    errors: list[AdapterHTTPError] = []
    with capture_logs() as logs:
        async with make_adapter(read_timeout=0.05) as model:
            assert KEY not in repr(model)
            assert (await model.complete(USER)).text == "ok"
            for _ in range(5):
                with pytest.raises(AdapterHTTPError) as caught:
                    await model.complete(USER)
                errors.append(caught.value)
    assert [e.status_code for e in errors] == [401, 503, 200, 200, 0]
    assert logs
    assert all(KEY not in repr(line) for line in logs)
    for exc in errors:
        assert KEY not in exception_text(exc)
        assert KEY not in exc.body


@pytest.mark.anyio
async def test_missing_key_is_rejected_by_server(loopback: LoopbackServer) -> None:
    """Without a key the request goes out without x-api-key and the 401 is surfaced."""
    async with AnthropicChatAdapter(
        "claude-test", base_url=loopback.anthropic_base_url, retry=FAST_RETRY
    ) as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 401
    assert "x-api-key" not in loopback.messages.requests[0].headers
