"""A scriptable HTTP server on 127.0.0.1 that speaks the OpenAI and Anthropic wire protocols.

Real sockets, its own thread (so it serves asyncio and trio tests alike), nothing vendor-
side. Each endpoint is a :class:`Route` holding a FIFO of scripted replies; a request
takes the next one, or gets the route's default (an echo of the last user message, or
deterministic embeddings) when the queue is empty. Every request is recorded::

    with LoopbackServer() as server:
        server.chat_completions.push(
            Reply.rate_limited(retry_after=0),
            openai_chat(tool_calls=[tool_call("memory_search", {"query": "tea"})]),
            openai_chat("You like green tea."),
        )
        adapter = OpenAIChatAdapter("m", base_url=server.openai_base_url)
        ...
        assert server.chat_completions.requests[0].json["model"] == "m"

In pytest, ``loopback = loopback_fixture()`` at module level gives tests a ``loopback``
fixture with a fresh server each.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import json
import math
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "LoopbackServer",
    "RecordedRequest",
    "Reply",
    "Responder",
    "Route",
    "ScriptedToolCall",
    "anthropic_json",
    "anthropic_message",
    "embeddings_reply",
    "hashed_embedding",
    "loopback_fixture",
    "openai_chat",
    "openai_json",
    "tool_call",
]

OPENAI_CHAT_PATH = "/v1/chat/completions"
OPENAI_EMBEDDINGS_PATH = "/v1/embeddings"
ANTHROPIC_MESSAGES_PATH = "/v1/messages"
_BUILTIN_PATHS = (OPENAI_CHAT_PATH, OPENAI_EMBEDDINGS_PATH, ANTHROPIC_MESSAGES_PATH)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received, as it arrived."""

    method: str
    path: str
    headers: Mapping[str, str]
    """Header names lower-cased."""
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON, or ``None`` when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted HTTP answer.

    Build with the class methods; ``delay`` holds the answer back (seconds),
    ``truncate_at`` sends only that many body bytes while ``Content-Length`` promises the
    whole body, ``disconnect`` closes the connection without any answer.
    """

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    truncate_at: int | None = None
    disconnect: bool = False

    @classmethod
    def json(
        cls,
        value: Any,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> Reply:
        """A JSON body."""
        merged = {"content-type": "application/json", **(headers or {})}
        return cls(status=status, body=json.dumps(value).encode(), headers=merged, delay=delay)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted error",
        *,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> Reply:
        """An error status with a provider-style JSON error body."""
        body = {"type": "error", "error": {"type": f"http_{status}", "message": message}}
        return cls.json(body, status=status, headers=headers, delay=delay)

    @classmethod
    def rate_limited(
        cls,
        retry_after: float | str | None = 0,
        *,
        retry_after_ms: float | None = None,
        status: int = 429,
        delay: float = 0.0,
    ) -> Reply:
        """A 429 with ``Retry-After`` (seconds, or an HTTP-date string) and/or ``retry-after-ms``."""
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        return cls.error(status, "rate limited", headers=headers, delay=delay)

    @classmethod
    def malformed(
        cls, body: bytes = b'{"id": "x", "choices": [{"mess', *, status: int = 200
    ) -> Reply:
        """A complete answer whose body is not what the protocol promises (default: bad JSON)."""
        return cls(status=status, body=body, headers={"content-type": "application/json"})

    @classmethod
    def truncated(cls, value: Any, *, fraction: float = 0.5, status: int = 200) -> Reply:
        """``value`` as JSON, cut off after ``fraction`` of its bytes with the connection closed."""
        body = json.dumps(value).encode()
        return cls(
            status=status,
            body=body,
            headers={"content-type": "application/json"},
            truncate_at=max(0, min(len(body) - 1, int(len(body) * fraction))),
        )

    @classmethod
    def dropped(cls, *, delay: float = 0.0) -> Reply:
        """Close the connection without sending a status line."""
        return cls(disconnect=True, delay=delay)

    def delayed(self, seconds: float) -> Reply:
        """This reply, held back ``seconds`` before it is sent."""
        return dataclasses.replace(self, delay=seconds)


Responder = Callable[[RecordedRequest], Reply]
"""Builds a reply from the request it answers (e.g. to echo the requested model)."""

Scripted = Reply | Responder


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    """A tool call for :func:`openai_chat` / :func:`anthropic_message` to return."""

    name: str
    arguments: Mapping[str, Any] | str
    """An object, or a raw string (OpenAI only) to script malformed arguments."""
    id: str | None = None


def tool_call(
    name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str | None = None
) -> ScriptedToolCall:
    """A scripted tool call."""
    return ScriptedToolCall(name=name, arguments={} if arguments is None else arguments, id=id)


_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def _requested_model(request: RecordedRequest, fallback: str = "loopback-model") -> str:
    body = request.json
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) and model else fallback


def openai_chat(
    text: str | None = "",
    *,
    tool_calls: Sequence[ScriptedToolCall] = (),
    finish_reason: str | None = None,
    model: str | None = None,
    usage: tuple[int, int] = (11, 7),
    delay: float = 0.0,
) -> Responder:
    """A chat-completions answer (the requested model is echoed unless ``model`` is given)."""

    def respond(request: RecordedRequest) -> Reply:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or _next_id("call"),
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for call in tool_calls
            ]
        body = {
            "id": _next_id("chatcmpl"),
            "object": "chat.completion",
            "created": 1767225600,
            "model": model or _requested_model(request),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            },
        }
        return Reply.json(body, delay=delay)

    return respond


def openai_json(value: Any, **kwargs: Any) -> Responder:
    """A chat-completions answer whose text is ``value`` as JSON."""
    return openai_chat(json.dumps(value), **kwargs)


def anthropic_message(
    text: str = "",
    *,
    tool_calls: Sequence[ScriptedToolCall] = (),
    stop_reason: str | None = None,
    model: str | None = None,
    usage: tuple[int, int] = (13, 5),
    delay: float = 0.0,
) -> Responder:
    """A Messages API answer with a text block and/or ``tool_use`` blocks."""

    def respond(request: RecordedRequest) -> Reply:
        content: list[dict[str, Any]] = []
        if text:
            content.append({"type": "text", "text": text})
        for call in tool_calls:
            arguments = (
                json.loads(call.arguments) if isinstance(call.arguments, str) else call.arguments
            )
            content.append(
                {
                    "type": "tool_use",
                    "id": call.id or _next_id("toolu"),
                    "name": call.name,
                    "input": dict(arguments),
                }
            )
        body = {
            "id": _next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model or _requested_model(request),
            "content": content,
            "stop_reason": stop_reason or ("tool_use" if tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }
        return Reply.json(body, delay=delay)

    return respond


def anthropic_json(value: Mapping[str, Any], **kwargs: Any) -> Responder:
    """A Messages API answer calling the tool the request forced, with ``value`` as input.

    That is how the Anthropic adapter obtains structured output.
    """

    def respond(request: RecordedRequest) -> Reply:
        body = request.json
        choice = body.get("tool_choice") if isinstance(body, dict) else None
        name = "json_output"
        if isinstance(choice, dict) and isinstance(choice.get("name"), str):
            name = choice["name"]
        return anthropic_message(tool_calls=[tool_call(name, value)], **kwargs)(request)

    return respond


def embeddings_reply(
    vectors: Sequence[Sequence[float]],
    *,
    model: str | None = None,
    shuffle: bool = False,
    delay: float = 0.0,
) -> Responder:
    """An embeddings answer with exactly these vectors (``shuffle`` reverses the data order)."""

    def respond(request: RecordedRequest) -> Reply:
        data = [
            {"object": "embedding", "index": i, "embedding": list(v)} for i, v in enumerate(vectors)
        ]
        if shuffle:
            data.reverse()
        body = {
            "object": "list",
            "data": data,
            "model": model or _requested_model(request),
            "usage": {"prompt_tokens": len(vectors), "total_tokens": len(vectors)},
        }
        return Reply.json(body, delay=delay)

    return respond


def hashed_embedding(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector: hashed bag of lower-cased words (shared words, nearby vectors)."""
    vector = [0.0] * dimensions
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        slot = int.from_bytes(digest[:4], "big") % dimensions
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        vector[0] = 1.0
        return vector
    return [x / norm for x in vector]


def _last_user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and isinstance(b.get("text"), str)
            )
    return ""


class Route:
    """One endpoint: a FIFO of scripted replies, a default, and the requests it received."""

    def __init__(self, path: str, default: Responder) -> None:
        self.path = path
        self._default = default
        self._queue: collections.deque[Scripted] = collections.deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()

    def push(self, *replies: Scripted) -> Self:
        """Append replies; each request takes the next one."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def respond_with(self, responder: Responder) -> Self:
        """Replace the default used once the queue is empty."""
        with self._lock:
            self._default = responder
        return self

    @property
    def requests(self) -> list[RecordedRequest]:
        """Requests received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._queue)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _take(self, request: RecordedRequest) -> Reply:
        with self._lock:
            scripted = self._queue.popleft() if self._queue else self._default
        return scripted if isinstance(scripted, Reply) else scripted(request)


class _Server(ThreadingHTTPServer):
    # Joined on close so no handler thread (or its socket) outlives the server.
    daemon_threads = False
    block_on_close = True

    def __init__(self, owner: LoopbackServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout tests) makes writes fail; that is expected.
        self.owner._record_error(sys.exc_info()[1])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # a stuck client cannot pin a handler thread forever
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's per-request stderr line."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        self.close_connection = True
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        request = RecordedRequest(
            method=self.command,
            path=self.path.split("?", 1)[0],
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        reply = self.server.owner._dispatch(request)
        if reply.delay > 0 and self.server.owner._stopping.wait(reply.delay):
            return  # shutting down: drop the connection
        if reply.disconnect:
            return
        self.send_response(reply.status)
        headers = {k.lower(): v for k, v in reply.headers.items()}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(reply.body)))
        self.send_header("connection", "close")
        self.end_headers()
        payload = reply.body if reply.truncate_at is None else reply.body[: reply.truncate_at]
        self.wfile.write(payload)
        self.wfile.flush()


class LoopbackServer:
    """An OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1, scripted per route.

    Args:
        api_key: when set, requests must carry it (``Authorization: Bearer`` for OpenAI
            routes, ``x-api-key`` for Anthropic) or get a 401.
        embedding_dimensions: length of default embeddings (a request's ``dimensions``
            wins).

    Attributes:
        chat_completions: ``/v1/chat/completions``.
        messages: ``/v1/messages`` (Anthropic; also requires ``anthropic-version``).
        embeddings: ``/v1/embeddings``.
    """

    def __init__(self, *, api_key: str | None = None, embedding_dimensions: int = 8) -> None:
        self._api_key = api_key
        self.embedding_dimensions = embedding_dimensions
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self.chat_completions = Route(OPENAI_CHAT_PATH, self._default_chat)
        self.messages = Route(ANTHROPIC_MESSAGES_PATH, self._default_messages)
        self.embeddings = Route(OPENAI_EMBEDDINGS_PATH, self._default_embeddings)
        self._routes: dict[str, Route] = {
            r.path: r for r in (self.chat_completions, self.messages, self.embeddings)
        }

    def __repr__(self) -> str:
        state = self.url if self._server is not None else "stopped"
        return f"LoopbackServer({state})"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Bind an ephemeral port on 127.0.0.1 and serve in a background thread."""
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name=f"retold-loopback-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut scripted delays short and join every handler thread."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        """The bound port."""
        if self._server is None:
            raise RuntimeError("the loopback server is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for OpenAI-compatible clients (ends in ``/v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The ``base_url`` for Anthropic clients (no ``/v1``)."""
        return self.url

    # ------------------------------------------------------------------ scripting

    def route(self, path: str) -> Route:
        """The route for ``path``, created on first use (unscripted requests get 404)."""
        with self._lock:
            if path not in self._routes:
                self._routes[path] = Route(path, _not_found)
            return self._routes[path]

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, on any path, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised while answering (typically a client that hung up)."""
        with self._lock:
            return list(self._errors)

    def _record_error(self, exc: BaseException | None) -> None:
        if exc is not None:
            with self._lock:
                self._errors.append(exc)

    def _dispatch(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
            route = self._routes.get(request.path)
        if route is None:
            return _not_found(request)
        route._record(request)
        if request.method != "POST" and route.path in _BUILTIN_PATHS:
            return Reply.error(405, f"{request.method} is not allowed here")
        return self._check_headers(request) or route._take(request)

    def _check_headers(self, request: RecordedRequest) -> Reply | None:
        anthropic = request.path == ANTHROPIC_MESSAGES_PATH
        if anthropic and "anthropic-version" not in request.headers:
            return Reply.error(400, "anthropic-version header is required")
        if self._api_key is None:
            return None
        if anthropic:
            presented = request.headers.get("x-api-key")
        else:
            auth = request.headers.get("authorization", "")
            presented = auth[7:] if auth.lower().startswith("bearer ") else None
        if presented != self._api_key:
            return Reply.error(401, "invalid or missing API key")
        return None

    # ------------------------------------------------------------------ defaults

    def _default_chat(self, request: RecordedRequest) -> Reply:
        body = request.json
        if not isinstance(body, dict):
            return Reply.error(400, "body is not JSON")
        return openai_chat(f"echo: {_last_user_text(body.get('messages'))}")(request)

    def _default_messages(self, request: RecordedRequest) -> Reply:
        body = request.json
        if not isinstance(body, dict):
            return Reply.error(400, "body is not JSON")
        if not isinstance(body.get("max_tokens"), int):
            return Reply.error(400, "max_tokens is required")
        return anthropic_message(f"echo: {_last_user_text(body.get('messages'))}")(request)

    def _default_embeddings(self, request: RecordedRequest) -> Reply:
        body = request.json
        texts = body.get("input") if isinstance(body, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return Reply.error(400, "input must be a string or a list of strings")
        requested = body.get("dimensions")
        dims = requested if isinstance(requested, int) and requested > 0 else None
        dims = dims or self.embedding_dimensions
        return embeddings_reply([hashed_embedding(t, dims) for t in texts])(request)


def _not_found(request: RecordedRequest) -> Reply:
    return Reply.error(404, f"no route for {request.method} {request.path}")


def loopback_fixture(name: str = "loopback", **kwargs: Any) -> Any:
    """A pytest fixture giving each test a fresh, started :class:`LoopbackServer`.

    Assign it at module level (or in ``conftest.py``): ``loopback = loopback_fixture()``.
    Keyword arguments go to the server's constructor. Imports pytest lazily, so the
    rest of ``retold.testing`` works without it.
    """
    import pytest

    @pytest.fixture(name=name)
    def _loopback() -> Iterator[LoopbackServer]:
        with LoopbackServer(**kwargs) as server:
            yield server

    return _loopback
