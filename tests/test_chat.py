"""MemoryChat: memory and trigger modes, refused combinations, memory_search scope, sessions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from retold import (
    Disposition,
    InvalidInputError,
    Principal,
    RecordDraft,
    SQLiteStore,
    TurnOptions,
    UsageError,
)
from retold._activation import ActivationPolicy
from retold._activation_classifier import OfflineActivationClassifier
from retold._audit import AuditLog
from retold._config import UtilityAwareConfig
from retold._extraction import OfflineExtractor
from retold._retrieval import HybridRetriever
from retold._vectors import vector_counts
from retold.adapters import ChatMessage, OpenAIChatAdapter
from retold.adapters.chat import MemoryChat
from retold.policy.lexical import LexicalAdmissionJudge, LexicalGapPlanner
from retold.testing import (
    HashingEmbedder,
    LoopbackServer,
    loopback_fixture,
    openai_chat,
    tool_call,
)

from .conftest import FixedClock

loopback = loopback_fixture()

MAYA = Principal(tenant="acme", principal="maya")
EVE = Principal(tenant="acme", principal="eve")
OTHER_TENANT = Principal(tenant="globex", principal="maya")


def echo_model(messages: Sequence[ChatMessage]) -> str:
    """A deterministic responder: the answer names the user turn and repeats the system text."""
    system = messages[0].content if messages[0].role == "system" else ""
    return f"answer to {messages[-1].content!r} | {system}"


def make_chat(store: SQLiteStore, model: Any = echo_model, **kw: Any) -> MemoryChat:
    kw.setdefault("retriever", HybridRetriever(store))
    if kw.get("memory_mode", "utility_aware") == "utility_aware":
        kw.setdefault("config", UtilityAwareConfig(gap_enabled=True, admission_mode="custom"))
        kw.setdefault("gap_policy", LexicalGapPlanner())
        kw.setdefault("admission_policy", LexicalAdmissionJudge())
    return MemoryChat(store=store, model=model, **kw)


@pytest.mark.parametrize("trigger", ["auto", "hybrid"])
def test_utility_aware_refuses_auto_and_hybrid(store: SQLiteStore, trigger: str) -> None:
    """utility_aware with auto or hybrid triggering is refused at construction, naming why."""
    with pytest.raises(UsageError, match="tool_only"):
        make_chat(store, memory_mode="utility_aware", trigger_mode=trigger)


def test_unknown_modes_are_refused(store: SQLiteStore) -> None:
    """Unknown memory or trigger modes are usage errors."""
    with pytest.raises(UsageError, match="memory_mode"):
        make_chat(store, memory_mode="sometimes")
    with pytest.raises(UsageError, match="trigger_mode"):
        make_chat(store, memory_mode="tool_only", trigger_mode="always")


@pytest.mark.anyio
async def test_off_mode_uses_no_memory(store: SQLiteStore) -> None:
    """memory_mode=off answers from the conversation only and persists both turns."""
    store.add(MAYA, RecordDraft(text="My dentist is Dr. Ana Ribeiro."))
    chat = make_chat(store, memory_mode="off", retriever=None)
    reply = await chat.turn(MAYA, "s1", "Who is my dentist?")
    assert reply.decision is None and "Ribeiro" not in reply.response
    assert [t.role.value for t in store.turns(MAYA, "s1")] == ["user", "assistant"]


@pytest.mark.anyio
async def test_auto_trigger_appends_host_search(store: SQLiteStore) -> None:
    """tool_only memory with auto triggering puts the packed search result before the model."""
    store.add(MAYA, RecordDraft(text="My dentist is Dr. Ana Ribeiro.", speaker="Maya"))
    chat = make_chat(store, memory_mode="tool_only", trigger_mode="auto")
    reply = await chat.turn(MAYA, "s1", "Who is my dentist?")
    assert "Ribeiro" in reply.response and reply.searches == ("Who is my dentist?",)
    rows = store.query("SELECT origin, decision_id FROM search_log")
    assert rows == [{"origin": "host_auto", "decision_id": None}]


@pytest.mark.anyio
async def test_secret_in_user_turn_is_redacted_before_storage(store: SQLiteStore) -> None:
    """The transcript the wrapper persists passes the SR-1 gate."""
    chat = make_chat(store, memory_mode="off", retriever=None)
    key = "sk-" + "proj-Zq8wX3vB7nM2kL5pR9tY"
    await chat.turn(MAYA, "s1", f"my key is {key}")
    assert key not in store.turns(MAYA, "s1")[0].text


@pytest.fixture
async def adapter(loopback: LoopbackServer) -> AsyncIterator[OpenAIChatAdapter]:
    async with OpenAIChatAdapter("loopback-model", base_url=loopback.openai_base_url) as a:
        yield a


def _tool_result_texts(loopback: LoopbackServer) -> list[str]:
    out = []
    for req in loopback.chat_completions.requests:
        for m in req.json["messages"]:
            if m["role"] == "tool":
                out.append(m["content"])
    return out


@pytest.mark.parametrize(
    ("arguments", "answered"),
    [
        ({"query": "dentist"}, True),
        ({"query": "dentist", "tenant": "acme", "principal": "eve"}, False),
        ({"query": "dentist principal:eve tenant:globex"}, True),
        ('{"query": "dentist", "principal": "eve"', False),
    ],
    ids=["plain", "scope-args", "scope-in-query", "malformed"],
)
@pytest.mark.anyio
async def test_memory_search_stays_in_trusted_scope(
    store: SQLiteStore,
    loopback: LoopbackServer,
    adapter: OpenAIChatAdapter,
    arguments: Any,
    answered: bool,
) -> None:
    """Whatever memory_search's arguments say, it reads only the caller's scope."""
    store.add(MAYA, RecordDraft(text="My dentist is Dr. Ana Ribeiro.", speaker="Maya"))
    store.add(EVE, RecordDraft(text="My dentist is Dr. Eve Secretsmith.", speaker="Eve"))
    store.add(OTHER_TENANT, RecordDraft(text="My dentist is Dr. Globex Hidden.", speaker="Maya"))
    loopback.chat_completions.push(
        openai_chat(None, tool_calls=[tool_call("memory_search", arguments)]),
        openai_chat("Done."),
    )
    chat = make_chat(store, model=adapter, memory_mode="tool_only")
    reply = await chat.turn(MAYA, "s1", "Who is my dentist?")
    assert reply.response == "Done." and len(reply.tool_calls) == 1
    [result] = _tool_result_texts(loopback)
    assert "Secretsmith" not in result and "Globex" not in result
    if answered:
        assert "Ribeiro" in result
    else:
        assert result.startswith("error: invalid arguments")
    tools = loopback.chat_completions.requests[0].json["tools"]
    assert [t["function"]["name"] for t in tools] == ["memory_search"]


@pytest.mark.anyio
async def test_memory_search_is_logged(
    store: SQLiteStore, loopback: LoopbackServer, adapter: OpenAIChatAdapter
) -> None:
    """A model-issued search writes one search_log row with its query and result ids."""
    rec = store.add(MAYA, RecordDraft(text="I adopted a greyhound named Biscuit.", speaker="Maya"))
    loopback.chat_completions.push(
        openai_chat(
            None, tool_calls=[tool_call("memory_search", {"query": "greyhound", "limit": 3})]
        ),
        openai_chat("Biscuit!"),
    )
    chat = make_chat(store, model=adapter, memory_mode="tool_only")
    await chat.turn(MAYA, "s1", "What's my dog called?")
    [row] = AuditLog(store).search_rows_for_turn(MAYA, "s1", 0)
    assert row["origin"] == "model_tool" and row["query"] == "greyhound"
    assert list(row["result_ids"]) == [rec.id]


@pytest.mark.anyio
async def test_the_answers_sampling_options_reach_the_draft_and_the_regeneration(
    store: SQLiteStore, loopback: LoopbackServer, adapter: OpenAIChatAdapter
) -> None:
    """TurnOptions' max_tokens and temperature go with both calls that write the answer;
    a turn without them sends neither, leaving the model's defaults. The reply's finish
    reason is that of the call whose text it is."""
    store.add(MAYA, RecordDraft(text="My dentist is Dr. Ana Ribeiro in Porto.", speaker="Maya"))
    loopback.chat_completions.push(
        openai_chat("a draft cut short", finish_reason="length"),
        openai_chat("Dr. Ana Ribeiro.", finish_reason="stop"),
        openai_chat("You're welcome, and", finish_reason="length"),
    )
    chat = make_chat(store, model=adapter)
    options = TurnOptions(max_tokens=64, temperature=0.3)
    reply = await chat.turn(MAYA, "s1", "What was the name of my dentist again?", options=options)
    assert reply.decision is not None
    assert reply.decision.disposition is Disposition.REGENERATED
    assert (reply.response, reply.finish_reason) == ("Dr. Ana Ribeiro.", "stop")
    sent = [r.json for r in loopback.chat_completions.requests]
    assert len(sent) == 2  # the draft and the regeneration (the policies are lexical)
    assert all((s["max_tokens"], s["temperature"]) == (64, 0.3) for s in sent)
    thanks = await chat.turn(MAYA, "s1", "Thanks!")
    assert thanks.finish_reason == "length"  # the draft's, the answer
    last = loopback.chat_completions.requests[-1].json
    assert "max_tokens" not in last and "temperature" not in last


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": True}, "temperature"),
    ],
)
def test_turn_options_name_a_bad_sampling_option(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        TurnOptions(**options)
    assert caught.value.field == field


@pytest.mark.anyio
async def test_a_long_session_sends_its_newest_turns_and_counts_on(store: SQLiteStore) -> None:
    """The model gets the session's newest ``history_turns`` turns, in order, and the turn
    is written at the session's next index."""
    seen: list[list[str]] = []

    def model(messages: Sequence[ChatMessage]) -> str:
        seen.append([m.content or "" for m in messages if m.role != "system"])
        return f"re {messages[-1].content}"

    chat = make_chat(store, model=model, memory_mode="off", history_turns=3)
    for i in range(6):
        reply = await chat.turn(MAYA, "s1", f"message {i}")
        assert reply.turn_index == 2 * i
    assert seen[-1] == ["re message 3", "message 4", "re message 4", "message 5"]
    assert [t.turn_index for t in store.turns(MAYA, "s1")] == list(range(12))
    # One turn may ask for more (or none) of the session's history.
    await chat.turn(MAYA, "s1", "message 6", history_turns=5)
    assert seen[-1] == [
        "re message 3",
        "message 4",
        "re message 4",
        "message 5",
        "re message 5",
        "message 6",
    ]
    await chat.turn(MAYA, "s1", "message 7", history_turns=0)
    assert seen[-1] == ["message 7"]
    for bad in (-1, True, 1.5):
        with pytest.raises(InvalidInputError) as caught:
            await chat.turn(MAYA, "s1", "x", history_turns=bad)  # type: ignore[arg-type]
        assert caught.value.field == "history_turns"


@pytest.mark.anyio
async def test_tool_loop_is_bounded(
    store: SQLiteStore, loopback: LoopbackServer, adapter: OpenAIChatAdapter
) -> None:
    """A model that keeps calling tools is cut off after max_tool_rounds and made to answer."""
    loopback.chat_completions.respond_with(
        lambda req: openai_chat(
            "final" if req.json.get("tool_choice") == "none" else None,
            tool_calls=[]
            if req.json.get("tool_choice") == "none"
            else [tool_call("memory_search", {"query": "x"})],
        )(req)
    )
    chat = make_chat(store, model=adapter, memory_mode="tool_only", max_tool_rounds=2)
    reply = await chat.turn(MAYA, "s1", "loop forever")
    assert reply.response == "final" and len(reply.tool_calls) == 2
    assert len(loopback.chat_completions.requests) == 3


@pytest.mark.anyio
async def test_fact_from_session_one_is_used_in_session_three(
    store: SQLiteStore, clock: FixedClock
) -> None:
    """Extraction stores a session-1 fact; session 3's utility-aware path admits it; ordinary turns inject nothing."""
    chat = make_chat(
        store,
        extractor=OfflineExtractor(),
        activation=ActivationPolicy(store, OfflineActivationClassifier()),
    )
    await chat.turn(
        MAYA, "s1", "Always answer me concisely. My dentist is Dr. Ana Ribeiro in Porto."
    )
    first = await chat.end_session(MAYA, "s1")
    assert first is not None and len(first.written) == 2
    clock.advance(days=3)
    ordinary = await chat.turn(MAYA, "s2", "What's the capital of Australia?")
    assert ordinary.decision is not None
    assert ordinary.decision.disposition is Disposition.BASELINE_NO_GAPS
    assert "concisely" in ordinary.decision.profile.text  # promoted between sessions
    await chat.end_session(MAYA, "s2")
    clock.advance(days=3)
    reply = await chat.turn(MAYA, "s3", "What was the name of my dentist again?")
    decision = reply.decision
    assert decision is not None and decision.disposition is Disposition.REGENERATED
    assert "Ribeiro" in reply.response and "Ribeiro" not in decision.draft
    assert not set(decision.candidate_ids) & set(
        decision.profile.record_ids
    )  # in the draft already
    [admitted] = [store.get(MAYA, rid) for rid in decision.admitted_ids]
    assert admitted is not None and admitted.evidence[0].session_id == "s1"
    assert len(AuditLog(store).decision_rows(tenant="acme", principal="maya")) == 3


@pytest.mark.anyio
async def test_session_end_indexes_its_records_for_the_next_turns_search(
    store: SQLiteStore,
) -> None:
    """The records a session end writes are embedded (and their names indexed) then, off
    the turn path: the next turn's search embeds none of them. An embedder that fails
    there leaves the extraction's result standing; the next search embeds what is missing."""

    class Failing(HashingEmbedder):
        fail = False

        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            if self.fail:
                raise RuntimeError("embedding service down")
            return await super().embed(texts)

    embedder = Failing()
    retriever = HybridRetriever(store, embedder=embedder)
    chat = make_chat(store, extractor=OfflineExtractor(), retriever=retriever)
    await chat.turn(MAYA, "s1", "My dentist is Dr. Ana Ribeiro in Porto. My cat is Pixel.")
    result = await chat.end_session(MAYA, "s1")
    assert result is not None and len(result.written) == 2
    assert vector_counts(store, MAYA) == {embedder.model_id: 2}
    calls = embedder.calls
    await retriever.search(MAYA, "who is my dentist?")
    assert embedder.calls == calls + 1  # the query only

    embedder.fail = True
    await chat.turn(MAYA, "s2", "My sister Ines lives in Braga.")
    later = await chat.end_session(MAYA, "s2")
    assert later is not None and len(later.written) == 1 and later.failure is None
    assert vector_counts(store, MAYA) == {embedder.model_id: 2}
    embedder.fail = False
    await retriever.search(MAYA, "where does my sister live?")
    assert vector_counts(store, MAYA) == {embedder.model_id: 3}


@pytest.mark.anyio
async def test_tool_loop_ends_even_if_the_model_ignores_tool_choice(
    store: SQLiteStore, loopback: LoopbackServer, adapter: OpenAIChatAdapter
) -> None:
    """A model that asks for tools after being told not to gets no more: its text is the answer."""
    loopback.chat_completions.respond_with(
        openai_chat("still asking", tool_calls=[tool_call("memory_search", {"query": "x"})])
    )
    chat = make_chat(store, model=adapter, memory_mode="tool_only", max_tool_rounds=1)
    reply = await chat.turn(MAYA, "s1", "loop forever")
    assert reply.response == "still asking" and len(reply.tool_calls) == 1
    assert len(loopback.chat_completions.requests) == 2
