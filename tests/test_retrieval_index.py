"""The retrieval index (entity names, introductions by relation) is brought up to date in
steps, each committed, so a deadline that stops it loses no finished step."""

from __future__ import annotations

import pytest

import retold._retrieval as retrieval
from retold import Principal, RecordDraft, Store
from retold._store import Deadline, DeadlineExceeded, bounded_by

SCOPE = Principal(tenant="t", principal="chat")


def watermarks(store: Store) -> dict[str, int]:
    rows = store.query(
        "SELECT stage, last_rowid FROM retrieval_watermarks WHERE tenant = ? AND principal = ?",
        [SCOPE.tenant, SCOPE.principal],
    )
    return {r["stage"]: int(r["last_rowid"]) for r in rows}


def test_a_deadline_stops_indexing_between_steps_and_keeps_the_steps_done(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retrieval, "_INDEX_CHUNK", 10)
    for k in range(25):
        any_store.add(
            SCOPE, RecordDraft(text=f"My sister Ana{chr(97 + k)} visited Porto, day {k}.")
        )
    deadline = Deadline.after(60)
    steps: list[int] = []
    original = retrieval._index_chunk

    def one_step_then_expire(*args: object, **kw: object) -> None:
        original(*args, **kw)  # type: ignore[arg-type]
        steps.append(1)
        deadline.expire()

    monkeypatch.setattr(retrieval, "_index_chunk", one_step_then_expire)
    with bounded_by(deadline), pytest.raises(DeadlineExceeded):
        retrieval.index_entities(any_store, SCOPE)
    assert steps == [1]
    tenth = any_store.query(
        "SELECT rowid FROM records WHERE tenant = ? AND principal = ? ORDER BY rowid LIMIT 1 "
        "OFFSET 9",
        [SCOPE.tenant, SCOPE.principal],
    )[0]["rowid"]
    assert watermarks(any_store) == {"entity": tenth, "relation": tenth}
    named = any_store.query("SELECT COUNT(DISTINCT record_id) AS n FROM retrieval_entities", [])
    assert named[0]["n"] == 10
    monkeypatch.setattr(retrieval, "_index_chunk", original)
    assert retrieval.index_entities(any_store, SCOPE) == 15
    assert retrieval.index_entities(any_store, SCOPE) == 0
    introduced = any_store.query("SELECT COUNT(*) AS n FROM retrieval_relations", [])
    assert introduced[0]["n"] == 25
