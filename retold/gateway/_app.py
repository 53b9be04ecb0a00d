"""``retold serve``: an OpenAI-compatible chat-completions gateway over :class:`MemoryChat`.

An app calls ``POST /v1/chat/completions`` exactly as it calls OpenAI; the gateway
authenticates its key (the key alone fixes tenant and principal), runs the turn through
Retold's utility-aware path against the configured upstream model, records the transcript
once, and answers in OpenAI's wire format (JSON, or server-sent events with ``stream``).

Sessions: header ``X-Retold-Session`` names the conversation. Without it the gateway finds
the session from the conversation itself (:mod:`retold.gateway._sessions`): ``conv-`` plus
16 hex digits of the sha256 of its first user message, forked (``-2``, ``-3``, ...) for each
chat that opens the same way, so a client that resends its history lands in the same
session on every call, and two chats that both open with "hi" do not share one.
``POST /v1/retold/sessions/{id}/end`` ends a session (extraction and activation run in the
background); sessions idle longer than ``session_idle_s`` end by themselves. A principal's
next turn waits (at most ``session_end_wait_s``) for that principal's pending session ends,
so what they said in an ended session is in memory for the turns that follow.

Transcript: the stored transcript is append-only. On each call the client's earlier
messages past what the session already holds are recorded (a client that brings history
from elsewhere), then the turn and its answer; messages the session already holds are never
recorded again, matched by position. An erasure leaves the session's rows without their
words, so a client that goes on resending the erased conversation does not bring it back.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import anyio
import structlog
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from retold._audit import AuditLog
from retold._errors import AdapterHTTPError, InvalidInputError, PolicyError, RetoldError
from retold._keys import ApiKeyEntry, KeyFile
from retold._orchestrator import TurnOptions
from retold._records import Principal, Role, TranscriptTurn, _scope_id
from retold._store import Store
from retold.adapters.chat import ChatReply, MemoryChat, _write_turns

from ._limits import TokenBuckets
from ._metrics import CONTENT_TYPE_LATEST, GatewayMetrics, TurnUsage
from ._sessions import resolve_session
from ._wire import ChatRequest, error_body, finish_reason, parse_chat_request, sse_chunks

__all__ = ["BUDGET_HEADER", "DECISION_HEADER", "SESSION_HEADER", "Gateway", "GatewayConfig"]

log = structlog.get_logger(__name__)

_KEYS_TIMEOUT_S = 5.0  # reading the keys file is local; past this the disk is in trouble

DECISION_HEADER = "X-Retold-Decision"
SESSION_HEADER = "X-Retold-Session"
#: A request's latency budget (``TurnOptions.latency_budget_ms``): what the client accepts
#: beyond the draft, in milliseconds (0: the draft and the ambient profile only).
BUDGET_HEADER = "X-Retold-Latency-Budget-Ms"
#: The largest budget the header takes (an hour); a larger one is a client's mistake.
_MAX_BUDGET_MS = 3_600_000


class GatewayConfig(BaseModel):
    """Limits and timings of one gateway."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream_model: str = Field(min_length=1)
    """The model name the upstream serves (listed by ``GET /v1/models``)."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Largest request body accepted (413 beyond it)."""
    max_messages: int = Field(default=256, ge=1)
    """Most messages one request may carry (400 beyond it)."""
    rate_limit_rps: float = Field(default=5.0, gt=0)
    """Requests per second one key may make on average."""
    rate_limit_burst: int = Field(default=20, ge=1)
    """Requests one key may make at once before the rate applies (429 beyond it)."""
    session_idle_s: float = Field(default=1800.0, gt=0)
    """A session with no turn for this long ends by itself."""
    session_end_wait_s: float = Field(default=5.0, ge=0)
    """Longest a turn waits for its principal's pending session ends."""
    turn_timeout_s: float = Field(default=180.0, gt=0)
    """Longest one turn may take end to end (504 beyond it)."""
    shutdown_timeout_s: float = Field(default=30.0, ge=0)
    """Longest shutdown waits for pending session ends."""


class _Upstream(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.decision_id: str | None = None


@dataclass
class _Session:
    last_seen: float
    lock: anyio.Lock = field(default_factory=anyio.Lock)


@dataclass
class _Pending:
    count: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)


class Gateway:
    """The gateway: keys, limits, sessions and metrics around one :class:`MemoryChat`.

    Use it as an async context manager (it owns the background tasks: idle-session
    reaping and session ends); :attr:`app` is the Starlette application, whose lifespan
    enters the gateway, so ``uvicorn`` runs it as is.

    Args:
        chat: the memory chat (its model is the upstream, its store the database).
        keys: the keys file.
        config: limits and timings.
        clock: monotonic seconds, for the rate limit and idle sessions (injected in tests).
        wall_clock: Unix seconds for the ``created`` field (injected in tests).
        metrics: the metrics to update (the caller's when it wraps the model to count calls).
    """

    def __init__(
        self,
        chat: MemoryChat,
        keys: KeyFile,
        config: GatewayConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.chat = chat
        self.keys = keys
        self.config = config
        self.metrics = metrics or GatewayMetrics()
        self.metrics.watch_decisions(AuditLog(chat.store).writer)
        self._clock = clock
        self._wall = wall_clock
        self._buckets = TokenBuckets(
            rate=config.rate_limit_rps, burst=config.rate_limit_burst, clock=clock
        )
        self._sessions: dict[tuple[str, str, str], _Session] = {}
        # One default-session resolution (and claim) at a time per principal; a lock lives
        # while a resolution holds it, so the map does not grow with every principal served.
        self._resolving: weakref.WeakValueDictionary[Principal, anyio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._pending: dict[Principal, _Pending] = {}
        self._tg: TaskGroup | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/models/{model_id:path}", self._model, methods=["GET"]),
                Route("/v1/retold/sessions/{session_id}/end", self._end, methods=["POST"]),
                Route("/metrics", self._metrics, methods=["GET"]),
            ],
            exception_handlers={404: self._unknown_url, 405: self._unknown_url},
            lifespan=self._lifespan,
        )

    # -- lifecycle ----------------------------------------------------------------------

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with self:
            yield

    async def __aenter__(self) -> Self:
        self._tg = await anyio.create_task_group().__aenter__()
        await self.chat.__aenter__()  # each turn's conditional path in the chat's own group
        self._tg.start_soon(self._reap_forever)
        log.info("gateway_started", upstream_model=self.config.upstream_model)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tg is None:
            return
        # Sessions still open are ended too (extraction is incremental and idempotent, so a
        # session that continues after a restart loses nothing); every end gets the shutdown
        # timeout to finish, then the reaper and whatever is left are cancelled.
        for tenant, principal, session_id in list(self._sessions):
            self.end_session(Principal(tenant=tenant, principal=principal), session_id, "shutdown")
        tg, self._tg = self._tg, None
        with anyio.move_on_after(self.config.shutdown_timeout_s) as scope:
            await self.wait_for_session_ends()
        if scope.cancelled_caught:
            log.warning("gateway_shutdown_abandoned_session_ends")
        await self.chat.__aexit__(None, None, None)  # waits for turns still deciding
        tg.cancel_scope.cancel()
        await tg.__aexit__(exc_type, exc, tb)
        aclose = getattr(self.chat.model, "aclose", None)
        if aclose is not None:
            await aclose()
        log.info("gateway_stopped")

    async def _reap_forever(self) -> None:
        period = min(max(self.config.session_idle_s / 4, 0.05), 30.0)
        while True:
            await anyio.sleep(period)
            self.end_idle_sessions()

    async def wait_for_session_ends(self) -> None:
        """Return once no session end is pending."""
        while self._pending:
            pending = next(iter(self._pending.values()))
            await pending.done.wait()

    # -- sessions -----------------------------------------------------------------------

    def end_idle_sessions(self) -> list[str]:
        """Start ending every session idle longer than ``session_idle_s``; returns their ids."""
        now = self._clock()
        ended: list[str] = []
        for key, session in list(self._sessions.items()):
            if now - session.last_seen >= self.config.session_idle_s and not session.lock.locked():
                tenant, principal, session_id = key
                self.end_session(Principal(tenant=tenant, principal=principal), session_id, "idle")
                ended.append(session_id)
        return ended

    def end_session(self, scope: Principal, session_id: str, trigger: str) -> None:
        """Start ending one session in the background (extraction, activation, profile)."""
        if self._tg is None:
            raise RuntimeError("the gateway is not running; use it as an async context manager")
        self._sessions.pop((scope.tenant, scope.principal, session_id), None)
        pending = self._pending.setdefault(scope, _Pending())
        pending.count += 1
        self._tg.start_soon(self._run_end, scope, session_id, trigger, pending)

    async def _run_end(
        self, scope: Principal, session_id: str, trigger: str, pending: _Pending
    ) -> None:
        outcome = "ok"
        try:
            result = await self.chat.end_session(scope, session_id)
            log.info(
                "session_ended",
                session_id=session_id,
                trigger=trigger,
                records_written=len(result.written) if result is not None else 0,
            )
        except Exception as exc:
            outcome = "error"
            log.error("session_end_failed", session_id=session_id, error=type(exc).__name__)
        finally:
            self.metrics.sessions_ended.labels(trigger=trigger, outcome=outcome).inc()
            pending.count -= 1
            if pending.count == 0:
                pending.done.set()
                if self._pending.get(scope) is pending:
                    del self._pending[scope]

    async def _await_ends(self, scope: Principal) -> None:
        pending = self._pending.get(scope)
        if pending is None:
            return
        with anyio.move_on_after(self.config.session_end_wait_s) as waited:
            await pending.done.wait()
        if waited.cancelled_caught:
            log.warning("session_end_wait_exceeded", principal_pending=pending.count)

    # -- HTTP helpers -------------------------------------------------------------------

    def _error(
        self,
        route: str,
        status: int,
        message: str,
        *,
        type: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        self.metrics.requests.labels(route=route, status=str(status)).inc()
        return JSONResponse(
            error_body(message, type=type, code=code, param=param), status, headers=headers
        )

    async def _authenticate(self, request: Request, route: str) -> ApiKeyEntry | JSONResponse:
        header = request.headers.get("authorization", "")
        presented = header[7:].strip() if header[:7].lower() == "bearer " else ""
        try:
            entry = None
            if presented:
                with anyio.fail_after(_KEYS_TIMEOUT_S):
                    entry = await anyio.to_thread.run_sync(
                        self.keys.lookup, presented, abandon_on_cancel=True
                    )
        except (RetoldError, TimeoutError, OSError) as exc:
            log.error("gateway_keys_unreadable", error=type(exc).__name__)
            return self._error(
                route, 503, "The gateway's keys file cannot be read.", type="server_error"
            )
        if entry is None:
            return self._error(
                route,
                401,
                "Incorrect or revoked API key provided."
                if presented
                else "No API key provided (Authorization: Bearer <key>).",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        wait = self._buckets.take(entry.id)
        if wait > 0:
            self.metrics.rate_limited.inc()
            return self._error(
                route,
                429,
                f"Rate limit reached for this key; retry in {wait:.2f}s.",
                type="requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        return entry

    async def _body(self, request: Request) -> bytes:
        cap = self.config.max_body_bytes
        declared = _whole_number(request.headers.get("content-length"))
        if declared is not None and declared > cap:
            raise _TooLarge(cap)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise _TooLarge(cap)
            chunks.append(chunk)
        return b"".join(chunks)

    # -- routes -------------------------------------------------------------------------

    async def _metrics(self, request: Request) -> Response:
        model = getattr(self.chat.model, "inner", self.chat.model)
        self.metrics.observe_structured_output(getattr(model, "accepted_structured_output", None))
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def _model_object(self) -> dict[str, Any]:
        return {
            "id": self.config.upstream_model,
            "object": "model",
            "created": 0,
            "owned_by": "retold-gateway",
        }

    async def _models(self, request: Request) -> Response:
        auth = await self._authenticate(request, "models")
        if isinstance(auth, Response):
            return auth
        self.metrics.requests.labels(route="models", status="200").inc()
        return JSONResponse({"object": "list", "data": [self._model_object()]})

    async def _model(self, request: Request) -> Response:
        """``GET /v1/models/{id}``: the upstream model, the only one the gateway serves."""
        auth = await self._authenticate(request, "models")
        if isinstance(auth, Response):
            return auth
        model_id = request.path_params["model_id"]
        if model_id != self.config.upstream_model:
            return self._error(
                "models",
                404,
                f"The model {model_id!r} does not exist; this gateway serves "
                f"{self.config.upstream_model!r}.",
                type="invalid_request_error",
                code="model_not_found",
                param="model",
            )
        self.metrics.requests.labels(route="models", status="200").inc()
        return JSONResponse(self._model_object())

    async def _unknown_url(self, request: Request, exc: Exception) -> Response:
        """A path or method the gateway does not serve, answered in OpenAI's error JSON
        (what an SDK parses), not Starlette's plain text."""
        status = getattr(exc, "status_code", 404)
        return self._error(
            "unknown",
            status,
            f"Unknown request URL: {request.method} {request.url.path}.",
            type="invalid_request_error",
            code="unknown_url",
            headers=getattr(exc, "headers", None),  # a 405's Allow
        )

    async def _end(self, request: Request) -> Response:
        auth = await self._authenticate(request, "session_end")
        if isinstance(auth, Response):
            return auth
        session_id = request.path_params["session_id"]
        try:
            _scope_id(session_id)
        except ValueError as exc:
            return self._error(
                "session_end", 400, f"session id: {exc}", type="invalid_request_error", param="id"
            )
        self.end_session(auth.scope, session_id, "explicit")
        self.metrics.requests.labels(route="session_end", status="202").inc()
        return JSONResponse({"session_id": session_id, "status": "ending"}, 202)

    async def _chat_completions(self, request: Request) -> Response:
        route = "chat_completions"
        auth = await self._authenticate(request, route)
        if isinstance(auth, Response):
            return auth
        scope = auth.scope
        try:
            raw = await self._body(request)
            chat_request = parse_chat_request(raw, max_messages=self.config.max_messages)
            hottest = getattr(self.chat.model, "max_temperature", 2.0)
            if chat_request.temperature is not None and chat_request.temperature > hottest:
                raise InvalidInputError(
                    "temperature", f"must be between 0 and {hottest:g} for this gateway's upstream"
                )
            budget_ms = _budget(request.headers.get(BUDGET_HEADER))
            session_id = request.headers.get(SESSION_HEADER) or None
            if session_id is not None:
                try:
                    _scope_id(session_id)
                except ValueError as exc:
                    raise InvalidInputError(SESSION_HEADER, str(exc)) from None
        except _TooLarge as exc:
            return self._error(
                route,
                413,
                f"Request body exceeds {exc.cap} bytes.",
                type="invalid_request_error",
                code="request_too_large",
            )
        except InvalidInputError as exc:
            return self._error(route, 400, str(exc), type="invalid_request_error", param=exc.field)
        started = anyio.current_time()
        try:
            if session_id is None:
                session_id = await self._default_session(scope, chat_request)
            reply, usage = await self._turn(scope, session_id, chat_request, budget_ms)
        except _Upstream as exc:
            headers = {SESSION_HEADER: session_id} if session_id is not None else {}
            if exc.decision_id is not None:
                headers[DECISION_HEADER] = exc.decision_id
            return self._error(
                route, exc.status, exc.message, type="api_error", code=exc.code, headers=headers
            )
        except InvalidInputError as exc:
            return self._error(route, 400, str(exc), type="invalid_request_error", param=exc.field)
        except Exception as exc:
            # Never a traceback or a body to the client; the type goes to the log.
            log.error("gateway_turn_failed", session_id=session_id, error=type(exc).__name__)
            return self._error(
                route, 500, "The turn failed inside the gateway.", type="server_error"
            )
        elapsed = anyio.current_time() - started
        decision = reply.decision
        disposition = decision.disposition.value if decision is not None else "no_decision"
        self.metrics.turn_seconds.labels(disposition=disposition).observe(elapsed)
        headers = {SESSION_HEADER: session_id}
        if decision is not None:
            headers[DECISION_HEADER] = decision.decision_id
        ident = "chatcmpl-" + (
            decision.decision_id if decision is not None else f"{session_id}-{reply.turn_index}"
        )
        created = int(self._wall())
        model = self.config.upstream_model
        finish = finish_reason(reply.finish_reason)
        self.metrics.requests.labels(route=route, status="200").inc()
        if chat_request.stream:
            return StreamingResponse(
                _sse(
                    ident,
                    created,
                    model,
                    reply.response,
                    finish,
                    usage if chat_request.include_usage else None,
                ),
                media_type="text/event-stream",
                headers={**headers, "Cache-Control": "no-cache"},
            )
        return JSONResponse(
            {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.response},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": usage.as_openai(),
            },
            headers=headers,
        )

    async def _default_session(self, scope: Principal, req: ChatRequest) -> str:
        """The session a call without ``X-Retold-Session`` continues or starts, claimed
        before the principal's next resolution (see :mod:`retold.gateway._sessions`)."""
        store = self.chat.store
        lock = self._resolving.get(scope)
        if lock is None:
            lock = self._resolving[scope] = anyio.Lock()

        def claimed(session_id: str) -> bool:
            return (scope.tenant, scope.principal, session_id) in self._sessions

        async with lock:
            try:
                with anyio.fail_after(self.config.turn_timeout_s):
                    session_id = await anyio.to_thread.run_sync(
                        resolve_session,
                        store,
                        scope,
                        req.first_message,
                        req.conversation,
                        req.turn,
                        claimed,
                        abandon_on_cancel=True,
                    )
            except TimeoutError:
                log.warning("gateway_session_lookup_timed_out")
                raise _Upstream(504, "The turn did not finish in time.", "timeout") from None
            key = (scope.tenant, scope.principal, session_id)
            if key not in self._sessions:
                self._sessions[key] = _Session(last_seen=self._clock())
        return session_id

    async def _turn(
        self, scope: Principal, session_id: str, req: ChatRequest, budget_ms: int | None
    ) -> tuple[ChatReply, TurnUsage]:
        await self._await_ends(scope)
        key = (scope.tenant, scope.principal, session_id)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(last_seen=self._clock())
        usage, token = GatewayMetrics.start_turn()
        try:
            async with session.lock:
                session.last_seen = self._clock()
                try:
                    with anyio.fail_after(self.config.turn_timeout_s):
                        await self._record_history(scope, session_id, req)
                        reply = await self.chat.turn(
                            scope,
                            session_id,
                            req.turn,
                            public_context=req.public_context,
                            # The model sees the conversation the client sent, however long
                            # (a client sending only its turn gets the session's recent turns).
                            history_turns=max(self.chat.history_turns, len(req.conversation)),
                            options=TurnOptions(
                                latency_budget_ms=budget_ms,
                                max_tokens=req.max_tokens,
                                temperature=req.temperature,
                            ),
                        )
                except TimeoutError:
                    log.warning("gateway_turn_timed_out", session_id=session_id)
                    failed = _Upstream(504, "The turn did not finish in time.", "upstream_timeout")
                    failed.decision_id = await self._failed_decision(scope, session_id)
                    raise failed from None
                except (AdapterHTTPError, PolicyError) as exc:
                    failed = _classify(exc, session_id)
                    failed.decision_id = await self._failed_decision(scope, session_id)
                    raise failed from None
                finally:
                    session.last_seen = self._clock()
        finally:
            self.metrics.turn_model_calls.observe(usage.calls)
            GatewayMetrics.end_turn(token)
        return reply, usage

    async def _failed_decision(self, scope: Principal, session_id: str) -> str | None:
        """The decision row a failed turn wrote (the draft failure is logged before raising)."""

        def find() -> str | None:
            turns = self.chat.store.turns(scope, session_id, last=1)
            if not turns or turns[-1].role is not Role.USER:
                return None
            rows = AuditLog(self.chat.store).decision_rows(
                tenant=scope.tenant, principal=scope.principal, session_id=session_id
            )
            mine = [r for r in rows if r["turn_index"] == turns[-1].turn_index]
            return str(mine[-1]["id"]) if mine else None

        try:
            with anyio.fail_after(5):
                return await anyio.to_thread.run_sync(find, abandon_on_cancel=True)
        except Exception as exc:
            log.warning("gateway_decision_lookup_failed", error=type(exc).__name__)
            return None

    async def _record_history(self, scope: Principal, session_id: str, req: ChatRequest) -> None:
        """Record the client's earlier messages the session does not hold yet, in one
        transaction; without their words when the principal is erased meanwhile."""
        if not req.conversation:
            return
        store = self.chat.store
        since = store.clock()
        held, first = await anyio.to_thread.run_sync(_held_and_next, store, scope, session_id)
        turns = [
            TranscriptTurn(
                session_id=session_id,
                turn_index=index,
                role=Role.USER if role == "user" else Role.ASSISTANT,
                speaker=self.chat.user_name if role == "user" else None,
                text=text,
                time=since,
            )
            for index, (role, text) in enumerate(req.conversation[held:], start=first)
        ]
        if turns:
            await anyio.to_thread.run_sync(_write_turns, store, scope, turns, since)


def _held_and_next(store: Store, scope: Principal, session_id: str) -> tuple[int, int]:
    """How many user and assistant messages the session holds, and its next turn index (one
    aggregate read, however long the session)."""
    rows = store.query(
        "SELECT COUNT(CASE WHEN role IN ('user', 'assistant') THEN 1 END) AS held, "
        "COALESCE(MAX(turn_index) + 1, 0) AS next_index FROM transcript_turns "
        "WHERE tenant = ? AND principal = ? AND session_id = ?",
        [scope.tenant, scope.principal, session_id],
    )
    return int(rows[0]["held"]), int(rows[0]["next_index"])


def _whole_number(value: str | None) -> int | None:
    """A header holding ASCII digits only, as an int (None: absent or not such a number;
    a value too long for any limit here counts as huge, not as an error)."""
    if value is None:
        return None
    text = value.strip()
    if not (text and text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 18 else 10**18


def _budget(value: str | None) -> int | None:
    """The ``X-Retold-Latency-Budget-Ms`` header as milliseconds (None: not sent)."""
    if value is None:
        return None
    budget = _whole_number(value)
    if budget is None or budget > _MAX_BUDGET_MS:
        raise InvalidInputError(
            BUDGET_HEADER, f"must be a whole number of milliseconds from 0 to {_MAX_BUDGET_MS}"
        )
    return budget


class _TooLarge(Exception):
    def __init__(self, cap: int) -> None:
        self.cap = cap


def _classify(exc: RetoldError, session_id: str) -> _Upstream:
    """An upstream failure as the client sees it: never the upstream's body or our key."""
    cause: BaseException = exc
    if isinstance(exc, PolicyError) and exc.__cause__ is not None:
        cause = exc.__cause__
    status = getattr(cause, "status_code", None)
    text = str(cause).lower()
    timed_out = (
        isinstance(cause, TimeoutError)
        or (status == 0 and ("timed out" in text or "deadline" in text))
        or (isinstance(exc, PolicyError) and exc.reason == "timeout")
    )
    log.warning(
        "gateway_upstream_failed",
        session_id=session_id,
        status_code=status,
        error=type(cause).__name__,
        timed_out=timed_out,
    )
    if timed_out:
        return _Upstream(504, "The upstream model timed out.", "upstream_timeout")
    if isinstance(cause, PolicyError) and cause.reason == "malformed":
        # A 200 whose draft has no text (an empty completion): there is no answer to serve.
        return _Upstream(502, "The upstream model returned no text.", "upstream_error")
    detail = f" (HTTP {status})" if status else ""
    return _Upstream(502, f"The upstream model failed{detail}.", "upstream_error")


async def _sse(
    ident: str, created: int, model: str, text: str, finish: str, usage: TurnUsage | None
) -> AsyncIterator[bytes]:
    """The reply as OpenAI streams it; with ``usage`` (the client asked for it through
    ``stream_options``), every chunk carries ``"usage": null`` and one last chunk with no
    choices carries the turn's usage."""

    def chunk(choices: list[dict[str, Any]], last: TurnUsage | None = None) -> bytes:
        body: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
        }
        if usage is not None:
            body["usage"] = last.as_openai() if last is not None else None
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"

    def event(delta: dict[str, Any], finish: str | None) -> bytes:
        return chunk([{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}])

    yield event({"role": "assistant", "content": ""}, None)
    for piece in sse_chunks(text):
        yield event({"content": piece}, None)
    yield event({}, finish)
    if usage is not None:
        yield chunk([], usage)
    yield b"data: [DONE]\n\n"
