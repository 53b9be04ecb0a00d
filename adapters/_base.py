"""Provider-neutral types and the shared async HTTP plumbing every adapter uses.

Each provider module (``openai``, ``anthropic``) maps :class:`ChatMessage` and
:class:`ToolSpec` onto its wire format and back into a :class:`Completion`; nothing
provider-specific leaks out of those modules. The HTTP layer here owns timeouts, bounded
retries with backoff on 429 and 5xx (honouring ``Retry-After``, never past the caller's
deadline) and the error mapping onto :class:`~retold.AdapterHTTPError`.

Error tree (all subclasses of ``retold.RuntimeFailure``)::

    AdapterHTTPError              the provider answered with an error status, or none
    └── MalformedResponseError    a 2xx whose body is not what the protocol promises
"""

from __future__ import annotations

import json
import math
import os
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

import anyio
import anyio.lowlevel
import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from retold._errors import AdapterHTTPError, UsageError
from retold._redaction import Redactor

__all__ = [
    "ChatAdapter",
    "ChatMessage",
    "Completion",
    "MalformedResponseError",
    "RetryPolicy",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Usage",
]

_log = structlog.get_logger(__name__)

_BODY_LIMIT = 500
JSONObject = dict[str, Any]
ToolChoice = Literal["auto", "none", "required"] | str
"""``"auto"`` (default), ``"none"``, ``"required"`` (some tool), or a tool name to force."""


class MalformedResponseError(AdapterHTTPError):
    """The provider answered 2xx but the body is truncated, not JSON, or the wrong shape."""


# --------------------------------------------------------------------------- neutral types


class ToolSpec(BaseModel):
    """A tool the model may call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The name the model uses to call the tool."""
    description: str = ""
    """What the tool does, for the model."""
    parameters: JSONObject = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments object."""


class ToolCall(BaseModel):
    """One tool call the model issued."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Provider-assigned call id; echo it back in the tool result."""
    name: str
    """The tool's name."""
    raw_arguments: str
    """The arguments exactly as the model produced them (a JSON text)."""
    arguments: JSONObject | None
    """``raw_arguments`` parsed; ``None`` when the model produced something that is not a JSON object."""


class ChatMessage(BaseModel):
    """One provider-neutral chat message.

    Build them with :meth:`system`, :meth:`user`, :meth:`assistant` and :meth:`tool_result`;
    :meth:`Completion.to_message` turns a model reply (with its tool calls) into the
    assistant message that goes back into the history.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks. ``tool`` carries one tool result."""
    content: str = ""
    """The text (for ``tool``: the tool's result)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Assistant only: the calls the model issued in this message."""
    tool_call_id: str | None = None
    """Tool only: the id of the call this result answers."""
    name: str | None = None
    """Tool only: the tool's name (some servers want it)."""
    is_error: bool = False
    """Tool only: the result is an error message rather than output."""

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        """A system instruction."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        """A user turn."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: Sequence[ToolCall] = ()) -> ChatMessage:
        """An assistant turn, optionally with the tool calls it issued."""
        return cls(role="assistant", content=content, tool_calls=tuple(tool_calls))

    @classmethod
    def tool_result(
        cls, call: ToolCall | str, content: str, *, name: str | None = None, is_error: bool = False
    ) -> ChatMessage:
        """The result of running one tool call."""
        if isinstance(call, ToolCall):
            return cls(
                role="tool",
                content=content,
                tool_call_id=call.id,
                name=name or call.name,
                is_error=is_error,
            )
        return cls(role="tool", content=content, tool_call_id=call, name=name, is_error=is_error)


class Usage(BaseModel):
    """Token usage as the provider reported it (0 when it did not)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0


class Completion(BaseModel):
    """A model reply, provider-neutral."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    """The reply text (with ``response_schema``/``json_mode``: the JSON document)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls the model issued, in order."""
    finish_reason: str | None = None
    """The provider's raw finish/stop reason (``stop``, ``tool_calls``, ``end_turn``, ...)."""
    usage: Usage = Usage()
    """Token usage as reported."""
    model: str
    """The model id the provider says answered."""
    provider: str
    """``openai`` or ``anthropic`` (the wire protocol, not the vendor)."""

    def to_message(self) -> ChatMessage:
        """The assistant message to append to the history before sending tool results."""
        return ChatMessage.assistant(self.text, self.tool_calls)

    def parse_json(self) -> Any:
        """Parse :attr:`text` as JSON.

        Raises:
            ValueError: the text is not JSON (``json.JSONDecodeError``).
        """
        return json.loads(self.text)


class RetryPolicy(BaseModel):
    """Bounded retries with exponential backoff on 429 and 5xx responses."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(default=3, ge=1, le=10)
    """Total attempts including the first."""
    initial_backoff: float = Field(default=0.5, ge=0)
    """Seconds before the first retry when the server gives no ``Retry-After``."""
    max_backoff: float = Field(default=8.0, ge=0)
    """Cap on one computed backoff."""
    max_retry_after: float = Field(default=60.0, ge=0)
    """A ``Retry-After`` longer than this fails at once instead of waiting."""
    jitter: float = Field(default=0.1, ge=0, le=1)
    """Backoff is shortened by up to this fraction at random, so clients spread out."""


# --------------------------------------------------------------------------- helpers


def parse_retry_after(headers: httpx.Headers, *, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be delta-seconds or an HTTP-date; a date in the past means 0.
    Returns ``None`` when absent or unparseable.
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def _retryable(status: int) -> bool:
    return status == 429 or status == 408 or 500 <= status <= 599


def _effective_deadline(deadline: float | None) -> float:
    """The earlier of the explicit deadline and any enclosing cancel scope's deadline."""
    scope = anyio.current_effective_deadline()
    return scope if deadline is None else min(scope, deadline)


async def _cancelled_by_enclosing_scope(end: float, deadline: float | None) -> None:
    """Wait for the enclosing cancel scope's cancellation when its deadline, not the explicit
    one, is the one that passed (its timer may not have fired yet on a busy event loop);
    return at once otherwise."""
    if (deadline is None or end < deadline) and anyio.current_time() >= end:
        await anyio.sleep_forever()


class _Scrubber:
    """Removes the API key (and anything else secret-shaped) from text we surface."""

    def __init__(self, api_key: SecretStr | None) -> None:
        self._api_key = api_key
        # A throwaway key: ids only need to be stable within this adapter's lifetime.
        self._redactor = Redactor(os.urandom(32))

    def __call__(self, text: str) -> str:
        if self._api_key is not None:
            key = self._api_key.get_secret_value()
            if key:
                text = text.replace(key, "[REDACTED:api_key]")
        return self._redactor.redact(text)


# --------------------------------------------------------------------------- HTTP session


class _TruncatedBody(Exception):
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class _HTTPSession:
    """POSTs JSON with timeouts, bounded retries and error mapping; owns or borrows a client."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        api_key: str | None,
        http_client: httpx.AsyncClient | None,
        connect_timeout: float,
        read_timeout: float,
        retry: RetryPolicy,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UsageError(f"base_url must start with http:// or https://, got {base_url!r}")
        if connect_timeout <= 0 or read_timeout <= 0:
            raise UsageError("connect_timeout and read_timeout must be positive seconds")
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.api_key = SecretStr(api_key) if api_key else None
        self.scrub = _Scrubber(self.api_key)
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retry = retry
        self._client = http_client
        self._owns_client = http_client is None
        self._closed = False

    @property
    def client(self) -> httpx.AsyncClient:
        if self._closed:
            raise UsageError(f"this {self.provider} adapter is closed; create a new one")
        if self._client is None:
            self._client = httpx.AsyncClient()
        return self._client

    async def aclose(self) -> None:
        self._closed = True
        if self._owns_client and self._client is not None:
            await self._client.aclose()
        self._client = None

    def _timeout(self, remaining: float) -> httpx.Timeout:
        read = min(self.read_timeout, remaining) if math.isfinite(remaining) else self.read_timeout
        connect = min(self.connect_timeout, read)
        return httpx.Timeout(connect=connect, read=read, write=read, pool=connect)

    def _error(self, status: int, body: str, message: str) -> AdapterHTTPError:
        clean = self.scrub(body)[:_BODY_LIMIT]
        return AdapterHTTPError(status, clean, self.scrub(message))

    def _backoff(self, attempt: int) -> float:
        policy = self.retry
        base = min(policy.max_backoff, policy.initial_backoff * 2.0 ** (attempt - 1))
        return base * (1.0 - policy.jitter * random.random())

    async def _send(
        self,
        client: httpx.AsyncClient,
        url: str,
        content: bytes,
        headers: Mapping[str, str],
        remaining: float,
    ) -> httpx.Response:
        request = client.build_request(
            "POST", url, content=content, headers=headers, timeout=self._timeout(remaining)
        )
        # Streamed so that a body cut short is told apart from a request that never got a
        # response: by the time the body fails we know the status line arrived.
        response = await client.send(request, stream=True)
        try:
            await response.aread()
        except httpx.TimeoutException:
            raise
        except httpx.HTTPError:
            raise _TruncatedBody(response.status_code) from None
        finally:
            await response.aclose()
        return response

    async def post_json(
        self,
        path: str,
        payload: Mapping[str, Any],
        *,
        headers: Mapping[str, str],
        deadline: float | None,
        final: Callable[[int, str], bool] | None = None,
    ) -> tuple[int, Any]:
        """POST ``payload`` and return (status, parsed JSON body) of a 2xx answer.

        ``final(status, body)`` returning True makes an error status final (no retry),
        e.g. a 500 that is a validation refusal rather than a transient failure.

        Raises:
            AdapterHTTPError: an error status after the allowed retries, a retry that would
                pass the deadline, a timeout (status 0) or a transport failure (status 0).
            MalformedResponseError: a 2xx whose body is truncated or not JSON.
        """
        end = _effective_deadline(deadline)
        url = f"{self.base_url}{path}"
        content = json.dumps(payload, ensure_ascii=False).encode()
        request_headers = {"content-type": "application/json", "accept": "application/json"}
        request_headers.update(headers)
        client = self.client
        attempt = 0
        while True:
            attempt += 1
            remaining = end - anyio.current_time()
            if remaining <= 0:
                # An enclosing scope past its deadline cancels here, the ordinary way; only
                # the explicit deadline becomes an error.
                await _cancelled_by_enclosing_scope(end, deadline)
                await anyio.lowlevel.checkpoint()
                raise self._error(0, "", f"{self.provider} request to {path} passed its deadline")
            started = anyio.current_time()
            own = None if deadline is None else max(deadline - started, 0.0)
            try:
                # The explicit deadline becomes a TimeoutError here; an enclosing scope's
                # deadline is left to cancel the request as usual, which is its owner's call.
                with anyio.fail_after(own):
                    response = await self._send(client, url, content, request_headers, remaining)
            except TimeoutError:
                _log.warning(
                    "provider_request_timed_out", provider=self.provider, path=path, attempt=attempt
                )
                raise self._error(
                    0, "", f"{self.provider} request to {path} passed its deadline"
                ) from None
            except _TruncatedBody as exc:
                _log.warning(
                    "provider_response_truncated",
                    provider=self.provider,
                    path=path,
                    attempt=attempt,
                    status_code=exc.status_code,
                )
                raise MalformedResponseError(
                    exc.status_code,
                    "",
                    f"{self.provider} response from {path} ended before its body was complete",
                ) from None
            except httpx.TimeoutException as exc:
                # httpx's timeout is clamped to the enclosing scope's deadline too, and may
                # fire just before that scope cancels: then the cancellation is the outcome.
                await _cancelled_by_enclosing_scope(end, deadline)
                # A read timeout is not retried: the server may still be generating, and a
                # second copy of a long generation costs as much as the first.
                _log.warning(
                    "provider_request_timed_out",
                    provider=self.provider,
                    path=path,
                    attempt=attempt,
                    kind=type(exc).__name__,
                )
                raise self._error(
                    0, "", f"{self.provider} request to {path} timed out ({type(exc).__name__})"
                ) from None
            except httpx.ConnectError as exc:
                # The request never reached the server, so a retry cannot duplicate work.
                if attempt < self.retry.max_attempts:
                    delay = self._backoff(attempt)
                    if anyio.current_time() + delay < end:
                        _log.info(
                            "provider_request_retrying",
                            provider=self.provider,
                            path=path,
                            attempt=attempt,
                            status_code=0,
                            delay_s=round(delay, 3),
                        )
                        await anyio.sleep(delay)
                        continue
                raise self._error(
                    0, "", f"could not connect to {self.provider} at {self.base_url}: {exc}"
                ) from None
            except httpx.HTTPError as exc:
                kind = type(exc).__name__
                _log.warning(
                    "provider_request_failed",
                    provider=self.provider,
                    path=path,
                    attempt=attempt,
                    kind=kind,
                )
                raise self._error(
                    0, "", f"{self.provider} request to {path} failed: {kind}: {exc}"
                ) from None

            elapsed_ms = round((anyio.current_time() - started) * 1000, 1)
            status = response.status_code
            if 200 <= status < 300:
                try:
                    parsed = response.json()
                except (ValueError, UnicodeDecodeError):
                    _log.warning(
                        "provider_response_malformed",
                        provider=self.provider,
                        path=path,
                        attempt=attempt,
                        status_code=status,
                    )
                    raise MalformedResponseError(
                        status,
                        self.scrub(response.text)[:_BODY_LIMIT],
                        f"{self.provider} returned HTTP {status} with a body that is not JSON",
                    ) from None
                _log.debug(
                    "provider_request_succeeded",
                    provider=self.provider,
                    path=path,
                    attempt=attempt,
                    status_code=status,
                    elapsed_ms=elapsed_ms,
                )
                return status, parsed

            body = response.text
            _log.warning(
                "provider_request_rejected",
                provider=self.provider,
                path=path,
                attempt=attempt,
                status_code=status,
                elapsed_ms=elapsed_ms,
            )
            if not _retryable(status) or (final is not None and final(status, body)):
                raise self._error(status, body, f"{self.provider} returned HTTP {status}")
            if attempt >= self.retry.max_attempts:
                raise self._error(
                    status,
                    body,
                    f"{self.provider} returned HTTP {status} after {attempt} attempts",
                )
            retry_after = parse_retry_after(response.headers)
            delay = retry_after if retry_after is not None else self._backoff(attempt)
            left = end - anyio.current_time()
            if retry_after is not None and retry_after > self.retry.max_retry_after:
                raise self._error(
                    status,
                    body,
                    f"{self.provider} returned HTTP {status} and asked to retry after "
                    f"{retry_after:.1f}s, longer than max_retry_after={self.retry.max_retry_after}s",
                )
            if delay >= left:
                raise self._error(
                    status,
                    body,
                    f"{self.provider} returned HTTP {status}; retrying after {delay:.2f}s "
                    f"would pass the caller's deadline ({max(left, 0):.2f}s left)",
                )
            _log.info(
                "provider_request_retrying",
                provider=self.provider,
                path=path,
                attempt=attempt,
                status_code=status,
                delay_s=round(delay, 3),
            )
            await anyio.sleep(delay)


# --------------------------------------------------------------------------- adapter base


class _HTTPClientOwner:
    """Lifecycle shared by every HTTP client here: an async context manager over one session.

    An injected ``httpx.AsyncClient`` is borrowed and never closed; one the session created
    itself is closed by :meth:`aclose` (or on leaving ``async with``). The repr names the
    model and endpoint and says only whether an API key is set.
    """

    model: str
    _http: _HTTPSession

    @property
    def base_url(self) -> str:
        """The endpoint root requests go to."""
        return self._http.base_url

    def _repr_fields(self) -> str:
        return ""

    def __repr__(self) -> str:
        key = "set" if self._http.api_key is not None else "none"
        return (
            f"{type(self).__name__}(model={self.model!r}{self._repr_fields()}, "
            f"base_url={self.base_url!r}, api_key=<{key}>)"
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        await self._http.aclose()


class ChatAdapter(_HTTPClientOwner, ABC):
    """A chat model behind one provider-neutral async method, :meth:`complete`.

    Use it as an async context manager (``async with OpenAIChatAdapter(...) as model:``)
    or call :meth:`aclose` yourself. An injected ``httpx.AsyncClient`` is borrowed and
    never closed; otherwise the adapter creates its own on first use and closes it.
    """

    provider: str = ""
    #: The highest sampling temperature the provider accepts (the lowest is 0).
    max_temperature: ClassVar[float] = 2.0
    _http: _HTTPSession

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        http_client: httpx.AsyncClient | None,
        connect_timeout: float,
        read_timeout: float,
        retry: RetryPolicy | None,
    ) -> None:
        if not model:
            raise UsageError("model must be a non-empty model id")
        self.model = model
        self._http = _HTTPSession(
            provider=self.provider,
            base_url=base_url,
            api_key=api_key,
            http_client=http_client,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retry=retry or RetryPolicy(),
        )

    #: The request path (relative to ``base_url``) chat requests are posted to.
    endpoint: ClassVar[str] = ""

    @abstractmethod
    def _request_headers(self) -> dict[str, str]:
        """Per-request headers (authentication is added here, at send time)."""

    @abstractmethod
    def build_payload(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        response_schema: Mapping[str, Any] | None = None,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        """The provider's request body for one :meth:`complete` call."""

    @abstractmethod
    def parse_response(self, status: int, body: Any, *, structured: bool = False) -> Completion:
        """The provider's 2xx body as a :class:`Completion` (raises on a malformed one)."""

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: ToolChoice | None = None,
        response_schema: Mapping[str, Any] | None = None,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """Ask the model for one reply.

        Args:
            messages: the conversation, oldest first.
            tools: tools the model may call; their calls come back in ``tool_calls``.
            tool_choice: ``"auto"``, ``"none"``, ``"required"`` or a tool name to force.
            response_schema: a JSON Schema the reply text must satisfy (structured output).
            json_mode: ask for a JSON object without a schema.
            max_tokens: cap on generated tokens.
            temperature: sampling temperature.
            deadline: absolute time on ``anyio.current_time()``'s clock by which the call
                must finish (e.g. ``anyio.current_time() + 2``). A retry whose wait would
                pass it fails at once; reaching it mid-request raises ``AdapterHTTPError``
                with status 0. The deadline of an enclosing cancel scope
                (``anyio.fail_after``) is honoured the same way for retries, and cancels
                the request as usual.

        Raises:
            AdapterHTTPError: the provider failed, timed out or the deadline passed.
            MalformedResponseError: the provider answered with a body we cannot read.
            UsageError: the arguments are inconsistent.
        """
        payload = self.build_payload(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            response_schema=response_schema,
            json_mode=json_mode,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        status, body = await self._http.post_json(
            self.endpoint, payload, headers=self._request_headers(), deadline=deadline
        )
        return self.parse_response(
            status, body, structured=response_schema is not None or json_mode
        )


def _parse_arguments(raw: str) -> JSONObject | None:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _malformed(provider: str, status: int, body: Any, what: str, scrub: _Scrubber) -> Exception:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)[:2000]
    return MalformedResponseError(
        status, scrub(text)[:_BODY_LIMIT], f"{provider} returned a malformed response: {what}"
    )


def _count(value: Any) -> int:
    """A token count from a usage block; anything that is not a non-negative int is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
