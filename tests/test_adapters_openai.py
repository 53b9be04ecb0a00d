"""The OpenAI-compatible chat and embeddings adapters against the loopback server."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from retold import AdapterHTTPError, UsageError
from retold._typing import Embedder
from retold.adapters import (
    AnthropicChatAdapter,
    ChatMessage,
    MalformedResponseError,
    OpenAIChatAdapter,
    OpenAIEmbedder,
    RetryPolicy,
    ToolSpec,
    from_env,
    parse_retry_after,
)
from retold.testing import (
    LoopbackServer,
    Reply,
    embeddings_reply,
    hashed_embedding,
    loopback_fixture,
    openai_chat,
    openai_json,
    tool_call,
)

# Not secret-shaped on purpose: only the adapter's own scrubbing can keep it out.
KEY = "loopback-" + "k3y-0penai-7c1f9e"
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02)

loopback = loopback_fixture(api_key=KEY)

MakeAdapter = Callable[..., OpenAIChatAdapter]
MakeEmbedder = Callable[..., OpenAIEmbedder]

SEARCH_TOOL = ToolSpec(
    name="memory_search",
    description="Search the user's memory.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
)


@pytest.fixture
def make_adapter(loopback: LoopbackServer) -> MakeAdapter:
    def make(**kw: Any) -> OpenAIChatAdapter:
        kw.setdefault("base_url", loopback.openai_base_url)
        kw.setdefault("api_key", KEY)
        kw.setdefault("retry", FAST_RETRY)
        return OpenAIChatAdapter(kw.pop("model", "test-model"), **kw)

    return make


@pytest.fixture
def make_embedder(loopback: LoopbackServer) -> MakeEmbedder:
    def make(**kw: Any) -> OpenAIEmbedder:
        kw.setdefault("base_url", loopback.openai_base_url)
        kw.setdefault("api_key", KEY)
        kw.setdefault("retry", FAST_RETRY)
        kw.setdefault("dimensions", 8)
        return OpenAIEmbedder(kw.pop("model", "embed-model"), **kw)

    return make


def exception_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)


USER = [ChatMessage.system("Be brief."), ChatMessage.user("What tea do I like?")]


# ------------------------------------------------------------------ chat: happy paths


@pytest.mark.anyio
async def test_happy_path(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """A plain reply comes back as text, usage, finish reason and model; the request is well-formed."""
    loopback.chat_completions.push(openai_chat("Green tea.", usage=(20, 3)))
    async with make_adapter() as model:
        reply = await model.complete(USER, max_tokens=50, temperature=0.0)
    assert reply.text == "Green tea."
    assert reply.tool_calls == ()
    assert reply.finish_reason == "stop"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (20, 3)
    assert reply.model == "test-model"
    assert reply.provider == "openai"
    (request,) = loopback.chat_completions.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {
        "model": "test-model",
        "stream": False,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What tea do I like?"},
        ],
        "max_tokens": 50,
        "temperature": 0.0,
    }


@pytest.mark.anyio
async def test_tool_call_round_trip(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """A tool call is parsed, and its result goes back with the call id in the next request."""
    loopback.chat_completions.push(
        openai_chat(None, tool_calls=[tool_call("memory_search", {"query": "tea"}, id="call_7")]),
        openai_chat("You like green tea."),
    )
    async with make_adapter() as model:
        first = await model.complete(USER, tools=[SEARCH_TOOL], tool_choice="auto")
        (call,) = first.tool_calls
        assert (call.id, call.name, call.arguments) == ("call_7", "memory_search", {"query": "tea"})
        assert first.text == ""
        assert first.finish_reason == "tool_calls"
        history = [*USER, first.to_message(), ChatMessage.tool_result(call, "green tea")]
        final = await model.complete(history, tools=[SEARCH_TOOL])
    assert final.text == "You like green tea."
    sent = loopback.chat_completions.requests
    assert sent[0].json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "memory_search",
                "description": "Search the user's memory.",
                "parameters": SEARCH_TOOL.parameters,
            },
        }
    ]
    assert sent[0].json["tool_choice"] == "auto"
    assert sent[1].json["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "memory_search", "arguments": '{"query": "tea"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "content": "green tea"},
    ]


@pytest.mark.anyio
async def test_forced_tool_choice_and_malformed_arguments(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """Forcing a tool names it on the wire; arguments that are not a JSON object parse to None."""
    loopback.chat_completions.push(
        openai_chat(None, tool_calls=[tool_call("memory_search", '{"query": ')])
    )
    async with make_adapter() as model:
        reply = await model.complete(USER, tools=[SEARCH_TOOL], tool_choice="memory_search")
        with pytest.raises(UsageError, match="names no tool"):
            await model.complete(USER, tools=[SEARCH_TOOL], tool_choice="other")
    (call,) = reply.tool_calls
    assert call.arguments is None
    assert call.raw_arguments == '{"query": '
    assert loopback.chat_completions.requests[0].json["tool_choice"] == {
        "type": "function",
        "function": {"name": "memory_search"},
    }


@pytest.mark.anyio
async def test_json_schema_output(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """response_schema is sent as json_schema response_format and the reply parses as JSON."""
    schema = {"type": "object", "properties": {"tea": {"type": "string"}}}
    loopback.chat_completions.push(openai_json({"tea": "green"}))
    async with make_adapter() as model:
        reply = await model.complete(USER, response_schema=schema)
    assert reply.parse_json() == {"tea": "green"}
    assert loopback.chat_completions.requests[0].json["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "response_format"),
    [("json_object", {"type": "json_object", "schema": {"type": "object"}}), ("prompt", None)],
    ids=["json_object", "prompt"],
)
async def test_json_fallback_modes(
    make_adapter: MakeAdapter,
    loopback: LoopbackServer,
    mode: str,
    response_format: dict[str, object] | None,
) -> None:
    """Servers without json_schema get json_object with the schema (or nothing), plus the schema as an instruction."""
    loopback.chat_completions.push(openai_json({"tea": "green"}))
    async with make_adapter(structured_output=mode) as model:
        reply = await model.complete(USER, response_schema={"type": "object"})
    assert reply.parse_json() == {"tea": "green"}
    sent = loopback.chat_completions.requests[0].json
    assert sent.get("response_format") == response_format
    assert sent["messages"][0]["role"] == "system"
    assert '{"type": "object"}' in sent["messages"][0]["content"]


@pytest.mark.anyio
async def test_json_mode_without_schema(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """json_mode alone asks for a json_object."""
    loopback.chat_completions.push(openai_json([1, 2]))
    async with make_adapter() as model:
        reply = await model.complete(USER, json_mode=True)
    assert reply.parse_json() == [1, 2]
    assert loopback.chat_completions.requests[0].json["response_format"] == {"type": "json_object"}


# ------------------------------------------------------------------ chat: retries and deadlines


@pytest.mark.anyio
@pytest.mark.parametrize(
    "limited",
    [
        Reply.rate_limited(retry_after=0),
        Reply.rate_limited(retry_after=None, retry_after_ms=20),
        Reply.rate_limited(retry_after=None),
    ],
    ids=["retry-after-seconds", "retry-after-ms", "backoff"],
)
async def test_429_then_success_within_deadline(
    make_adapter: MakeAdapter, loopback: LoopbackServer, limited: Reply
) -> None:
    """A 429 is retried after Retry-After (or backoff) and the retry's answer is returned."""
    loopback.chat_completions.push(limited, openai_chat("after the wait"))
    async with make_adapter() as model:
        with capture_logs() as logs:
            reply = await model.complete(USER, deadline=anyio.current_time() + 5)
    assert reply.text == "after the wait"
    assert len(loopback.chat_completions.requests) == 2
    assert [e["event"] for e in logs if e["event"] == "provider_request_retrying"] == [
        "provider_request_retrying"
    ]


@pytest.mark.anyio
async def test_429_past_the_deadline_fails_fast(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """A Retry-After longer than the time left raises at once instead of sleeping."""
    loopback.chat_completions.push(Reply.rate_limited(retry_after=30))
    started = anyio.current_time()
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER, deadline=anyio.current_time() + 2)
    assert anyio.current_time() - started < 1.5
    assert caught.value.status_code == 429
    assert "deadline" in str(caught.value)
    assert "rate limited" in caught.value.body
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.anyio
async def test_429_past_an_enclosing_cancel_scope_fails_fast(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """The deadline of a surrounding anyio.fail_after counts as the caller's deadline."""
    past = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    loopback.chat_completions.push(Reply.rate_limited(retry_after=past))
    async with make_adapter(retry=FAST_RETRY.model_copy(update={"max_retry_after": 120})) as model:
        with anyio.fail_after(2), pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 429
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.anyio
async def test_retry_after_beyond_the_cap_fails_without_a_deadline(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """A Retry-After over max_retry_after is not waited out even with no deadline."""
    loopback.chat_completions.push(Reply.rate_limited(retry_after=3600))
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError, match="max_retry_after"):
            await model.complete(USER)
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.anyio
async def test_5xx_is_retried_then_surfaces(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """5xx is retried up to max_attempts, then raised with status and body."""
    loopback.chat_completions.push(*[Reply.error(500, "boom")] * 3)
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 500
    assert "boom" in caught.value.body
    assert "3 attempts" in str(caught.value)
    assert len(loopback.chat_completions.requests) == 3


@pytest.mark.anyio
async def test_5xx_then_success(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """A transient 503 is retried with backoff and the next answer wins."""
    loopback.chat_completions.push(Reply.error(503), openai_chat("recovered"))
    async with make_adapter() as model:
        assert (await model.complete(USER)).text == "recovered"


@pytest.mark.anyio
async def test_4xx_is_not_retried(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """A 400 is the caller's problem: raised at once with the provider's body."""
    loopback.chat_completions.push(Reply.error(400, "bad model"))
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 400
    assert "bad model" in caught.value.body
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.anyio
async def test_read_timeout(make_adapter: MakeAdapter, loopback: LoopbackServer) -> None:
    """A server slower than read_timeout yields AdapterHTTPError with status 0, not a retry."""
    loopback.chat_completions.push(openai_chat("too late", delay=2))
    async with make_adapter(read_timeout=0.05) as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 0
    assert "timed out" in str(caught.value)
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.anyio
async def test_deadline_reached_mid_request(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """The caller's deadline bounds a request in flight, whatever read_timeout says."""
    loopback.chat_completions.push(openai_chat("too late", delay=2))
    started = anyio.current_time()
    async with make_adapter(read_timeout=30) as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER, deadline=anyio.current_time() + 0.1)
    assert caught.value.status_code == 0
    assert anyio.current_time() - started < 1.5


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        Reply.malformed(),
        Reply.json({"id": "x", "choices": []}),
        Reply.json({"choices": [{"message": "nope"}]}),
        Reply.json(["not", "an", "object"]),
        Reply.truncated({"choices": [{"message": {"content": "x" * 300}}]}),
    ],
    ids=["not-json", "no-choices", "bad-message", "not-object", "truncated"],
)
async def test_malformed_and_truncated_bodies(
    make_adapter: MakeAdapter, loopback: LoopbackServer, bad: Reply
) -> None:
    """A 2xx body that is cut off, not JSON or the wrong shape raises MalformedResponseError."""
    loopback.chat_completions.push(bad)
    async with make_adapter() as model:
        with pytest.raises(MalformedResponseError) as caught:
            await model.complete(USER)
    assert isinstance(caught.value, AdapterHTTPError)
    assert caught.value.status_code == 200
    assert len(loopback.chat_completions.requests) == 1


@pytest.mark.anyio
async def test_connection_dropped_without_response(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """A connection closed before any status line is an AdapterHTTPError with status 0."""
    loopback.chat_completions.push(Reply.dropped())
    async with make_adapter() as model:
        with pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 0


# ------------------------------------------------------------------ secrets


@pytest.mark.anyio
async def test_api_key_never_in_logs_or_exceptions(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """Across success, retries, errors echoing the key, timeouts and bad bodies, the key never leaks."""
    loopback.chat_completions.push(
        Reply.rate_limited(retry_after=0),
        openai_chat("ok"),
        Reply.error(401, f"Incorrect API key provided: {KEY}"),
        *[Reply.error(500, f"upstream saw key {KEY}")] * 3,
        Reply.malformed(f'{{"echo": "{KEY}'.encode()),
        Reply.json({"error": {"message": f"bad key {KEY}"}}),
        openai_chat("slow", delay=1),
        Reply.dropped(),
    )
    errors: list[BaseException] = []
    with capture_logs() as logs:
        async with make_adapter(read_timeout=0.05) as model:
            assert KEY not in repr(model)
            assert (await model.complete(USER)).text == "ok"
            for _ in range(6):
                with pytest.raises(AdapterHTTPError) as caught:
                    await model.complete(USER)
                errors.append(caught.value)
    assert [getattr(e, "status_code", None) for e in errors] == [401, 500, 200, 200, 0, 0]
    assert logs, "expected log lines to inspect"
    for line in logs:
        assert KEY not in repr(line)
    for exc in errors:
        assert KEY not in exception_text(exc)
        assert KEY not in getattr(exc, "body", "")
    assert "[REDACTED:api_key]" in errors[0].body  # type: ignore[attr-defined]


# ------------------------------------------------------------------ client ownership


@pytest.mark.anyio
async def test_injected_client_is_borrowed(loopback: LoopbackServer) -> None:
    """An injected httpx.AsyncClient is used and left open; the adapter's own is closed."""
    async with httpx.AsyncClient() as client:
        async with OpenAIChatAdapter(
            "m", base_url=loopback.openai_base_url, api_key=KEY, http_client=client
        ) as model:
            assert (await model.complete(USER)).text == "echo: What tea do I like?"
        assert not client.is_closed
        assert "authorization" not in client.headers
    own = OpenAIChatAdapter("m", base_url=loopback.openai_base_url, api_key=KEY)
    await own.complete(USER)
    inner = own._http._client
    await own.aclose()
    assert inner is not None and inner.is_closed
    with pytest.raises(UsageError, match="closed"):
        await own.complete(USER)


def test_constructor_refuses_bad_configuration() -> None:
    """Bad base URLs, timeouts and modes are UsageErrors at construction."""
    with pytest.raises(UsageError):
        OpenAIChatAdapter("m", base_url="localhost:11434/v1")
    with pytest.raises(UsageError):
        OpenAIChatAdapter("m", read_timeout=0)
    with pytest.raises(UsageError):
        OpenAIChatAdapter("")
    with pytest.raises(UsageError):
        OpenAIChatAdapter("m", structured_output="xml")  # type: ignore[arg-type]


def test_parse_retry_after_forms() -> None:
    """Retry-After parses delta-seconds and HTTP-dates; retry-after-ms wins; junk is None."""
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert parse_retry_after(httpx.Headers({"retry-after": "3"})) == 3.0
    assert parse_retry_after(httpx.Headers({"retry-after": date}), now=now) == 7.0
    past = format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert parse_retry_after(httpx.Headers({"retry-after": past}), now=now) == 0.0
    assert parse_retry_after(httpx.Headers({"retry-after": "3", "retry-after-ms": "250"})) == 0.25
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None
    assert parse_retry_after(httpx.Headers({})) is None


# ------------------------------------------------------------------ embeddings


@pytest.mark.anyio
async def test_embeddings_happy_path(make_embedder: MakeEmbedder, loopback: LoopbackServer) -> None:
    """The embedder satisfies Embedder and returns one vector per text, in order."""
    async with make_embedder() as embedder:
        assert isinstance(embedder, Embedder)
        assert (embedder.model_id, embedder.dimensions) == ("embed-model", 8)
        vectors = await embedder.embed(["green tea", "black coffee"])
        assert await embedder.embed([]) == []
    assert vectors == [hashed_embedding("green tea", 8), hashed_embedding("black coffee", 8)]
    (request,) = loopback.embeddings.requests
    assert request.json == {"model": "embed-model", "input": ["green tea", "black coffee"]}
    assert request.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.anyio
async def test_embeddings_batches_and_reorders_by_index(
    make_embedder: MakeEmbedder, loopback: LoopbackServer
) -> None:
    """Inputs go out in batch_size chunks and vectors are placed by their index field."""
    loopback.embeddings.push(
        embeddings_reply([[1.0, 0.0], [0.0, 1.0]], shuffle=True), embeddings_reply([[0.5, 0.5]])
    )
    async with make_embedder(dimensions=2, batch_size=2) as embedder:
        vectors = await embedder.embed(["a", "b", "c"])
    assert vectors == [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]
    assert [r.json["input"] for r in loopback.embeddings.requests] == [["a", "b"], ["c"]]


@pytest.mark.anyio
async def test_embeddings_send_dimensions(
    make_embedder: MakeEmbedder, loopback: LoopbackServer
) -> None:
    """send_dimensions asks the server for shorter vectors and marks the model id."""
    async with make_embedder(dimensions=4, send_dimensions=True) as embedder:
        assert embedder.model_id == "embed-model@4"
        (vector,) = await embedder.embed(["tea"])
    assert len(vector) == 4
    assert loopback.embeddings.requests[0].json["dimensions"] == 4


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        embeddings_reply([[0.0] * 8]),
        embeddings_reply([[0.0] * 7, [0.0] * 7]),
        Reply.json({"data": [{"index": 0, "embedding": [0.0] * 8}] * 2}),
        Reply.json({"data": [{"index": 0, "embedding": ["x"] * 8}, {"index": 1}]}),
        Reply.malformed(),
        Reply.truncated({"data": [{"index": 0, "embedding": [0.5] * 64}]}),
    ],
    ids=["too-few", "wrong-size", "repeated-index", "non-numbers", "not-json", "truncated"],
)
async def test_embeddings_malformed_answers_raise(
    make_embedder: MakeEmbedder, loopback: LoopbackServer, bad: Any
) -> None:
    """Short, mis-sized, repeated, non-numeric, non-JSON or cut-off answers raise, never partial output."""
    loopback.embeddings.push(bad)
    async with make_embedder() as embedder:
        with pytest.raises(MalformedResponseError):
            await embedder.embed(["a", "b"])
        with pytest.raises(UsageError):
            await embedder.embed("a")


@pytest.mark.anyio
async def test_embeddings_retry_429_and_keep_key_secret(
    make_embedder: MakeEmbedder, loopback: LoopbackServer
) -> None:
    """A 429 is retried; a failing embed call's exception and logs do not contain the key."""
    loopback.embeddings.push(Reply.rate_limited(retry_after=0))
    with capture_logs() as logs:
        async with make_embedder() as embedder:
            assert len(await embedder.embed(["x"])) == 1
            loopback.embeddings.push(*[Reply.error(502, f"key {KEY}")] * 3)
            with pytest.raises(AdapterHTTPError) as caught:
                await embedder.embed(["x"])
    assert caught.value.status_code == 502
    assert KEY not in exception_text(caught.value)
    assert all(KEY not in repr(line) for line in logs)
    assert KEY not in repr(embedder)


# ------------------------------------------------------------------ from_env


def test_from_env_unconfigured_is_none() -> None:
    """With neither RETOLD_MODEL nor RETOLD_BASE_URL set, from_env returns None."""
    assert from_env({}) is None
    assert from_env({"RETOLD_API_KEY": KEY}) is None


def test_from_env_openai_compatible() -> None:
    """The default provider is OpenAI-compatible, with the base URL and key as given."""
    adapter = from_env(
        {"RETOLD_BASE_URL": "http://127.0.0.1:1/v1", "RETOLD_MODEL": "m", "RETOLD_API_KEY": KEY}
    )
    assert isinstance(adapter, OpenAIChatAdapter)
    assert (adapter.model, adapter.base_url) == ("m", "http://127.0.0.1:1/v1")
    assert KEY not in repr(adapter)
    default = from_env({"RETOLD_MODEL": "gpt-4o-mini"})
    assert isinstance(default, OpenAIChatAdapter)
    assert default.base_url == "https://api.openai.com/v1"


def test_from_env_anthropic() -> None:
    """RETOLD_PROVIDER=anthropic builds the Anthropic adapter."""
    adapter = from_env(
        {"RETOLD_PROVIDER": "Anthropic", "RETOLD_MODEL": "claude", "RETOLD_API_KEY": KEY}
    )
    assert isinstance(adapter, AnthropicChatAdapter)
    assert adapter.base_url == "https://api.anthropic.com"


@pytest.mark.parametrize(
    "env",
    [
        {"RETOLD_PROVIDER": "gemini", "RETOLD_MODEL": "m"},
        {"RETOLD_BASE_URL": "http://127.0.0.1:1/v1"},
        {"RETOLD_PROVIDER": "anthropic", "RETOLD_MODEL": "claude"},
    ],
    ids=["unknown-provider", "no-model", "anthropic-no-key"],
)
def test_from_env_refuses_incomplete_configuration(env: dict[str, str]) -> None:
    """Set-but-incomplete configuration is a UsageError naming what to set."""
    with pytest.raises(UsageError, match="RETOLD_"):
        from_env(env)


@pytest.mark.anyio
async def test_connect_error_is_retried_then_surfaces() -> None:
    """A refused connection is retried (nothing reached the server), then raised with status 0."""
    with LoopbackServer() as server:
        dead_url = server.openai_base_url
    async with OpenAIChatAdapter("m", base_url=dead_url, api_key=KEY, retry=FAST_RETRY) as model:
        with capture_logs() as logs, pytest.raises(AdapterHTTPError) as caught:
            await model.complete(USER)
    assert caught.value.status_code == 0
    assert "could not connect" in str(caught.value)
    assert [e["event"] for e in logs].count("provider_request_retrying") == 2
    assert KEY not in exception_text(caught.value)


def test_public_names_are_importable() -> None:
    """retold.adapters.__all__ has no duplicates and every name in it exists."""
    import retold.adapters as adapters

    assert len(adapters.__all__) == len(set(adapters.__all__))
    assert all(hasattr(adapters, name) for name in adapters.__all__)


@pytest.mark.anyio
async def test_enclosing_cancel_scope_cancels_request(
    make_adapter: MakeAdapter, loopback: LoopbackServer
) -> None:
    """An enclosing anyio.move_on_after cancels a slow request the ordinary way."""
    loopback.chat_completions.push(openai_chat("too late", delay=2))
    async with make_adapter() as model:
        with anyio.move_on_after(0.1) as scope:
            await model.complete(USER)
    assert scope.cancelled_caught
