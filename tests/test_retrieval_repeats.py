"""Repeats: the same words said again on another day stay candidates (their day is not
lost), but each copy gives way to a record that says something new (``repeat_decay``)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from retold import Principal, RecordDraft, Store
from retold._retrieval import HybridRetriever, RetrievalConfig, _Hit

pytestmark = pytest.mark.anyio

LEXICAL = RetrievalConfig(dense=False, session_window=0)
SCOPE = Principal(tenant="t", principal="chat")
DAY = datetime(2026, 3, 1, 9, tzinfo=UTC)
REPEATED = "I need a holiday soon, seriously."
COPIES = 30
NEW = "The holiday cabin near Banff is booked for the second week of May."


def fill(store: Store) -> dict[str, str]:
    """Ana says the same line on 30 days; says something new once; Ben says her line once.

    With 30 copies ahead of the new record, a search for 8 or fewer reads no row of it at
    first: it is out of reach until the copies are demoted."""
    ids = {}
    for k in range(COPIES):
        when = DAY + timedelta(days=7 * k)
        ids[f"copy{k}"] = store.add(
            SCOPE, RecordDraft(text=REPEATED, speaker="Ana", event_time=when)
        ).id
    ids["new"] = store.add(
        SCOPE, RecordDraft(text=NEW, speaker="Ana", event_time=DAY + timedelta(days=3))
    ).id
    ids["ben"] = store.add(
        SCOPE, RecordDraft(text=REPEATED, speaker="Ben", event_time=DAY + timedelta(days=5))
    ).id
    for k in range(6):
        store.add(SCOPE, RecordDraft(text=f"Filler about the weather, note {k}.", speaker="Ana"))
    return ids


async def ranked(store: Store, config: RetrievalConfig, limit: int) -> list[str]:
    result = await HybridRetriever(store, config=config).search(SCOPE, "holiday", limit=limit)
    assert result.folded == {}  # other days: nothing folds
    return [c.record.id for c in result.candidates]


async def test_a_repeat_gives_way_to_something_new(any_store: Store) -> None:
    """With repeats at full score the top three are the short repeated line (it matches
    "holiday" best, as BM25 favours short text); with repeat_decay each copy by the same
    speaker falls behind the one new record, and Ben's line, his first, keeps its rank."""
    ids = fill(any_store)
    off = await ranked(any_store, LEXICAL.model_copy(update={"repeat_decay": 1.0}), 3)
    assert ids["new"] not in off
    top = await ranked(any_store, LEXICAL, 3)
    assert ids["new"] in top and ids["ben"] in top
    assert len(set(top) & {ids[f"copy{k}"] for k in range(COPIES)}) == 1
    # Nothing is lost: every copy is still a candidate further down.
    everything = await ranked(any_store, LEXICAL, 50)
    assert set(ids.values()) <= set(everything)


@pytest.mark.parametrize("decay", [1.0, 0.5, 0.0])
async def test_a_short_list_is_the_head_of_a_long_one(any_store: Store, decay: float) -> None:
    """Rows are read only while an unread one could still reach the top ``limit``; with
    demotion moving hits down, the cut must still give the same head as reading them all."""
    fill(any_store)
    config = LEXICAL.model_copy(update={"repeat_decay": decay})
    full = await ranked(any_store, config, 50)
    for limit in (1, 2, 3, 5, 8):
        assert await ranked(any_store, config, limit) == full[:limit]


_ROWIDS = itertools.count(1)


def _hit(rid: str, speaker: str, day: int, score: float) -> _Hit:
    row = {
        "rowid": next(_ROWIDS),
        "id": rid,
        "text": REPEATED,
        "speaker": speaker,
        "event_time": f"2026-03-{day:02d}T09:00:00+00:00",
        "created_at": "2026-03-01T09:00:00+00:00",
        "lifecycle": "active",
        "epistemic": "stated",
        "tags": "[]",
        "conflicts_with": "[]",
    }
    return _Hit(row=row, score=score)


def test_copies_are_matched_with_their_own_speakers_copies(any_store: Store) -> None:
    """Ben says the line first: Ana's copies still fold into Ana's copy of the same day and
    give way to her first, not to Ben's (which they can neither fold into nor repeat)."""
    ranked = [
        _hit("ben", "Ben", 1, 1.0),
        _hit("ana1", "Ana", 1, 0.9),
        _hit("ana1-again", "Ana", 1, 0.8),
        _hit("ana2", "Ana", 2, 0.7),
        _hit("ana3", "Ana", 3, 0.6),
    ]
    out = HybridRetriever(any_store, config=LEXICAL)._dedup(ranked)
    assert [(h.id, h.score, h.folded) for h in out] == [
        ("ben", 1.0, []),
        ("ana1", 0.9, ["ana1-again"]),
        ("ana2", 0.35, []),
        ("ana3", 0.15, []),
    ]
