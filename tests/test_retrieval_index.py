"""The retrieval index (entity names, introductions by relation) is brought up to date in
steps, each committed, so a deadline that stops it loses no finished step."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

import retold._retrieval_index as retrieval
from retold import Principal, RecordDraft, Store
from retold._deadline import Deadline, bounded_by
from retold._errors import DeadlineExceeded

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
    keys = [retrieval._stage_key(stage) for stage in ("entity", "relation")]
    assert watermarks(any_store) == dict.fromkeys(keys, tenth)
    named = any_store.query("SELECT COUNT(DISTINCT record_id) AS n FROM retrieval_entities", [])
    assert named[0]["n"] == 10
    monkeypatch.setattr(retrieval, "_index_chunk", original)
    assert retrieval.index_entities(any_store, SCOPE) == 15
    assert retrieval.index_entities(any_store, SCOPE) == 0
    introduced = any_store.query("SELECT COUNT(*) AS n FROM retrieval_relations", [])
    assert introduced[0]["n"] == 25


def index_rows(store: Store) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """(entity, record id) and (relation, name, record id) rows of the scope, sorted."""
    scope = [SCOPE.tenant, SCOPE.principal]
    entities = store.query(
        "SELECT entity, record_id FROM retrieval_entities WHERE tenant = ? AND principal = ?",
        scope,
    )
    relations = store.query(
        "SELECT relation, name, record_id FROM retrieval_relations "
        "WHERE tenant = ? AND principal = ?",
        scope,
    )
    return (
        sorted((r["entity"], r["record_id"]) for r in entities),
        sorted((r["relation"], r["name"], r["record_id"]) for r in relations),
    )


#: The readings' first versions, where the version tests' stories start (the shipping
#: versions are pinned in READINGS).
FIRST_VERSIONS = {"entity": 1, "relation": 1}


def test_a_new_version_of_a_reading_reads_the_scope_again(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store indexed by an earlier reading (here: one that also takes "Porto" for a
    sister's name and every record's "Day" for an entity) keeps none of it once the
    reading's version moves: the next index drops the scope's rows of that table, reads
    every record again in committed steps a deadline can stop, and leaves the other
    scope and the other table's watermark alone."""
    monkeypatch.setattr(retrieval, "_INDEX_STAGES", FIRST_VERSIONS)
    other = Principal(tenant="t", principal="other")
    records = [
        any_store.add(
            SCOPE, RecordDraft(text=f"My sister Ana{chr(97 + k)} visited Porto, day {k}.")
        )
        for k in range(25)
    ]
    any_store.add(other, RecordDraft(text="My brother Luis moved to Lyon."))
    right = (retrieval.extract_entities, retrieval.introductions)

    def old_entities(text: str) -> set[str]:
        return set(right[0](text)) | {"day"}

    def old_introductions(text: str) -> list[tuple[str, str, bool]]:
        return [*right[1](text), ("Porto", "sister", True)]

    monkeypatch.setattr(retrieval, "extract_entities", old_entities)
    monkeypatch.setattr(retrieval, "introductions", old_introductions)
    assert retrieval.index_entities(any_store, SCOPE) == 25
    assert retrieval.index_entities(any_store, other) == 1
    before_other = index_rows_of(any_store, other)
    entities, relations = index_rows(any_store)
    assert ("day", records[0].id) in entities
    assert ("sister", "porto", records[0].id) in relations

    monkeypatch.setattr(retrieval, "extract_entities", right[0])
    monkeypatch.setattr(retrieval, "introductions", right[1])
    # Without a new version nothing is read again: the old reading stays.
    assert retrieval.index_entities(any_store, SCOPE) == 0
    assert index_rows(any_store) == (entities, relations)
    last_entity = watermarks(any_store)["entity@1"]

    monkeypatch.setattr(retrieval, "_INDEX_STAGES", {"entity": 1, "relation": 2})
    monkeypatch.setattr(retrieval, "_INDEX_CHUNK", 10)
    monkeypatch.setattr(retrieval, "_CLEAR_BATCH", 20)
    deadline = Deadline.after(60)
    # First the old rows go, 20 per step: a deadline after the first step keeps it.
    clears: list[str] = []
    check = retrieval.check_deadline

    def expire_before_second_clear(what: str) -> None:
        if what.startswith("clearing"):
            clears.append(what)
            if len(clears) == 2:
                deadline.expire()
        check(what)

    monkeypatch.setattr(retrieval, "check_deadline", expire_before_second_clear)
    with bounded_by(deadline), pytest.raises(DeadlineExceeded):
        retrieval.index_entities(any_store, SCOPE)
    assert len(index_rows(any_store)[1]) == len(relations) - 20 == 30
    assert watermarks(any_store) == {"entity@1": last_entity, "relation@2": -1}
    # Then the records are read again, 10 per step: a deadline after the first step keeps it.
    monkeypatch.setattr(retrieval, "check_deadline", check)
    deadline = Deadline.after(60)
    original = retrieval._index_chunk

    def one_step_then_expire(*args: object, **kw: object) -> None:
        original(*args, **kw)  # type: ignore[arg-type]
        deadline.expire()

    monkeypatch.setattr(retrieval, "_index_chunk", one_step_then_expire)
    with bounded_by(deadline), pytest.raises(DeadlineExceeded):
        retrieval.index_entities(any_store, SCOPE)
    half = index_rows(any_store)[1]
    assert half == sorted(("sister", f"ana{chr(97 + k)}", records[k].id) for k in range(10))
    # An indexer that read "clearing" before this one finished deletes nothing it wrote.
    retrieval._clear_stage(any_store, retrieval.retrieval_sql(any_store), SCOPE, "relation")
    assert index_rows(any_store)[1] == half
    monkeypatch.setattr(retrieval, "_index_chunk", original)
    assert retrieval.index_entities(any_store, SCOPE) == 15
    assert index_rows(any_store) == (
        entities,
        sorted(("sister", f"ana{chr(97 + k)}", records[k].id) for k in range(25)),
    )
    last = max(watermarks(any_store).values())
    assert watermarks(any_store) == {"entity@1": last, "relation@2": last}
    assert index_rows_of(any_store, other) == before_other

    # The entity reading moves too: its old "day" rows go, the relation rows stay.
    monkeypatch.setattr(retrieval, "_INDEX_STAGES", {"entity": 2, "relation": 2})
    assert retrieval.index_entities(any_store, SCOPE) == 25
    entities_now, relations_now = index_rows(any_store)
    assert entities_now == [e for e in entities if e[0] != "day"]
    assert ("day", records[0].id) in entities
    assert relations_now == sorted(
        ("sister", f"ana{chr(97 + k)}", records[k].id) for k in range(25)
    )
    assert watermarks(any_store) == {"entity@2": last, "relation@2": last}


def index_rows_of(store: Store, scope: Principal) -> list[tuple[str, ...]]:
    rows = store.query(
        "SELECT 'e' AS t, entity AS a, record_id FROM retrieval_entities "
        "WHERE tenant = ? AND principal = ? UNION ALL "
        "SELECT 'r' AS t, name AS a, record_id FROM retrieval_relations "
        "WHERE tenant = ? AND principal = ?",
        [scope.tenant, scope.principal, scope.tenant, scope.principal],
    )
    return sorted((r["t"], r["a"], r["record_id"]) for r in rows)


def test_a_store_indexed_before_versioned_readings_is_not_read_again(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watermarks a store kept before readings had versions ("entity", "relation")
    were written by version 1 of each: the migration names them so, and the next index
    of version 1 does not read the relations again. The names are, once: a later
    migration rebuilds their table keyed by write order, with the same names."""
    monkeypatch.setattr(retrieval, "_INDEX_STAGES", FIRST_VERSIONS)
    any_store.ensure_schema("retrieval", retrieval._RETRIEVAL_MIGRATIONS[:5])
    for k in range(3):
        any_store.add(SCOPE, RecordDraft(text=f"My wife Sara{chr(97 + k)} runs a pharmacy."))
    # What the indexer of that time wrote.
    rows = any_store.query("SELECT rowid, id, text FROM records ORDER BY rowid", [])
    with any_store.write() as w:
        for row in rows:
            for entity in retrieval.extract_entities(row["text"]):
                w.execute(
                    "INSERT INTO retrieval_entities (tenant, principal, entity, record_id) "
                    "VALUES (?, ?, ?, ?)",
                    [SCOPE.tenant, SCOPE.principal, entity, row["id"]],
                )
        for stage in ("entity", "relation"):
            w.execute(
                "INSERT INTO retrieval_watermarks (tenant, principal, stage, last_rowid) "
                "VALUES (?, ?, ?, ?)",
                [SCOPE.tenant, SCOPE.principal, stage, rows[-1]["rowid"]],
            )
    entities = index_rows(any_store)[0]
    assert retrieval.index_entities(any_store, SCOPE) == 3
    assert watermarks(any_store) == {"entity@1": rows[-1]["rowid"], "relation@1": rows[-1]["rowid"]}
    assert entities and index_rows(any_store) == (entities, [])
    # Each name is keyed by its record's place in the store.
    seqs = any_store.query(
        "SELECT DISTINCT e.seq, r.rowid FROM retrieval_entities e JOIN records r "
        "ON r.id = e.record_id",
        [],
    )
    assert len(seqs) == 3 and all(row["seq"] == row["rowid"] for row in seqs)
    assert retrieval.index_entities(any_store, SCOPE) == 0


def reading_corpus(tmp_path: Path) -> list[str]:
    """Every turn of the mini LoCoMo set and of two generated relation sets (one of each
    phrasing variant, one spoken about by the other speaker), in a fixed order."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "tools"))
    import synth_relations

    files = [Path(__file__).parent / "data" / "locomo_mini.json"]
    for name, argv in (("dev", ["--seed", "1"]), ("test", ["--seed", "3", "--by-other"])):
        out = tmp_path / f"{name}.json"
        synth_relations.main([str(out), *argv, "--variant", name, "--mentions", "2"])
        files.append(out)
    # Function words that are also names: a name inside a sentence, the word at its start.
    texts = ["My friend Will works as a carpenter.", "Will you come?", "Hi. Will is here."]
    texts += ["Ask Don about the bike.", '"Will it rain?" Don asked.', "I will go."]
    for path in files:
        for sample in json.loads(path.read_text("utf-8")):
            conversation = sample["conversation"]
            for key in sorted(conversation, key=lambda k: (len(k), k)):
                if key.startswith("session_") and isinstance(conversation[key], list):
                    texts.extend(turn["text"] for turn in conversation[key])
    return texts


#: What each reading's version is pinned to: the sha256 of its output over reading_corpus.
READINGS = {
    "entity": (2, "6c5d8bf6f1fbaf0783ff94ca5cee0afc7da8edec605619bcfaa875adb42e71f6"),
    "relation": (1, "2cc13c70e4a78f62a76c21902514d295a24f277393b37cf0fafc75d21491f0f5"),
}


def test_a_changed_reading_moves_its_index_version(tmp_path: Path) -> None:
    """The index keeps what a reading read when a record was written; only a new version
    makes a store read its records again. So a change to what extract_entities or
    introductions reads fails here until its version in retrieval._INDEX_STAGES moves
    (and the digest below is pinned anew with it)."""
    texts = reading_corpus(tmp_path)
    assert len(texts) > 500
    outputs = {
        "entity": [sorted(retrieval.extract_entities(t)) for t in texts],
        "relation": [sorted(retrieval.introductions(t)) for t in texts],
    }
    assert sum(map(len, outputs["relation"])) > 20
    for stage, read in outputs.items():
        digest = hashlib.sha256(json.dumps(read).encode()).hexdigest()
        version = retrieval._INDEX_STAGES[stage]
        assert (version, digest) == READINGS[stage], (
            f"what {stage} reads changed (sha256 {digest}): raise retrieval._INDEX_STAGES"
            f"[{stage!r}] and pin the new version with this digest in READINGS"
        )


def test_which_records_are_live_is_read_by_id_not_by_scope(tmp_path: Path) -> None:
    """Indexing and embedding check which of a batch of records are still alive. SQLite's
    planner read that through the scope index, every record of the principal (40 ms per
    check at 100,000 records, paid by the first search after a few writes); it must seek
    each id."""
    from retold import SQLiteStore
    from retold._retrieval_sql import retrieval_sql

    with SQLiteStore(tmp_path / "live.db") as store:
        retrieval.ensure_retrieval_schema(store)
        added = [store.add(SCOPE, RecordDraft(text=f"Note {k}.", speaker="Mei")) for k in range(6)]
        store.delete(SCOPE, added[0].id, actor="test")
        plans: list[str] = []

        class Explaining:
            def query(self, sql: str, params: list[object]) -> list[dict[str, object]]:
                plans.extend(
                    str(r["detail"]) for r in store.query("EXPLAIN QUERY PLAN " + sql, params)
                )
                return store.query(sql, params)

        ids = [r.id for r in added]
        assert retrieval_sql(store).live_ids(Explaining(), SCOPE, ids) == set(ids[1:])
        assert plans and all("(id=?)" in plan for plan in plans), plans


def test_a_watermark_removed_by_another_process_does_not_fail_the_index(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two versions running side by side: while this indexer clears a stage, one of a newer
    version removes the stage's watermark row. The index reads that stage from the first
    record instead of failing the search that runs it."""
    monkeypatch.setattr(retrieval, "_INDEX_STAGES", FIRST_VERSIONS)
    any_store.add(SCOPE, RecordDraft(text="My sister Ana moved to Porto."))
    assert retrieval.index_entities(any_store, SCOPE) == 1

    def removed_meanwhile(store: Store, dialect: object, scope: Principal, stage: str) -> None:
        with store.write() as w:
            w.execute(
                "DELETE FROM retrieval_watermarks WHERE stage = ?", [retrieval._stage_key(stage)]
            )

    monkeypatch.setattr(retrieval, "_INDEX_STAGES", {"entity": 1, "relation": 2})
    monkeypatch.setattr(retrieval, "_clear_stage", removed_meanwhile)
    assert retrieval.index_entities(any_store, SCOPE) == 1
    assert index_rows(any_store)[1] == [("sister", "ana", index_rows(any_store)[0][0][1])]


def test_the_scope_count_adds_only_the_records_written_since(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record count ranking uses (IDF) is brought up to date by counting the records
    after the last counted one, not the whole scope again, and stays exact: deleted records
    keep their row, other scopes are not counted."""
    from retold import HybridRetriever, RetrievalConfig

    retriever = HybridRetriever(any_store, config=RetrievalConfig(dense=False))
    other = Principal(tenant="t", principal="other")
    for k in range(5):
        any_store.add(SCOPE, RecordDraft(text=f"Ana biked to Porto, day {k}.", speaker="Mei"))
    assert retriever._scope_stats(SCOPE)[0] == 5
    counted: list[list[object]] = []
    query = any_store.query

    def recording(sql: str, params: list[object] = []) -> list[dict[str, object]]:  # noqa: B006
        if sql.startswith("SELECT COUNT(*) AS n FROM records"):
            counted.append(list(params))
        return query(sql, params)

    monkeypatch.setattr(any_store, "query", recording)
    added = [any_store.add(SCOPE, RecordDraft(text=f"Leo swam, day {k}.")) for k in range(3)]
    any_store.add(other, RecordDraft(text="Someone else's note."))
    any_store.delete(SCOPE, added[0].id, actor="test")
    total, speakers = retriever._scope_stats(SCOPE)
    rows = query(
        "SELECT rowid FROM records WHERE tenant = ? AND principal = ? ORDER BY rowid",
        [SCOPE.tenant, SCOPE.principal],
    )
    assert total == len(rows) == 8 and speakers == {"mei"}
    # one count, of the records after the fifth (the count's last mark)
    assert [p[2:] for p in counted] == [[rows[4]["rowid"], rows[-1]["rowid"]]]
    assert retriever._scope_stats(SCOPE)[0] == 8 and len(counted) == 1


@pytest.mark.parametrize("many", [False, True], ids=["skip-scan", "distinct"])
def test_the_scope_speakers_are_read_by_skip_scan_and_leave_with_their_records(
    any_store: Store, many: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope's speakers are its live records' distinct speakers, other scopes' not among
    them; a deleted record's speaker is erased with it. Read by seeking speaker after
    speaker, or (past the skip scan's bound) by a plain DISTINCT, with the same result."""
    from retold import HybridRetriever, RetrievalConfig
    from retold import _retrieval as retrieval_module

    if many:
        monkeypatch.setattr(retrieval_module, "_SKIP_SCAN_SPEAKERS", 2)
    retriever = HybridRetriever(any_store, config=RetrievalConfig(dense=False))
    for who in ["Mei", "Tomas", "Mei", "Ana Lucia", "Tomas"]:
        any_store.add(SCOPE, RecordDraft(text=f"{who} says hi.", speaker=who))
    any_store.add(SCOPE, RecordDraft(text="A note with no speaker."))
    gone = any_store.add(SCOPE, RecordDraft(text="Zed was here.", speaker="Zed"))
    any_store.add(Principal(tenant="t", principal="other"), RecordDraft(text="x", speaker="Bo"))
    assert sorted(retriever._speakers(SCOPE)) == ["Ana Lucia", "Mei", "Tomas", "Zed"]
    any_store.delete(SCOPE, gone.id, actor="test")
    assert sorted(retriever._speakers(SCOPE)) == ["Ana Lucia", "Mei", "Tomas"]
    any_store.add(SCOPE, RecordDraft(text="Back again.", speaker="Mei"))
    assert retriever._scope_stats(SCOPE)[1] == {"ana", "lucia", "mei", "tomas"}


def test_deleting_a_record_finds_its_names_by_record_id(tmp_path: Path) -> None:
    """The purge trigger deletes a record's names and introductions in the deleting
    transaction; it must seek them by record id, not read every name row of the scope
    (22 ms per deleted record at 100,000 records, under the write lock)."""
    from retold import SQLiteStore

    with SQLiteStore(tmp_path / "purge.db") as store:
        retrieval.ensure_retrieval_schema(store)
        for table in ("retrieval_entities", "retrieval_relations"):
            plan = store.query(
                f"EXPLAIN QUERY PLAN DELETE FROM {table} "
                "WHERE tenant = ? AND principal = ? AND record_id = ?",
                ["t", "chat", "r1"],
            )
            details = [str(row["detail"]) for row in plan]
            assert any(f"{table}_record" in d for d in details), details


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("My friend Will works as a carpenter.", ["will"]),
        ("What does Will do for work?", ["will"]),
        ("Ask Don, he knows.", ["ask", "don"]),
        ("Will you come on Friday?", ["friday"]),
        ("Hi. Will is here.", []),
        ('"Will it rain?" she asked.', []),
        ("I will go, and I don't mind.", []),
    ],
)
def test_a_name_that_is_also_a_function_word_is_a_name_inside_a_sentence(
    text: str, names: list[str]
) -> None:
    assert sorted(retrieval.extract_entities(text)) == names


@pytest.mark.anyio
async def test_a_question_about_will_finds_will(any_store: Store) -> None:
    """ "will" is a function word, so the lexical stage drops it; the entity stage reads the
    name inside the question and finds the record that names Will, ahead of the ones that
    only share "work"."""
    from retold import HybridRetriever, RetrievalConfig

    for text in (
        "Work has been busy but fine.",
        "I will finish the report for work tomorrow.",
        "What do you do for work these days?",
        "My friend Will works as a carpenter in Leeds.",
        "We may go hiking at the weekend.",
    ):
        any_store.add(SCOPE, RecordDraft(text=text, speaker="Ana", session_id="s1"))
    retriever = HybridRetriever(any_store, config=RetrievalConfig(dense=False, session_window=0))
    result = await retriever.search(SCOPE, "What does Will do for work?", limit=3)
    assert result.candidates[0].record.text.startswith("My friend Will")
