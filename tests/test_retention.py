"""prune_transcript and ``retold memory prune-transcript``: old conversations that memory does
not rely on lose their words; the sessions records come from or cite are kept whole.

A real chat pipeline (offline extraction and activation) writes an old small-talk session,
an old session that records were extracted from, and a recent session, for two principals
and a principal of another tenant. Pruning blanks only the first kind, keeps the rows, leaves
the ambient profile and every record's verification as they were, and a chat that continues
a blanked session sends the model no empty message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import retold._retention as retention
from retold import (
    EvidenceRef,
    InvalidInputError,
    Principal,
    ProfileAssembler,
    RecordDraft,
    RecordKind,
    SQLiteStore,
    Store,
    prune_transcript,
)
from retold._activation import ActivationPolicy
from retold._activation_classifier import OfflineActivationClassifier
from retold._activation_evidence import verify_evidence
from retold._extraction import OfflineExtractor
from retold.adapters import ChatMessage
from retold.cli import main

from .conftest import FixedClock
from .test_chat import echo_model, make_chat
from .test_erasure import _where

MAYA = Principal(tenant="acme", principal="maya")
EVE = Principal(tenant="acme", principal="eve")
OTTO = Principal(tenant="other", principal="otto")
SMALL_TALK = "Can you suggest a name for a sourdough starter, something like Zanzibarian?"
STATED = "Always answer me concisely. My dentist is Dr. Quetzalcoatl in Porto."


def _chat(store: Store, model: Any = echo_model) -> Any:
    return make_chat(
        store,
        model=model,
        extractor=OfflineExtractor(),
        activation=ActivationPolicy(store, OfflineActivationClassifier()),
    )


async def _history(store: Store, clock: FixedClock) -> None:
    """Old small talk (s0) and an old statement (s1) for everyone; 40 days later, a recent
    session (s2) for maya."""
    chat = _chat(store)
    for who in (MAYA, EVE, OTTO):
        await chat.turn(who, "s0", SMALL_TALK)
        await chat.end_session(who, "s0")
        await chat.turn(who, "s1", STATED)
        await chat.end_session(who, "s1")
    clock.advance(days=40)
    await chat.turn(MAYA, "s2", "Is Dr. Quetzalcoatl still my dentist?")


def _shape(store: Store, who: Principal, session: str) -> list[tuple[int, str, str]]:
    return [(t.turn_index, t.role.value, t.time.isoformat()) for t in store.turns(who, session)]


@pytest.mark.anyio
async def test_old_sessions_memory_does_not_rely_on_lose_their_words(
    any_store: Store, clock: FixedClock
) -> None:
    store = any_store
    await _history(store, clock)
    profile = ProfileAssembler(store).build(MAYA)
    assert profile.record_ids  # the old statement's preference is ambient
    records = store.list_records(MAYA)
    assert records and all(r.session_id == "s1" for r in records)
    verified = {r.id: verify_evidence(store, MAYA, r) for r in records}
    shape = _shape(store, MAYA, "s0")
    kept = {s: store.turns(MAYA, s) for s in ("s1", "s2")}

    pruned = prune_transcript(store, clock() - timedelta(days=30), tenant="acme")

    assert pruned.counts == {
        "sessions": 2,
        "sessions_continuing": 0,
        "transcript_turns": 4,
        "sessions_kept": 2,
    }
    assert [t.text for t in store.turns(MAYA, "s0")] == ["", ""]
    assert all(t.speaker is None for t in store.turns(MAYA, "s0"))
    assert _shape(store, MAYA, "s0") == shape  # rows, indices, roles and times stay
    assert {s: store.turns(MAYA, s) for s in ("s1", "s2")} == kept
    assert _where(store, "Zanzibarian") == {"transcript_turns.text"}  # otto's, other tenant
    assert ProfileAssembler(store).build(MAYA) == profile
    assert {r.id: verify_evidence(store, MAYA, r) for r in records} == verified
    again = prune_transcript(store, clock() - timedelta(days=30), tenant="acme")
    assert again.counts == {
        "sessions": 0,
        "sessions_continuing": 0,
        "transcript_turns": 0,
        "sessions_kept": 2,
    }
    everyone = prune_transcript(store, clock() - timedelta(days=30))
    assert everyone.counts["sessions"] == 1 and _where(store, "Zanzibarian") == set()


@pytest.mark.anyio
async def test_a_session_a_record_comes_to_rely_on_meanwhile_is_kept(
    any_store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record written while the prune runs that cites an old session keeps it whole."""
    store = any_store
    await _history(store, clock)
    first = retention._relied_on

    def then_a_record_cites_s0(*args: Any, **kw: Any) -> set[str]:
        found = first(*args, **kw)
        if kw.get("after_rowid") is None:  # the prune's first reading, before its writes
            store.add(
                MAYA,
                RecordDraft(
                    text="Named the sourdough starter.",
                    session_id="s9",
                    evidence=(EvidenceRef(session_id="s0", turn_index=0),),
                ),
            )
        return found

    monkeypatch.setattr(retention, "_relied_on", then_a_record_cites_s0)
    pruned = prune_transcript(store, clock() - timedelta(days=30), tenant="acme")

    assert store.turns(MAYA, "s0")[0].text == SMALL_TALK
    assert [t.text for t in store.turns(EVE, "s0")] == ["", ""]
    assert pruned.counts["sessions_kept"] == 3


@pytest.mark.anyio
async def test_a_chat_that_continues_a_blanked_session_sends_no_empty_message(
    store: SQLiteStore, clock: FixedClock
) -> None:
    await _history(store, clock)
    prune_transcript(store, clock() - timedelta(days=30))
    seen: list[Sequence[ChatMessage]] = []

    def model(messages: Sequence[ChatMessage]) -> str:
        seen.append(list(messages))
        return echo_model(messages)

    reply = await _chat(store, model).turn(MAYA, "s0", "Back again, a second name please?")

    assert reply.turn_index == 2  # the blanked turns still count
    assert seen and all(m.content for messages in seen for m in messages)
    assert [m.content for m in seen[0] if m.role == "user"] == ["Back again, a second name please?"]


@pytest.mark.anyio
async def test_a_thread_that_goes_on_past_the_cutoff_loses_its_old_words(
    any_store: Store, clock: FixedClock
) -> None:
    """A session the user keeps coming back to loses the words of its turns before the
    cutoff and keeps the newer ones; a continuing session memory relies on stays whole."""
    store = any_store
    chat = _chat(store)
    await chat.turn(EVE, "thread", SMALL_TALK)
    await chat.turn(MAYA, "thread", STATED)
    await chat.end_session(MAYA, "thread")  # records come from maya's thread
    clock.advance(days=40)
    for who in (EVE, MAYA):
        await chat.turn(who, "thread", "And another sourdough question for you.")
    before = _shape(store, EVE, "thread")
    kept = store.turns(MAYA, "thread")

    pruned = prune_transcript(store, clock() - timedelta(days=30))

    assert pruned.counts == {
        "sessions": 1,
        "sessions_continuing": 1,
        "transcript_turns": 2,
        "sessions_kept": 1,
    }
    assert [t.text for t in store.turns(EVE, "thread")] == [
        "",
        "",
        "And another sourdough question for you.",
        "answer to 'And another sourdough question for you.' | ",
    ]
    assert _shape(store, EVE, "thread") == before
    assert store.turns(MAYA, "thread") == kept
    assert _where(store, "Zanzibarian") == set()


def test_memory_prune_transcript_needs_yes_and_reports_counts(
    tmp_path: Path, clock: FixedClock, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "memory.db"
    with SQLiteStore(db, clock=clock) as store:
        anyio.run(_history, store, clock)
        before = (clock() - timedelta(days=30)).isoformat()
    args = ["memory", "prune-transcript", "--db", str(db), "--before", before]

    assert main([*args, "--tenant", "acme"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert main([*args, "--all-tenants", "--yes", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {
        "sessions": 3,
        "sessions_continuing": 0,
        "transcript_turns": 6,
        "sessions_kept": 3,
    }
    assert main([*args[:4], "--tenant", "acme", "--older-than-days", "0", "--yes"]) == 2
    assert "--older-than-days" in capsys.readouterr().err
    assert main([*args[:4], "--tenant", "acme", "--before", "someday", "--yes"]) == 2
    with SQLiteStore(db, clock=clock) as store:
        assert _where(store, "Zanzibarian") == set()


def test_a_cutoff_without_a_time_zone_is_refused(store: SQLiteStore) -> None:
    with pytest.raises(InvalidInputError) as caught:
        prune_transcript(store, datetime(2026, 1, 1))
    assert caught.value.field == "before"


@pytest.mark.anyio
async def test_the_session_a_hosts_record_was_verified_in_is_kept(
    store: SQLiteStore, clock: FixedClock
) -> None:
    """A record the host wrote (no session, no evidence) that activation verified against
    a turn of an old session keeps that session: its verified-evidence event names it."""
    await make_chat(store).turn(MAYA, "s5", "Always answer me in bullet points, please.")
    record = store.add(
        MAYA, RecordDraft(kind=RecordKind.PREFERENCE, text="Always answer me in bullet points.")
    )
    policy = ActivationPolicy(store, OfflineActivationClassifier())
    [outcome] = policy.on_record_committed_sync(MAYA, record.id)
    assert outcome.evidence == EvidenceRef(session_id="s5", turn_index=0)
    verified = verify_evidence(store, MAYA, record)
    clock.advance(days=40)

    pruned = prune_transcript(store, clock() - timedelta(days=30))

    assert pruned.counts == {
        "sessions": 0,
        "sessions_continuing": 0,
        "transcript_turns": 0,
        "sessions_kept": 1,
    }
    assert verified is not None
    assert verify_evidence(store, MAYA, record) == verified


@pytest.mark.anyio
async def test_the_session_a_record_comes_from_is_kept(
    store: SQLiteStore, clock: FixedClock
) -> None:
    """A record that names its session (and cites no turn) keeps that session: its
    verification reads the session it came from."""
    await _history(store, clock)
    store.add(MAYA, RecordDraft(text="Talked about sourdough.", session_id="s0"))

    prune_transcript(store, clock() - timedelta(days=30), tenant="acme")

    assert store.turns(MAYA, "s0")[0].text == SMALL_TALK
    assert [t.text for t in store.turns(EVE, "s0")] == ["", ""]
