"""The gateway through the official openai SDK, in process (httpx ASGITransport, no socket)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import openai
import pytest

from retold import (
    PostgresStore,
    Principal,
    Role,
    SQLiteStore,
    Store,
    TranscriptTurn,
    erase_principal,
)
from retold._audit import AuditLog
from retold._keys import KeyFile
from retold.adapters import RetryPolicy
from retold.gateway import (
    BUDGET_HEADER,
    DECISION_HEADER,
    SESSION_HEADER,
    Gateway,
    GatewayConfig,
    build_gateway,
    default_session_id,
)
from retold.gateway import _app as gateway_app
from retold.gateway._sessions import FORK_WINDOW, resolve_session
from retold.testing import (
    LoopbackServer,
    Reply,
    anthropic_message,
    loopback_fixture,
    openai_chat,
)

from .conftest import POSTGRES_URL

UPSTREAM_KEY = "sk-upstream-never-shown-7f3a9c"

loopback = loopback_fixture(api_key=UPSTREAM_KEY)

pytestmark = pytest.mark.anyio

BOTH_BACKENDS = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


@pytest.fixture
def anyio_backend() -> str:
    """The gateway runs under uvicorn (asyncio); the core paths also run on trio (marked)."""
    return "asyncio"


class FakeMonotonic:
    """A monotonic clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    gateway: Gateway
    store: Store
    keys: KeyFile
    alice: str
    bob: str
    clock: FakeMonotonic
    upstream: LoopbackServer

    def client(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=key,
            base_url="http://gateway.test/v1",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.gateway.app)),
        )

    def raw(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=self.gateway.app), base_url="http://gateway.test"
        )


ALICE = Principal(tenant="acme", principal="alice")
BOB = Principal(tenant="acme", principal="bob")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _gateway(
    store: Store, keys: KeyFile, loopback: LoopbackServer, clock: FakeMonotonic, **kw: Any
) -> Gateway:
    """The tests' gateway over ``store``: offline-reference bundle, shadow mode, tight limits
    (``kw``: more build_gateway arguments, or limits of ``config`` to change)."""
    limits: dict[str, Any] = {
        "rate_limit_rps": 0.01,
        "rate_limit_burst": 5,
        "session_idle_s": 60,
        "max_messages": 8,
        "max_body_bytes": 4096,
    }
    for name in list(kw):
        if name in GatewayConfig.model_fields:
            limits[name] = kw.pop(name)
    return build_gateway(
        store=store,
        keys=keys,
        bundle="offline-reference",
        live=False,
        upstream_base_url=loopback.openai_base_url,
        upstream_model="up-model",
        upstream_api_key=UPSTREAM_KEY,
        upstream_timeout_s=1.0,
        upstream_retry=RetryPolicy(initial_backoff=0.01, jitter=0),
        config=GatewayConfig(upstream_model="up-model", **limits),
        clock=clock,
        wall_clock=lambda: 1767225600.0,
        **kw,
    )


@pytest.fixture
async def env(tmp_path: Path, loopback: LoopbackServer) -> AsyncIterator[Env]:
    store = SQLiteStore(tmp_path / "gateway.db")
    keys = KeyFile(tmp_path / "keys.json")
    alice, _ = keys.add("acme", "alice")
    bob, _ = keys.add("acme", "bob")
    clock = FakeMonotonic()
    async with _gateway(store, keys, loopback, clock) as gateway:
        yield Env(gateway, store, keys, alice, bob, clock, loopback)
    store.close()


@BOTH_BACKENDS
async def test_non_streaming_answer_with_decision_header(env: Env) -> None:
    """A plain create() returns the upstream's answer, a decision id header and one decision row."""
    async with env.client(env.alice) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="anything",
            messages=[
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "hello there"},
            ],
        )
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello there"
    assert completion.model == "up-model"
    decision_id = raw.headers[DECISION_HEADER]
    rows = AuditLog(env.store).decision_rows(principal="alice")
    assert [r["id"] for r in rows] == [decision_id]
    sent = env.upstream.chat_completions.requests[0].json
    assert sent["model"] == "up-model"
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}


@pytest.mark.parametrize(("header", "budget"), [("0", 0), (" 250 ", 250), (None, None)])
async def test_the_latency_budget_header_is_the_turns_budget(
    env: Env, header: str | None, budget: int | None
) -> None:
    """X-Retold-Latency-Budget-Ms is the turn's latency_budget_ms (0: the draft and the
    profile only, no gap planning), recorded in its decision."""
    extra = {} if header is None else {BUDGET_HEADER: header}
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}", **extra},
            json={"messages": [{"role": "user", "content": "What was my dentist's name?"}]},
        )
    assert response.status_code == 200
    [row] = AuditLog(env.store).decision_rows(principal="alice")
    assert row["requested_budget_ms"] == budget
    if budget == 0:
        assert row["disposition"] == "baseline_budget_exhausted"


async def test_the_servers_default_budget_gives_way_to_the_requests(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """build_gateway(latency_budget_ms=0) (--latency-budget-ms) is every turn's budget unless
    the request sends X-Retold-Latency-Budget-Ms."""
    store = SQLiteStore(tmp_path / "g.db")
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.add("acme", "alice")
    question = {"messages": [{"role": "user", "content": "What was my dentist's name?"}]}
    async with _gateway(store, keys, loopback, FakeMonotonic(), latency_budget_ms=0) as gateway:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=gateway.app), base_url="http://gw"
        ) as raw:
            for extra in ({}, {BUDGET_HEADER: "500"}):
                response = await raw.post(
                    "/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}", **extra},
                    json=question,
                )
                assert response.status_code == 200
    first, second = AuditLog(store).decision_rows(principal="alice")
    store.close()
    assert (first["requested_budget_ms"], first["effective_budget_ms"]) == (None, 0)
    assert first["disposition"] == "baseline_budget_exhausted"
    assert (second["requested_budget_ms"], second["effective_budget_ms"]) == (500, 500)


# b"\xb2" is "²" in Latin-1, which str.isdigit() takes for a digit and int() refuses.
@pytest.mark.parametrize("header", ["-1", "abc", "1.5", b"\xb2", "9" * 30, "3600001", ""])
async def test_a_bad_latency_budget_header_is_a_400_naming_it(
    env: Env, header: str | bytes
) -> None:
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}", BUDGET_HEADER: header},
            json={"messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == BUDGET_HEADER
    assert AuditLog(env.store).decision_rows() == []


async def test_the_model_sees_the_whole_conversation_the_client_sent(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """A client's 40 earlier messages all reach the upstream (not the chat's default 20),
    and a client that sends only its turn in a named session gets the session's recent
    turns."""
    store = SQLiteStore(tmp_path / "g.db")
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.add("acme", "alice")
    said = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
        for i in range(40)
    ]
    gateway = _gateway(
        store, keys, loopback, FakeMonotonic(), max_messages=64, max_body_bytes=65536
    )
    async with gateway:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=gateway.app), base_url="http://gw"
        ) as raw:
            auth = {"Authorization": f"Bearer {key}", "X-Retold-Session": "long"}
            for messages in ([*said, {"role": "user", "content": "and now?"}],
                             [{"role": "user", "content": "only this"}]):  # fmt: skip
                response = await raw.post(
                    "/v1/chat/completions", headers=auth, json={"messages": messages}
                )
                assert response.status_code == 200
    store.close()
    whole, alone = (r.json["messages"] for r in loopback.chat_completions.requests)
    assert [m["content"] for m in whole] == [m["content"] for m in said] + ["and now?"]
    assert len(alone) == 21 and alone[-1]["content"] == "only this"
    assert alone[-2]["content"] == "echo: and now?"


@BOTH_BACKENDS
async def test_resent_history_is_recorded_once(env: Env) -> None:
    """Three calls resending the whole history leave each message once in the transcript."""
    history: list[dict[str, str]] = [{"role": "system", "content": "host context"}]
    async with env.client(env.alice) as client:
        for text in ("first question", "second question", "third question"):
            history.append({"role": "user", "content": text})
            completion = await client.chat.completions.create(model="m", messages=history)  # type: ignore[arg-type]
            history.append(
                {"role": "assistant", "content": completion.choices[0].message.content or ""}
            )
    sessions = {r["session_id"] for r in AuditLog(env.store).decision_rows(principal="alice")}
    assert len(sessions) == 1
    turns = env.store.turns(ALICE, sessions.pop())
    assert [(t.role.value, t.text) for t in turns] == [
        (m["role"], m["content"]) for m in history[1:]
    ]


async def test_history_resent_during_an_erasure_is_recorded_without_its_words(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose principal is erased while it records the client's earlier messages
    records their positions only; its turn, begun after the erasure, is recorded as usual."""
    read = gateway_app._held_and_next
    erased: list[object] = []

    def read_then_erase(store: Store, scope: Principal, session_id: str) -> tuple[int, int]:
        held = read(store, scope, session_id)
        if not erased:  # the operator erases alice while the gateway records her history
            erased.append(erase_principal(env.store, ALICE))
        return held

    monkeypatch.setattr(gateway_app, "_held_and_next", read_then_erase)
    messages = [
        {"role": "user", "content": "my locker is number 4417 at the Quetzal gym"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "new question"},
    ]
    async with env.client(env.alice) as client:
        await client.chat.completions.create(
            model="m", messages=messages, extra_headers={"X-Retold-Session": "s-erase"}
        )  # type: ignore[arg-type]
    assert erased
    stored = env.store.turns(ALICE, "s-erase")
    assert [t.text for t in stored] == ["", "", "new question", "echo: new question"]
    assert [t.turn_index for t in stored] == [0, 1, 2, 3]


@BOTH_BACKENDS
async def test_a_client_resending_an_erased_conversation_does_not_bring_it_back(
    env: Env,
) -> None:
    """After the principal's erasure, the client goes on resending the whole conversation:
    none of the erased messages is recorded again or sent upstream, the new turns are
    recorded after the erased ones, and the session's turns stay in the client's order."""
    secret = "my locker is number 4417 at the Quetzal gym"
    history: list[dict[str, str]] = [{"role": "user", "content": secret}]
    session = {"X-Retold-Session": "s-forget"}
    async with env.client(env.alice) as client:
        first = await client.chat.completions.create(
            model="m", messages=history, extra_headers=session
        )  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": first.choices[0].message.content or ""})
        erase_principal(env.store, ALICE)
        for text in ("what is new?", "and now?"):
            history.append({"role": "user", "content": text})
            reply = await client.chat.completions.create(
                model="m", messages=history, extra_headers=session
            )  # type: ignore[arg-type]
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    stored = env.store.turns(ALICE, "s-forget")
    assert [(t.turn_index, t.role.value, t.text) for t in stored] == [
        (0, "user", ""),
        (1, "assistant", ""),
        (2, "user", "what is new?"),
        (3, "assistant", "echo: what is new?"),
        (4, "user", "and now?"),
        (5, "assistant", "echo: and now?"),
    ]
    hits = env.store.query(
        "SELECT COUNT(*) AS n FROM transcript_turns WHERE text LIKE ?", ["%Quetzal%"]
    )
    assert hits == [{"n": 0}]
    upstream = [r.body.decode() for r in env.upstream.chat_completions.requests[1:]]
    assert len(upstream) == 2 and not any("Quetzal" in body for body in upstream)
    assert "what is new?" in upstream[1]


async def _chat(client: openai.AsyncOpenAI, history: list[dict[str, str]], text: str) -> str:
    """One call of a client that resends ``history`` with ``text`` and keeps the answer;
    returns the session the gateway chose."""
    history.append({"role": "user", "content": text})
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=history)  # type: ignore[arg-type]
    history.append({"role": "assistant", "content": raw.parse().choices[0].message.content or ""})
    return raw.headers[SESSION_HEADER]


def _sent(env: Env) -> list[dict[str, Any]]:
    """The messages of the upstream's latest request."""
    messages: list[dict[str, Any]] = env.upstream.chat_completions.requests[-1].json["messages"]
    return messages


async def test_chats_that_open_the_same_way_get_sessions_of_their_own(env: Env) -> None:
    """Two chats of one user both open with "hi": the second starts a fork of its own
    instead of being sent the first one's history, and each chat's later calls go on in
    its own session, whichever was newer."""
    first: list[dict[str, str]] = []
    second: list[dict[str, str]] = []
    async with env.client(env.alice) as client:
        a = await _chat(client, first, "hi")
        assert await _chat(client, first, "my cat is called Zorro") == a
        b = await _chat(client, second, "hi")
        assert "Zorro" not in str(_sent(env))
        assert await _chat(client, first, "what did I say?") == a
        assert "Zorro" in str(_sent(env))
        assert await _chat(client, second, "and you?") == b
        assert "Zorro" not in str(_sent(env))
    assert a == default_session_id("hi") and b == f"{a}-2"
    assert len(env.gateway._resolving) == 0  # a principal's lock lives while it is held
    assert [t.text for t in env.store.turns(ALICE, b) if t.role.value == "user"] == [
        "hi",
        "and you?",
    ]
    assert len(env.store.turns(ALICE, a)) == 6


async def test_every_chat_of_an_app_with_a_fixed_greeting_is_a_session_of_its_own(
    env: Env,
) -> None:
    """An app opens every chat with the same assistant greeting: each chat is a session
    seeded by its first user message (not a fork of the greeting's), found again by the
    user's messages, and the greeting is recorded in each."""
    greeting = {"role": "assistant", "content": "Hello! How can I help?"}
    chats: list[list[dict[str, str]]] = [[dict(greeting)], [dict(greeting)]]
    async with env.client(env.alice) as client:
        one = await _chat(client, chats[0], "plan my trip to Oslo")
        two = await _chat(client, chats[1], "fix my bike")
        assert await _chat(client, chats[0], "in May") == one
        assert "bike" not in str(_sent(env))
        assert await _chat(client, chats[1], "the chain") == two
        assert "Oslo" not in str(_sent(env))
    assert (one, two) == (
        default_session_id("plan my trip to Oslo"),
        default_session_id("fix my bike"),
    )
    texts = [t.text for t in env.store.turns(ALICE, two)]
    assert texts == [greeting["content"], "fix my bike", "echo: fix my bike", "the chain",
                     "echo: the chain"]  # fmt: skip


async def test_a_client_that_drops_the_assistants_messages_stays_in_its_session(
    env: Env,
) -> None:
    """Matching reads the user's messages only: a client that resends them without the
    answers continues its session."""
    async with env.client(env.alice) as client:
        sessions = set()
        users: list[dict[str, str]] = []
        for text in ("first", "second", "third"):
            users.append({"role": "user", "content": text})
            raw = await client.chat.completions.with_raw_response.create(
                model="m",
                messages=users,  # type: ignore[arg-type]
            )
            sessions.add(raw.headers[SESSION_HEADER])
    [session] = sessions
    assert [t.text for t in env.store.turns(ALICE, session)][::2] == ["first", "second", "third"]


def test_resolve_session_forks_past_claims_and_compares_the_newest_forks(
    tmp_path: Path,
) -> None:
    """A first call skips forks claimed by calls still in flight; a continuing call picks
    the fork holding most of its user messages; past ``FORK_WINDOW`` newer forks an old
    conversation starts a new one (its history is then recorded there)."""
    store = SQLiteStore(tmp_path / "s.db")
    base = default_session_id("hi")

    def add(session: str, *users: str) -> None:
        for i, text in enumerate(users):
            store.add_turn(
                ALICE,
                TranscriptTurn(
                    session_id=session, turn_index=2 * i, role=Role.USER, text=text, time=NOW
                ),
            )
            store.add_turn(
                ALICE,
                TranscriptTurn(
                    session_id=session,
                    turn_index=2 * i + 1,
                    role=Role.ASSISTANT,
                    text="ok",
                    time=NOW,
                ),
            )

    def resolve(*users: str, turn: str = "next", claimed: frozenset[str] = frozenset()) -> str:
        conversation = [
            (role, text) for u in users for role, text in (("user", u), ("assistant", "x"))
        ]
        return resolve_session(store, ALICE, "hi", conversation, turn, claimed.__contains__)

    assert resolve() == base
    assert resolve(claimed=frozenset({base})) == f"{base}-2"
    add(base, "hi", "cats")
    add(f"{base}-2", "hi")
    assert resolve() == f"{base}-3"
    assert resolve(claimed=frozenset({f"{base}-3"})) == f"{base}-4"
    assert resolve("hi") == f"{base}-2"  # the other holds more than the client sent
    assert resolve("hi", "cats") == base  # both continue it: the one holding more wins
    assert resolve("hi", "dogs") == f"{base}-2"
    assert resolve("hello") == f"{base}-3"  # continues none: a new fork
    for k in range(3, 3 + FORK_WINDOW):
        add(f"{base}-{k}", "hi", f"topic {k}")
    assert resolve("hi", "cats") == f"{base}-{3 + FORK_WINDOW}"
    assert resolve("hi", f"topic {2 + FORK_WINDOW}") == f"{base}-{2 + FORK_WINDOW}"
    store.close()


def test_a_turn_sent_again_after_it_failed_continues_its_session(tmp_path: Path) -> None:
    """A failed turn leaves its user message unanswered; the same turn sent again (by the
    client, or its SDK's retry) continues the session, and so does the next call, whose
    history holds that message once; another turn after the failure forks."""
    store = SQLiteStore(tmp_path / "s.db")
    base = default_session_id("hi")

    def write(*turns: tuple[Role, str]) -> None:
        start = store.next_turn_index(ALICE, base)
        for i, (role, text) in enumerate(turns, start=start):
            turn = TranscriptTurn(session_id=base, turn_index=i, role=role, text=text, time=NOW)
            store.add_turn(ALICE, turn)

    def resolve(earlier: list[str], turn: str) -> str:
        conversation = [(r, t) for u in earlier for r, t in (("user", u), ("assistant", "x"))]
        return resolve_session(store, ALICE, "hi", conversation, turn, lambda _: False)

    write((Role.USER, "hi"), (Role.ASSISTANT, "hello"), (Role.USER, "cats?"))  # it failed
    assert resolve(["hi"], "cats?") == base
    assert resolve(["hi"], "dogs?") == f"{base}-2"
    write((Role.USER, "cats?"), (Role.ASSISTANT, "cats!"))  # the retry, answered
    assert resolve(["hi", "cats?"], "more?") == base
    assert resolve([], "hi") == f"{base}-2"  # a new chat that opens the same way
    store.close()


def test_a_client_that_drops_the_middle_of_its_history_continues_its_session(
    tmp_path: Path,
) -> None:
    """A client that keeps its first messages and its latest ones continues its session;
    another chat that happens to end on the same message as it stays in its own, which it
    continues whole."""
    store = SQLiteStore(tmp_path / "s.db")
    base = default_session_id("hi")

    def write(session: str, *users: str) -> None:
        for i, text in enumerate(users):
            for j, (role, said) in enumerate(((Role.USER, text), (Role.ASSISTANT, "ok"))):
                turn = TranscriptTurn(
                    session_id=session, turn_index=2 * i + j, role=role, text=said, time=NOW
                )
                store.add_turn(ALICE, turn)

    def resolve(*earlier: str) -> str:
        conversation = [(r, t) for u in earlier for r, t in (("user", u), ("assistant", "x"))]
        return resolve_session(store, ALICE, "hi", conversation, "next", lambda _: False)

    write(base, "hi", "thanks")
    write(f"{base}-2", "hi", "plan a trip", "to Oslo", "in May", "thanks")
    assert resolve("hi", "in May", "thanks") == f"{base}-2"  # the middle dropped
    assert resolve("hi", "to Oslo", "in May") == f"{base}-3"  # ends elsewhere: another chat
    assert resolve("hi", "thanks") == base  # continued whole beats the newer, dropped-middle
    store.close()


async def test_the_sdks_retry_of_a_failed_call_stays_in_its_session(env: Env) -> None:
    """The upstream fails a call (502): the openai SDK's automatic retry, and the calls
    after it, stay in the conversation's session."""
    history: list[dict[str, str]] = []
    async with env.client(env.alice) as client:
        first = await _chat(client, history, "hi")
        env.upstream.chat_completions.push(*[Reply.error(500) for _ in range(3)])
        retrying = client.with_options(max_retries=1)
        history.append({"role": "user", "content": "cats?"})
        raw = await retrying.chat.completions.with_raw_response.create(
            model="m",
            messages=history,  # type: ignore[arg-type]
        )
        history.append(
            {"role": "assistant", "content": raw.parse().choices[0].message.content or ""}
        )
        assert raw.headers[SESSION_HEADER] == first
        assert await _chat(client, history, "more?") == first
    users = [t.text for t in env.store.turns(ALICE, first) if t.role is Role.USER]
    assert users == ["hi", "cats?", "cats?", "more?"]
    assert [r["session_id"] for r in AuditLog(env.store).decision_rows(principal="alice")] == [
        first
    ] * 4


async def test_imported_history_is_recorded_before_the_turn(env: Env) -> None:
    """Earlier messages the session does not hold yet are recorded once, in order."""
    messages = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "new question"},
    ]
    async with env.client(env.alice) as client:
        await client.chat.completions.create(
            model="m", messages=messages, extra_headers={"X-Retold-Session": "s-import"}
        )  # type: ignore[arg-type]
    turns = env.store.turns(ALICE, "s-import")
    assert [t.text for t in turns] == [
        "old question",
        "old answer",
        "new question",
        "echo: new question",
    ]


# The openai SDK's stream iterators leave async generators for the GC to close, which trio
# reports as a ResourceWarning; the SDK runs on asyncio, and the wire test below runs on both.
async def test_streaming_returns_content(env: Env) -> None:
    """stream=True through the SDK yields the whole answer in more than one chunk."""
    text = "a longer question so that the streamed answer needs more than one chunk to carry"
    async with env.client(env.alice) as client:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], stream=True
        )
        async with stream:
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert len([p for p in pieces if p]) > 1
    assert "".join(pieces) == f"echo: {text}"


@BOTH_BACKENDS
async def test_streaming_wire_is_sse_ending_with_done(env: Env) -> None:
    """The SSE body carries chunk objects, the decision header, and ends with [DONE]."""
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}"},
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    assert DECISION_HEADER.lower() in response.headers
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "echo: hi"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_unknown_and_revoked_keys_get_401(env: Env) -> None:
    """An unknown key and a revoked key raise openai.AuthenticationError with OpenAI's error JSON."""
    async with env.client("rtd-not-a-key") as client:
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    bob_id = next(e.id for e in env.keys.entries() if e.principal == "bob")
    KeyFile(env.keys.path).revoke(bob_id)  # another process (the CLI) revokes it
    async with env.client(env.bob) as client:
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert env.upstream.chat_completions.requests == []


async def test_rate_limit_answers_429_with_retry_after(env: Env) -> None:
    """Past the burst a key gets 429 with Retry-After; another key is unaffected."""
    async with env.client(env.alice) as client:
        for _ in range(5):
            await client.models.list()
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert caught.value.status_code == 429
    assert int(caught.value.response.headers["retry-after"]) >= 1
    async with env.client(env.bob) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["up-model"]
    env.clock.now += 200  # the bucket refills with time
    async with env.client(env.alice) as client:
        await client.models.list()


async def test_a_model_is_retrieved_by_id_and_unknown_urls_get_openai_errors(
    env: Env,
) -> None:
    """models.retrieve() finds the upstream model and raises NotFoundError for another; a
    path or method the gateway does not serve is answered in OpenAI's error JSON."""
    async with env.client(env.alice) as client:
        model = await client.models.retrieve("up-model")
        assert (model.id, model.object) == ("up-model", "model")
        with pytest.raises(openai.NotFoundError) as caught:
            await client.models.retrieve("gpt-unknown")
    assert caught.value.code == "model_not_found"
    async with env.raw() as raw:
        missing = await raw.get("/v1/embeddings", headers={"Authorization": f"Bearer {env.alice}"})
        wrong = await raw.get("/v1/chat/completions")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "unknown_url"
    assert "GET /v1/embeddings" in missing.json()["error"]["message"]
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    assert env.upstream.chat_completions.requests == []


async def test_an_empty_upstream_answer_is_a_502_that_says_so(env: Env) -> None:
    """An upstream 200 with no text leaves no draft to serve: 502, saying why, recorded."""
    env.upstream.chat_completions.push(openai_chat(""), openai_chat("  \n"))
    async with env.raw() as raw:
        for _ in range(2):
            response = await raw.post(
                "/v1/chat/completions",
                headers={"Authorization": f"Bearer {env.alice}"},
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert response.status_code == 502
            error = response.json()["error"]
            assert error["code"] == "upstream_error"
            assert error["message"] == "The upstream model returned no text."
            row = AuditLog(env.store).decision_rows(principal="alice")[-1]
            assert response.headers[DECISION_HEADER] == row["id"]
            assert row["failure_stage"] == "draft" and row["failure_reason"] == "malformed"


async def test_upstream_5xx_becomes_502_without_secrets(env: Env) -> None:
    """An upstream that keeps failing gives the client 502 with OpenAI's error JSON and no key."""
    env.upstream.chat_completions.push(
        *[Reply.error(500, f"boom {UPSTREAM_KEY}") for _ in range(3)]
    )
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}"},
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    row = AuditLog(env.store).decision_rows(principal="alice")[-1]
    assert response.headers[DECISION_HEADER] == row["id"]
    assert row["disposition"] == "baseline_policy_failure"
    assert UPSTREAM_KEY not in response.text
    async with env.client(env.alice) as client:
        env.upstream.chat_completions.push(*[Reply.error(503) for _ in range(3)])
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert caught.value.status_code == 502


async def test_upstream_timeout_becomes_504(env: Env) -> None:
    """An upstream slower than its read timeout gives the client 504."""
    env.upstream.chat_completions.push(openai_chat("late", delay=5))
    async with env.client(env.alice) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert caught.value.status_code == 504
    assert caught.value.code == "upstream_timeout"


async def test_upstream_429_is_retried_and_answered(env: Env) -> None:
    """An upstream 429 with Retry-After is retried by the adapter; the client sees 200."""
    env.upstream.chat_completions.push(Reply.rate_limited(retry_after=0), openai_chat("fine"))
    async with env.client(env.alice) as client:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert completion.choices[0].message.content == "fine"


@pytest.mark.parametrize("cap", ["max_completion_tokens", "max_tokens"])
async def test_the_clients_temperature_and_token_cap_reach_the_upstream(env: Env, cap: str) -> None:
    """temperature and max_completion_tokens (or the older max_tokens) are the answer's."""
    async with env.client(env.alice) as client:
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            temperature=0.25,
            **{cap: 33},  # type: ignore[arg-type]
        )
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hello again"}]
        )
    first, second = (r.json for r in env.upstream.chat_completions.requests)
    assert (first["temperature"], first["max_tokens"]) == (0.25, 33)
    assert "temperature" not in second and "max_tokens" not in second


async def test_an_answer_cut_at_its_token_cap_finishes_with_length(env: Env) -> None:
    """The upstream's finish reason reaches the client as OpenAI's: an answer that hit
    max_tokens finishes with "length" (JSON and stream), a whole one with "stop"."""
    env.upstream.chat_completions.push(
        openai_chat("a cut", finish_reason="length"),
        openai_chat("a cut again", finish_reason="length"),
        openai_chat("whole", finish_reason="stop"),
    )
    question = [{"role": "user", "content": "tell me everything"}]
    async with env.client(env.alice) as client:
        cut = await client.chat.completions.create(model="m", messages=question, max_tokens=3)
        stream = await client.chat.completions.create(model="m", messages=question, stream=True)
        async with stream:
            finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
        whole = await client.chat.completions.create(model="m", messages=question)
    assert cut.choices[0].finish_reason == "length"
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert whole.choices[0].finish_reason == "stop"


async def test_usage_is_what_the_turn_cost_upstream(env: Env) -> None:
    """`usage` carries the tokens the upstream reported for the turn's calls, and /metrics
    adds them up by kind."""
    env.upstream.chat_completions.push(openai_chat("fine", usage=(120, 30)))
    async with env.client(env.alice) as client:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert len(env.upstream.chat_completions.requests) == 1  # shadow: the draft only
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (120, 30)
    assert completion.usage.total_tokens == 150
    async with env.raw() as raw:
        text = (await raw.get("/metrics")).text
    assert 'retold_gateway_upstream_tokens_total{kind="prompt"} 120.0' in text
    assert 'retold_gateway_upstream_tokens_total{kind="completion"} 30.0' in text


async def test_streamed_usage_comes_last_and_only_when_asked(env: Env) -> None:
    """With stream_options.include_usage the last chunk has no choices and the turn's usage
    (the others say null); without it no chunk carries usage, as from OpenAI."""
    env.upstream.chat_completions.push(
        openai_chat("a streamed answer long enough for several chunks, " * 3, usage=(40, 9))
    )
    async with env.client(env.alice) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "tell me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            chunks = [c async for c in stream]
    *answer, last = chunks
    assert len(answer) > 2 and all(c.choices and c.usage is None for c in answer)
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (40, 9)
    assert last.usage.total_tokens == 49
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}"},
            json={"stream": True, "messages": [{"role": "user", "content": "again"}]},
        )
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert all("usage" not in json.loads(e) for e in events[:-1])


def _one_message(**fields: Any) -> bytes:
    """A request body with one user message and ``fields``."""
    return json.dumps({"messages": [{"role": "user", "content": "x"}], **fields}).encode()


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, "body"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}] * 9}).encode(),
            400,
            "messages",
        ),
        (
            json.dumps({"messages": [{"role": "assistant", "content": "x"}]}).encode(),
            400,
            "messages",
        ),
        (
            json.dumps(
                {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}
            ).encode(),
            400,
            "tools",
        ),
        (b'{"messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}', 413, None),
        (_one_message(stream_options={"include_usage": True}), 400, "stream_options"),
        (_one_message(temperature=2.5), 400, "temperature"),
        (_one_message(max_tokens=10, max_completion_tokens=10), 400, "max_tokens"),
        (_one_message(max_completion_tokens=0), 400, "max_completion_tokens"),
        (
            _one_message(stream=True, stream_options={"include_usage": "yes"}),
            400,
            "stream_options.include_usage",
        ),
    ],
    ids=[
        "not-json",
        "too-many-messages",
        "no-user-turn",
        "tools",
        "too-large",
        "stream-options-without-stream",
        "temperature-too-high",
        "two-token-caps",
        "token-cap-zero",
        "include-usage-not-boolean",
    ],
)
async def test_bad_requests_name_the_field_and_write_nothing(
    env: Env, body: bytes, status: int, param: str | None
) -> None:
    """Malformed, oversized and unsupported requests are refused before any turn is recorded."""
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}", "content-type": "application/json"},
            content=body,
        )
    assert response.status_code == status
    assert response.json()["error"]["param"] == param
    assert AuditLog(env.store).decision_rows() == []
    assert env.upstream.chat_completions.requests == []


@BOTH_BACKENDS
async def test_session_end_extracts_in_the_background_scoped_to_the_key(env: Env) -> None:
    """Ending a session (202) extracts the principal's facts for them only, off the request."""
    async with env.client(env.alice) as client:
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "My dentist is Dr. Okafor on Elm Street."}],
            extra_headers={"X-Retold-Session": "s1"},
        )
    async with env.raw() as raw:
        response = await raw.post(
            "/v1/retold/sessions/s1/end", headers={"Authorization": f"Bearer {env.alice}"}
        )
        assert response.status_code == 202
        assert response.json() == {"session_id": "s1", "status": "ending"}
        await env.gateway.wait_for_session_ends()
        bad = await raw.post("/v1/retold/sessions/s1/end", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    texts = [r.text for r in env.store.list_records(ALICE)]
    assert any("Okafor" in t for t in texts)
    assert env.store.list_records(BOB) == []


async def test_idle_sessions_end_by_themselves(env: Env) -> None:
    """A session with no turn for session_idle_s is ended; a fresh one is not."""
    async with env.client(env.alice) as client:
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "I'm allergic to peanuts."}],
            extra_headers={"X-Retold-Session": "idle-one"},
        )
        env.clock.now += 30
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Retold-Session": "fresh-one"},
        )
    env.clock.now += 31
    assert env.gateway.end_idle_sessions() == ["idle-one"]
    await env.gateway.wait_for_session_ends()
    assert any("peanut" in r.text for r in env.store.list_records(ALICE))
    assert env.gateway.end_idle_sessions() == []


async def test_metrics_expose_turn_latency_and_model_calls(env: Env) -> None:
    """/metrics is Prometheus text with per-turn latency and upstream call counts."""
    async with env.client(env.alice) as client:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    async with env.raw() as raw:
        response = await raw.get("/metrics")
    text = response.text
    assert response.headers["content-type"].startswith("text/plain")
    assert 'retold_gateway_turn_seconds_count{disposition="baseline_no_gaps"} 1.0' in text
    assert 'retold_gateway_model_calls_total{outcome="ok"} 1.0' in text
    assert "retold_gateway_turn_model_calls_sum 1.0" in text
    assert 'retold_gateway_requests_total{route="chat_completions",status="200"} 1.0' in text
    # The turn's decision, read from the store's writer at the scrape.
    assert "retold_gateway_decisions_written_total 1.0" in text
    assert "retold_gateway_decisions_failed_total 0.0" in text
    assert "retold_gateway_decisions_pending 0.0" in text
    assert UPSTREAM_KEY not in text


async def test_upstream_key_reaches_upstream_only(env: Env, tmp_path: Path) -> None:
    """The upstream key is sent upstream and appears in no response or database byte."""
    async with env.raw() as raw:
        ok = await raw.post(
            "/v1/chat/completions",
            headers={"Authorization": f"Bearer {env.alice}"},
            json={"messages": [{"role": "user", "content": "hello"}]},
        )
    assert ok.status_code == 200 and UPSTREAM_KEY not in ok.text
    assert env.upstream.chat_completions.requests[0].headers["authorization"] == (
        f"Bearer {UPSTREAM_KEY}"
    )
    env.store.close()
    assert UPSTREAM_KEY.encode() not in _db_bytes(tmp_path)


def _db_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("gateway.db*")))


async def test_anthropic_upstream(tmp_path: Path, loopback: LoopbackServer) -> None:
    """--upstream-provider anthropic speaks the Messages API upstream and OpenAI to the
    client (its end_turn and max_tokens finish as stop and length); a temperature above
    Anthropic's 1 is a 400 naming the field, with no call."""
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.add("acme", "alice")
    store = SQLiteStore(tmp_path / "a.db")
    gateway = build_gateway(
        store=store,
        keys=keys,
        bundle="offline-reference",
        live=False,
        upstream_base_url=loopback.anthropic_base_url,
        upstream_model="claude-test",
        upstream_provider="anthropic",
        upstream_api_key=UPSTREAM_KEY,
    )
    async with gateway:
        client = openai.AsyncOpenAI(
            api_key=key,
            base_url="http://gateway.test/v1",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gateway.app)),
        )
        async with client:
            completion = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi there"}]
            )
            with pytest.raises(openai.BadRequestError) as caught:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "again"}], temperature=1.5
                )
            loopback.messages.push(anthropic_message("a cut", stop_reason="max_tokens"))
            cut = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "go on"}], max_tokens=2
            )
    assert completion.choices[0].message.content == "echo: hi there"
    assert completion.choices[0].finish_reason == "stop"
    assert cut.choices[0].finish_reason == "length"
    sent, capped = loopback.messages.requests
    assert capped.json["max_tokens"] == 2
    assert sent.headers["x-api-key"] == UPSTREAM_KEY
    assert caught.value.param == "temperature"
    assert "between 0 and 1 " in caught.value.message
    store.close()


async def test_concurrent_turns_in_one_session_are_serialised(env: Env) -> None:
    """Two turns arriving together in one session get distinct, ordered transcript slots."""
    async with env.client(env.alice) as client:

        async def ask(text: str) -> None:
            await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": text}],
                extra_headers={"X-Retold-Session": "shared"},
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "one")
            tg.start_soon(ask, "two")
    turns = env.store.turns(ALICE, "shared")
    assert [t.turn_index for t in turns] == [0, 1, 2, 3]
    assert sorted(t.text for t in turns if t.role.value == "user") == ["one", "two"]
    pairs = [(turns[i].text, turns[i + 1].text) for i in (0, 2)]
    assert all(answer == f"echo: {question}" for question, answer in pairs)


async def test_shutdown_ends_open_sessions(tmp_path: Path, loopback: LoopbackServer) -> None:
    """Leaving the gateway ends the sessions still open, so their facts are extracted."""
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.add("acme", "alice")
    store = SQLiteStore(tmp_path / "s.db")
    gateway = build_gateway(
        store=store,
        keys=keys,
        bundle="offline-reference",
        live=False,
        upstream_base_url=loopback.openai_base_url,
        upstream_model="m",
        upstream_api_key=UPSTREAM_KEY,
    )
    async with gateway:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=gateway.app), base_url="http://gw"
        ) as raw:
            response = await raw.post(
                "/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}", "X-Retold-Session": "open"},
                json={"messages": [{"role": "user", "content": "My sister Ana lives in Lisbon."}]},
            )
            assert response.status_code == 200
        assert store.list_records(ALICE) == []
    assert any("Lisbon" in r.text for r in store.list_records(ALICE))
    store.close()


@BOTH_BACKENDS
async def test_a_postgresql_store_serves_turns_and_session_ends(
    tmp_path: Path, loopback: LoopbackServer, pg_schema: str
) -> None:
    """The gateway over PostgresStore: a turn is answered and audited, a session end extracts."""
    assert POSTGRES_URL is not None
    store = PostgresStore(POSTGRES_URL, schema=pg_schema)
    keys = KeyFile(tmp_path / "keys.json")
    alice, _ = keys.add("acme", "alice")
    clock = FakeMonotonic()
    async with _gateway(store, keys, loopback, clock) as gateway:
        env = Env(gateway, store, keys, alice, alice, clock, loopback)
        async with env.client(alice) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="m",
                messages=[{"role": "user", "content": "My dentist is Dr. Okafor on Elm Street."}],
                extra_headers={"X-Retold-Session": "s1"},
            )
        assert (
            raw.parse().choices[0].message.content
            == "echo: My dentist is Dr. Okafor on Elm Street."
        )
        rows = AuditLog(store).decision_rows(principal="alice")
        assert [r["id"] for r in rows] == [raw.headers[DECISION_HEADER]]
        async with env.raw() as http:
            ended = await http.post(
                "/v1/retold/sessions/s1/end", headers={"Authorization": f"Bearer {alice}"}
            )
            assert ended.status_code == 202
            await gateway.wait_for_session_ends()
    assert any("Okafor" in r.text for r in store.list_records(ALICE))
    store.close()
