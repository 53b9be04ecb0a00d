"""erase_principal and ``retold memory erase``: every stored copy of one principal's words goes.

A real chat pipeline (extraction, activation, profile, gap planning, retrieval, audit) writes
two principals' words into every table that keeps them; erasing one leaves no trace of their
words in any text column (and, after vacuum, in the SQLite files' bytes) while the other's
stay, the decision skeleton stays, and a failure rolls everything back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import retold._vectors as vectors
from retold import (
    Erasure,
    HybridRetriever,
    LifecycleState,
    PostgresStore,
    Principal,
    ProfileAssembler,
    ProfileBlock,
    RecordDraft,
    RetrievalResult,
    SQLiteStore,
    Store,
    StoreError,
    erase_principal,
)
from retold._activation import ActivationPolicy
from retold._activation_classifier import OfflineActivationClassifier
from retold._audit import AuditLog
from retold._extraction import OfflineExtractor
from retold._retrieval import scope_stats
from retold._store import _record_from_values
from retold.cli import main
from retold.testing import ScriptedGapPolicy

from .conftest import (
    POSTGRES_URL,
    FixedClock,
    counter_ids,
    fresh_pg_schema,
    postgres_table_files,
)
from .test_chat import make_chat
from .test_vectors import clustered

MAYA = Principal(tenant="acme", principal="maya")
EVE = Principal(tenant="acme", principal="eve")
# Each principal's dentist has a name nothing else in the store contains.
WORDS = {MAYA: "Quetzalcoatl", EVE: "Brontornis"}


async def _converse(store: Store, clock: FixedClock) -> None:
    """Both principals: a fact and a preference in session 1, asked about in session 2."""
    chat = make_chat(
        store,
        extractor=OfflineExtractor(),
        activation=ActivationPolicy(store, OfflineActivationClassifier()),
    )
    for who, word in WORDS.items():
        # A host that labels its own writes with the user's words.
        store.add(
            who,
            RecordDraft(text="Has a dentist.", tags=(f"dr-{word}",), idempotency_key=word),
        )
        await chat.turn(
            who, "s1", f"Always answer me concisely. My dentist is Dr. {word} in Porto."
        )
        await chat.end_session(who, "s1")
    clock.advance(days=3)
    for who, word in WORDS.items():
        await chat.turn(who, "s2", f"Is Dr. {word} still my dentist?")  # s2 stays open
        await chat.turn(who, "s2", "What was the name of my dentist again?")


def _where(store: Store, word: str) -> set[str]:
    """``table.column`` of every text column, in every table, that contains ``word``."""
    if store.dialect == "sqlite":
        tables = [
            r["name"]
            for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r["name"].startswith(("sqlite_", "records_fts"))
        ]
        columns = [
            (t, c["name"])
            for t in tables
            for c in store.query(f"PRAGMA table_info({t})")
            if c["type"].upper() == "TEXT"
        ]
    else:
        columns = [
            (r["table_name"], r["column_name"])
            for r in store.query(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND data_type = 'text'"
            )
        ]
    return {
        f"{t}.{c}"
        for t, c in columns
        if store.query(
            f'SELECT 1 AS hit FROM "{t}" WHERE LOWER("{c}") LIKE ? LIMIT 1', [f"%{word.lower()}%"]
        )
    }


class _ErasingRetriever(HybridRetriever):
    """Searches, then the operator erases ``who`` (once): mid-turn, after the search."""

    def __init__(self, store: Store, clock: FixedClock, who: Principal) -> None:
        super().__init__(store)
        self.clock, self.who = clock, who
        self.erasures: list[Erasure] = []

    async def search(self, scope: Principal, query: str, **kw: Any) -> RetrievalResult:
        found = await super().search(scope, query, **kw)
        if not self.erasures:
            self.clock.advance(seconds=1)
            self.erasures.append(erase_principal(self.store, self.who))
        return found


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


@pytest.mark.anyio
async def test_erasure_removes_every_copy_of_one_principals_words(
    any_store: Store, clock: FixedClock
) -> None:
    """The principal's words leave every table; the other principal's stay; the skeleton stays."""
    store = any_store
    await _converse(store, clock)
    maya_before = _where(store, WORDS[MAYA])
    eve_before = _where(store, WORDS[EVE])
    # The pipeline put the words in the records, the transcript, the audit and the profile.
    assert {
        "records.text",
        "records.tags",
        "records.idempotency_key",
        "transcript_turns.text",
        "search_log.query",
        "turn_decisions.gaps",
    } <= maya_before
    assert maya_before == eve_before
    decisions_before = AuditLog(store).decision_rows(tenant="acme", principal="maya")
    assert len(decisions_before) == 3
    assert any(k[1] == "maya" for k in scope_stats(store))  # retrieval's in-process cache

    erasure = erase_principal(store, MAYA)

    # This process's caches forgot the principal (shared records are cleared whole).
    assert not any(k[1] == "maya" for k in scope_stats(store))
    assert any(k[1] == "eve" for k in scope_stats(store))
    assert _record_from_values.cache_info().currsize == 0

    assert _where(store, WORDS[MAYA]) == set()
    assert _where(store, WORDS[EVE]) == eve_before
    counts = erasure.counts
    assert counts["records"] >= 3 and counts["transcript_turns"] == 6
    assert counts["search_log"] >= 1 and counts["turn_decisions"] >= 1
    assert counts["profile_snapshots"] == 1 and counts["extraction_progress"] == 1
    records = store.list_records(MAYA, lifecycle=None, include_expired=True)
    assert {r.lifecycle for r in records} == {LifecycleState.DELETED}
    assert all(r.text == "" and r.tags == () and r.idempotency_key is None for r in records)
    assert store.list_records(EVE) and store.turns(EVE, "s1")
    # The transcript rows stay without their words: a session keeps counting its turns.
    kept = store.turns(MAYA, "s1") + store.turns(MAYA, "s2")
    assert len(kept) == 6 and {(t.text, t.speaker) for t in kept} == {("", None)}
    assert store.next_turn_index(MAYA, "s2") == store.next_turn_index(EVE, "s2") > 0
    # Decisions keep their skeleton: same ids and dispositions, no gap queries.
    after = AuditLog(store).decision_rows(tenant="acme", principal="maya")
    assert [(d["id"], d["disposition"]) for d in after] == [
        (d["id"], d["disposition"]) for d in decisions_before
    ]
    assert all(d["gaps"] in ([], "[]") for d in after)
    [event] = store.events(MAYA, type="principal.erased")
    assert event.data["counts"] == counts
    assert len(store.events(MAYA, type="record.deleted")) == counts["records"]
    # Erasing again finds nothing left to erase.
    again = erase_principal(store, MAYA)
    assert again.total == 0 and set(again.counts) == set(counts)


def test_erasure_removes_the_principals_vector_index(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cells' centroids (means of the principal's vectors) go with the vectors, and no
    cache, this process's or another's, serves a cell read before the erasure."""
    store = any_store
    monkeypatch.setattr(vectors, "DEFAULT_PROBE", 8)  # an index from 16 vectors on
    ids: dict[Principal, list[str]] = {}
    for who, word in WORDS.items():
        ids[who] = [store.add(who, RecordDraft(text=f"{word} {i}")).id for i in range(40)]
        vecs = clustered(40)
        for at in range(0, 40, 10):
            vectors.write_vectors(store, who, "m1", ids[who][at : at + 10], vecs[at : at + 10])
    other = vectors._StoreCache()  # another process's cache, warm before the erasure
    monkeypatch.setitem(store._shared, vectors._CACHE_KEY, other)  # type: ignore[attr-defined]
    for who in WORDS:
        assert vectors.dense_search(store, who, "m1", clustered(40)[5], 3)[0][0] == ids[who][5]
    mine = vectors._StoreCache()
    monkeypatch.setitem(store._shared, vectors._CACHE_KEY, mine)  # type: ignore[attr-defined]
    for who in WORDS:
        vectors.dense_search(store, who, "m1", clustered(40)[5], 3)
    cells_sql = (
        "SELECT cell, centroid, size FROM vector_cells WHERE tenant = ? AND principal = ? "
        "ORDER BY cell"
    )
    maya_cells = store.query(cells_sql, ["acme", "maya"])
    eve_cells = store.query(cells_sql, ["acme", "eve"])
    assert maya_cells and eve_cells

    erasure = erase_principal(store, MAYA)

    assert erasure.counts["vector_cells"] == len(maya_cells)
    assert store.query(cells_sql, ["acme", "maya"]) == []
    assert store.query(cells_sql, ["acme", "eve"]) == eve_cells
    assert vectors.vector_counts(store, MAYA) == {}
    # This process dropped the scope's cells at once; the other's were not touched yet.
    assert not any(k[1] == "maya" for k in [*mine.states, *mine.blocks])
    assert any(k[1] == "eve" for k in mine.blocks)
    assert any(k[1] == "maya" for k in other.blocks)
    # A new vector of the principal is found alone, through either cache.
    new = store.add(MAYA, RecordDraft(text="a new note")).id
    vectors.write_vectors(store, MAYA, "m1", [new], [clustered(40)[5]])
    for cache in (other, mine):
        monkeypatch.setitem(store._shared, vectors._CACHE_KEY, cache)  # type: ignore[attr-defined]
        assert [r for r, _ in vectors.dense_search(store, MAYA, "m1", clustered(40)[5], 5)] == [new]
    assert not any(k[1] == "maya" and k[3] is not None for k in other.blocks)
    assert vectors.dense_search(store, EVE, "m1", clustered(40)[5], 1)[0][0] == ids[EVE][5]
    again = erase_principal(store, MAYA)
    assert again.counts["vector_cells"] == 0 and again.counts["vector_indexes"] == 0


@pytest.mark.anyio
async def test_a_turn_in_flight_during_the_erasure_keeps_only_its_skeleton(
    any_store: Store, clock: FixedClock
) -> None:
    """A chat turn that began before the erasure and ends after it writes its decision
    (one per turn) without its gap queries or search text, and its transcript rows without
    their words; the next turn is recorded as usual."""
    store = any_store
    await _converse(store, clock)
    eve_before = _where(store, WORDS[EVE])
    retriever = _ErasingRetriever(store, clock, MAYA)
    gaps = ScriptedGapPolicy([("relationship_or_event", f"dentist Dr. {WORDS[MAYA]}")])
    chat = make_chat(store, gap_policy=gaps, retriever=retriever)
    reply = await chat.turn(MAYA, "s3", f"While in flight: is Dr. {WORDS[MAYA]} my dentist?")
    AuditLog(store).flush()

    assert reply.decision is not None
    assert retriever.erasures
    assert _where(store, WORDS[MAYA]) == set()
    assert _where(store, WORDS[EVE]) == eve_before
    [row] = [
        d
        for d in AuditLog(store).decision_rows(tenant="acme", principal="maya")
        if d["id"] == reply.decision.decision_id
    ]
    assert row["gaps"] in ([], "[]") and row["gap_count"] == 1
    [search] = AuditLog(store).search_rows(row["id"])
    assert search["query"] == "" and search["context"] is None
    blank = store.turns(MAYA, "s3")
    assert [(t.turn_index, t.role.value, t.text, t.speaker) for t in blank] == [
        (0, "user", "", None),
        (1, "assistant", "", None),
    ]
    clock.advance(seconds=1)
    await chat.turn(MAYA, "s4", "Hello again")
    after = store.turns(MAYA, "s4")
    assert [(t.role.value, t.text) for t in after[:1]] == [("user", "Hello again")]


@pytest.mark.anyio
async def test_a_session_that_continues_after_the_erasure_counts_on_and_extracts_only_new_words(
    any_store: Store, clock: FixedClock
) -> None:
    """The open session s2 goes on after the erasure: its next turn is numbered after the
    erased ones (whose decision skeletons keep their indexes), and its session end hands
    the extractor the new turns only, not the rows the erasure left without words."""
    store = any_store
    await _converse(store, clock)
    skeleton = {
        d["turn_index"]
        for d in AuditLog(store).decision_rows(tenant="acme", principal="maya")
        if d["session_id"] == "s2"
    }
    erase_principal(store, MAYA)
    clock.advance(seconds=1)

    seen: list[list[int]] = []

    class Recording(OfflineExtractor):
        def extract(self, turns: Any, *, user: str | None, **kw: Any) -> Any:
            seen.append([t.turn_index for t in turns])
            return super().extract(turns, user=user, **kw)

    chat = make_chat(store, extractor=Recording())
    reply = await chat.turn(MAYA, "s2", "My dentist is Dr. Ana Ribeiro in Faro.")
    assert reply.turn_index > max(skeleton)
    result = await chat.end_session(MAYA, "s2")

    assert result is not None and result.failure is None and result.written
    assert seen == [[reply.turn_index, reply.turn_index + 1]]
    assert {r.id for r in store.list_records(MAYA)} == set(result.written)
    assert _where(store, WORDS[MAYA]) == set()
    # A session whose every turn is blank is passed over without calling the extractor.
    again = await chat.end_session(MAYA, "s1")
    assert again is not None and again.turns_seen == 0 and seen == seen[:1]


@pytest.mark.anyio
@pytest.mark.parametrize("outcome", ["records", "failure"])
async def test_a_session_end_in_flight_during_the_erasure_writes_nothing(
    any_store: Store, clock: FixedClock, outcome: str
) -> None:
    """An extraction that read the principal's turns before the erasure and ends after it
    (with records, or failing with their words in its error) writes no record, no progress
    and no failure; the principal's next session is extracted as usual."""
    store = any_store
    await _converse(store, clock)
    eve_before = _where(store, WORDS[EVE])
    word = "Xochiquetzal"
    await make_chat(store).turn(MAYA, "s3", f"My new dentist is Dr. {word} in Braga.")

    class ErasingExtractor(OfflineExtractor):
        """Reads the turns, then the operator erases the principal before it answers."""

        def extract(self, turns: Any, *, user: str | None, **kw: Any) -> Any:
            found = super().extract(turns, user=user, **kw)
            assert any(word in r.text for r in found)
            clock.advance(seconds=1)
            erase_principal(store, MAYA)
            if outcome == "failure":
                raise RuntimeError(f"could not file Dr. {word}")
            return found

    activation = ActivationPolicy(store, OfflineActivationClassifier())
    chat = make_chat(store, extractor=ErasingExtractor(), activation=activation)
    result = await chat.end_session(MAYA, "s3")

    assert result is not None and result.written == ()
    assert result.failure == ("erased" if outcome == "records" else "exception")
    assert _where(store, word) == set() and _where(store, WORDS[MAYA]) == set()
    assert _where(store, WORDS[EVE]) == eve_before
    scoped = ["acme", "maya"]
    for table in ("extraction_progress", "extraction_failures"):
        sql = f"SELECT COUNT(*) AS n FROM {table} WHERE tenant = ? AND principal = ?"
        assert store.query(sql, scoped)[0]["n"] == 0, table
    assert store.list_records(MAYA) == []
    clock.advance(seconds=1)
    await chat.turn(MAYA, "s4", "My dentist is Dr. Ana Ribeiro in Faro.")
    after = await make_chat(store, extractor=OfflineExtractor()).end_session(MAYA, "s4")
    assert after is not None and after.failure is None and after.written


@pytest.mark.anyio
async def test_a_search_in_flight_during_the_erasure_is_logged_without_its_words(
    any_store: Store, clock: FixedClock
) -> None:
    """A tool-mode turn whose memory search began before the erasure logs the search
    without its query and its transcript rows without their words; the next turn is
    recorded as usual."""
    store = any_store
    await _converse(store, clock)
    eve_before = _where(store, WORDS[EVE])
    retriever = _ErasingRetriever(store, clock, MAYA)
    chat = make_chat(store, memory_mode="tool_only", trigger_mode="auto", retriever=retriever)
    reply = await chat.turn(MAYA, "s3", f"In flight: is Dr. {WORDS[MAYA]} my dentist?")

    assert retriever.erasures and reply.searches
    assert _where(store, WORDS[MAYA]) == set()
    assert _where(store, WORDS[EVE]) == eve_before
    rows = store.query(
        "SELECT query, context FROM search_log WHERE tenant = ? AND principal = ? "
        "AND origin = 'host_auto'",
        ["acme", "maya"],
    )
    assert rows == [{"query": "", "context": None}]
    assert [(t.role.value, t.text) for t in store.turns(MAYA, "s3")] == [
        ("user", ""),
        ("assistant", ""),
    ]
    clock.advance(seconds=1)
    await chat.turn(MAYA, "s4", "Hello again")
    assert [t.text for t in store.turns(MAYA, "s4")][:1] == ["Hello again"]
    logged = store.query(
        "SELECT query FROM search_log WHERE tenant = ? AND principal = ? AND query != ''",
        ["acme", "maya"],
    )
    assert logged == [{"query": "Hello again"}]


@pytest.mark.anyio
async def test_a_profile_assembled_before_the_erasure_is_not_stored(
    any_store: Store, clock: FixedClock
) -> None:
    """A session profile assembled from records the erasure then deletes is assembled
    again, from what is left, and only that is stored."""
    store = any_store
    await _converse(store, clock)
    assert ProfileAssembler(store).build(MAYA).record_ids  # the profile holds something
    erasures = []

    class ErasingAssembler(ProfileAssembler):
        def build(self, principal: Principal) -> ProfileBlock:
            block = super().build(principal)
            if not erasures:
                clock.advance(seconds=1)
                erasures.append(erase_principal(store, principal))
            return block

    block = ErasingAssembler(store).for_session(MAYA, "s9")

    assert erasures and block.record_ids == () and "concisely" not in block.text
    [row] = store.query("SELECT text, record_ids FROM profile_snapshots WHERE principal = 'maya'")
    assert row["record_ids"] == "[]" and "concisely" not in row["text"]
    assert ProfileAssembler(store).for_session(EVE, "s9").record_ids


@pytest.mark.anyio
async def test_after_erasure_and_vacuum_the_files_hold_no_byte_of_the_words(
    tmp_path: Path, clock: FixedClock
) -> None:
    """SQLite: after erase and vacuum, neither the file nor its WAL contains the words."""
    path = tmp_path / "erase.db"
    store = SQLiteStore(path, clock=clock, id_factory=counter_ids())
    await _converse(store, clock)
    store.vacuum()
    word = WORDS[MAYA].encode()
    assert word in _file_bytes(path)
    erase_principal(store, MAYA)
    assert word in _file_bytes(path)  # still in free pages, FTS5 segments or the WAL
    store.vacuum()
    data = _file_bytes(path)
    assert word not in data and word.lower() not in data
    assert WORDS[EVE].encode() in data
    store.check_integrity()
    store.close()


@pytest.mark.anyio
@pytest.mark.skipif(POSTGRES_URL is None, reason="RETOLD_TEST_POSTGRES_URL is not set")
async def test_after_erasure_and_vacuum_no_postgresql_table_file_holds_the_words(
    clock: FixedClock,
) -> None:
    """PostgreSQL: after erase and vacuum, no table, index or TOAST file of the schema
    holds the words (the erasure's deletes and updates leave dead row versions in every
    component's tables, not only the records')."""
    with fresh_pg_schema() as schema:
        assert POSTGRES_URL is not None
        store = PostgresStore(POSTGRES_URL, schema=schema, clock=clock, id_factory=counter_ids())
        await _converse(store, clock)
        word = WORDS[MAYA].encode()
        erase_principal(store, MAYA)
        store.vacuum()
        files = postgres_table_files(store)
        held = {n for n, paths in files.items() for p in paths if word in p.read_bytes()}
        assert held == set()
        assert any(WORDS[EVE].encode() in p.read_bytes() for ps in files.values() for p in ps)
        store.close()


@pytest.mark.anyio
async def test_a_failed_erasure_erases_nothing(tmp_path: Path, clock: FixedClock) -> None:
    """A failure inside the erasing transaction rolls every table back."""
    armed = False

    def on_step(step: str) -> None:
        if armed and step == "erased":
            raise RuntimeError("disk gone")

    path = tmp_path / "fail.db"
    store = SQLiteStore(path, clock=clock, id_factory=counter_ids(), on_write_step=on_step)
    await _converse(store, clock)
    before = _where(store, WORDS[MAYA])
    live = [r.id for r in store.list_records(MAYA)]
    armed = True
    with pytest.raises((RuntimeError, StoreError)):
        erase_principal(store, MAYA)
    assert _where(store, WORDS[MAYA]) == before
    assert [r.id for r in store.list_records(MAYA)] == live
    assert store.events(MAYA, type="principal.erased") == []
    store.close()


def test_memory_erase_needs_yes_and_reports_counts(
    tmp_path: Path, clock: FixedClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """`retold memory erase` refuses without --yes (exit 2, nothing erased), then erases."""
    db = tmp_path / "cli.db"
    scope = ["--tenant", "acme", "--principal", "maya"]
    with SQLiteStore(db, clock=clock) as store:
        store.add(MAYA, RecordDraft(text=f"My dentist is Dr. {WORDS[MAYA]}."))
        store.add(EVE, RecordDraft(text=f"My dentist is Dr. {WORDS[EVE]}."))
    assert main(["memory", "erase", "--db", str(db), *scope]) == 2
    _, err = capsys.readouterr()
    assert "--yes" in err
    with SQLiteStore(db) as store:
        assert _where(store, WORDS[MAYA]) == {"records.text"}
    assert main(["memory", "erase", "--db", str(db), *scope, "--yes", "--json"]) == 0
    out, _ = capsys.readouterr()
    report = json.loads(out)
    assert report["tenant"] == "acme" and report["principal"] == "maya"
    assert report["counts"]["records"] == 1
    with SQLiteStore(db) as store:
        assert _where(store, WORDS[MAYA]) == set()
        assert _where(store, WORDS[EVE]) == {"records.text"}
    assert main(["memory", "erase", "--db", str(db), *scope, "--yes"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("erased acme/maya: records 0,") and "memory vacuum" in out
    # A missing database is an error, not a new empty file.
    assert main(["memory", "erase", "--db", str(tmp_path / "none.db"), *scope, "--yes"]) == 2
    assert not (tmp_path / "none.db").exists()


@pytest.mark.anyio
async def test_erasure_empties_the_caches_keyed_by_peoples_words(any_store: Store) -> None:
    """The redactor's clean strings and the local bundle's cached embeddings hold texts as
    keys; an erasure cannot tell whose, so it empties them (the next use computes again)."""
    from retold.policy.local import CachedEmbedder
    from retold.testing import HashingEmbedder

    words = f"My dentist is Dr. {WORDS[MAYA]}."
    redactor = any_store.redactor.for_tenant(MAYA.tenant)
    assert redactor.redact(words) == words
    embedder = CachedEmbedder(HashingEmbedder())
    vector = (await embedder.embed([words]))[0]
    assert words in redactor._clean and words in embedder._cache

    erase_principal(any_store, MAYA)

    assert words not in redactor._clean and words not in embedder._cache
    assert redactor.redact(words) == words and (await embedder.embed([words]))[0] == vector
