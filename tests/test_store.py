"""The store conformance suite, run on SQLiteStore and (with a test cluster) PostgresStore.

Supersession, deletion, idempotency, activation refusal, append-only events, atomicity and
schema versioning.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold import (
    Activation,
    AsyncStore,
    InvalidInputError,
    LifecycleState,
    Principal,
    RecordDraft,
    Role,
    SQLiteStore,
    Store,
    StoreIntegrityError,
    TranscriptTurn,
    UsageError,
    WriteOrigin,
)
from retold import _store as store_module
from retold._retrieval_sql import retrieval_sql

from .conftest import STORE_KINDS, FixedClock, counter_ids, fresh_pg_schema, make_store


@pytest.fixture
def store(any_store: Store) -> Store:
    """Every test here runs on each configured store."""
    return any_store


def _dump(store: Store, path: Path) -> list[str]:
    """Every stored row: SQLite's full dump, or PostgreSQL's tables in a stable order."""
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(path)
        try:
            return [line for line in conn.iterdump() if "sqlite_sequence" not in line]
        finally:
            conn.close()
    rows: list[str] = []
    for table, order in (
        ("records", "id"),
        ("events", "id"),
        ("transcript_turns", "session_id, turn_index"),
        ("retold_schema", "component"),
    ):
        rows += [
            repr(sorted(r.items())) for r in store.query(f"SELECT * FROM {table} ORDER BY {order}")
        ]
    return rows


@pytest.fixture(params=STORE_KINDS)
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, str | None]]:
    """(kind, schema) for tests that open and reopen a store themselves."""
    kind = str(request.param)
    if kind == "sqlite":
        yield kind, None
        return
    with fresh_pg_schema() as schema:
        yield kind, schema


def test_supersession_closes_old_record_in_same_write(store: Store, alice: Principal) -> None:
    """Writing a superseding record closes the old one and logs both events."""
    old = store.add(alice, RecordDraft(text="I live in Paris"))
    new = store.add(alice, RecordDraft(text="I live in Lisbon", supersedes=old.id))
    closed = store.get(alice, old.id)
    assert closed is not None
    assert closed.lifecycle is LifecycleState.SUPERSEDED and closed.superseded_by == new.id
    assert [r.id for r, _ in store.search(alice, "live")] == [new.id]
    types = [e.type for e in store.events(alice, record_id=old.id)]
    assert types == ["record.created", "record.superseded"]


def test_superseding_twice_is_refused(store: Store, alice: Principal) -> None:
    """A record that is already superseded cannot be superseded again."""
    old = store.add(alice, RecordDraft(text="v1"))
    store.add(alice, RecordDraft(text="v2", supersedes=old.id))
    with pytest.raises(InvalidInputError) as err:
        store.add(alice, RecordDraft(text="v3", supersedes=old.id))
    assert err.value.field == "supersedes"


def test_delete_erases_text_keeps_row_and_event(store: Store, alice: Principal) -> None:
    """Deletion is a lifecycle transition that erases the text and unindexes it."""
    rec = store.add(
        alice,
        RecordDraft(
            text="secret garden location",
            speaker="alice",
            tags=("garden",),
            idempotency_key="note:garden",
        ),
    )
    deleted = store.delete(alice, rec.id)
    assert deleted.lifecycle is LifecycleState.DELETED and deleted.text == ""
    assert (deleted.speaker, deleted.tags, deleted.idempotency_key) == (None, (), None)
    assert store.search(alice, "garden") == []
    assert store.list_records(alice) == []
    assert [e.type for e in store.events(alice, record_id=rec.id)][-1] == "record.deleted"


def test_expired_records_leave_search_and_listing(
    store: Store, alice: Principal, clock: FixedClock
) -> None:
    """A record past its expiry is not searched or listed by default."""
    store.add(alice, RecordDraft(text="parking spot 42", expires_at=clock() + timedelta(hours=1)))
    assert store.search(alice, "parking")
    clock.advance(hours=2)
    assert store.search(alice, "parking") == []
    assert store.list_records(alice) == []
    assert len(store.list_records(alice, include_expired=True)) == 1


def test_idempotency_key_writes_once(store: Store, alice: Principal) -> None:
    """A second write with the same idempotency key returns the stored record, writes nothing."""
    a = store.add(alice, RecordDraft(text="fact one", idempotency_key="s1:3:0"))
    b = store.add(alice, RecordDraft(text="fact one again", idempotency_key="s1:3:0"))
    assert a == b
    assert len(store.list_records(alice)) == 1


def test_deleting_a_record_releases_its_idempotency_key(store: Store, alice: Principal) -> None:
    """After a delete, an add with the deleted record's key writes a new, live record."""
    first = store.add(alice, RecordDraft(text="prefers tea", idempotency_key="pref:drink"))
    store.delete(alice, first.id)
    again = store.add(alice, RecordDraft(text="prefers coffee", idempotency_key="pref:drink"))
    assert again.id != first.id and again.lifecycle is LifecycleState.ACTIVE
    assert [r.text for r in store.list_records(alice)] == ["prefers coffee"]
    retried = store.add(alice, RecordDraft(text="prefers coffee", idempotency_key="pref:drink"))
    assert retried == again


def test_conflict_links_are_symmetric(store: Store, alice: Principal) -> None:
    """A record written as conflicting with another links both ways."""
    a = store.add(alice, RecordDraft(text="meeting is Monday"))
    b = store.add(alice, RecordDraft(text="meeting is Tuesday", conflicts_with=(a.id,)))
    a2 = store.get(alice, a.id)
    assert a2 is not None and a2.conflicts_with == (b.id,)
    assert b.conflicts_with == (a.id,)


@pytest.mark.parametrize("origin", [WriteOrigin.EXTRACTION, WriteOrigin.TOOL_CALL])
def test_untrusted_writes_cannot_set_ambient(
    store: Store, alice: Principal, origin: WriteOrigin
) -> None:
    """Extraction and tool-call writes asking for ambient activation are refused and audited."""
    with pytest.raises(InvalidInputError) as err:
        store.add(
            alice, RecordDraft(text="answer tersely", activation=Activation.AMBIENT), origin=origin
        )
    assert err.value.field == "activation"
    assert store.list_records(alice) == []
    [event] = store.events(alice, type="record.activation_refused")
    assert event.data["origin"] == origin.value


def test_only_policy_or_reviewer_may_promote(store: Store, alice: Principal) -> None:
    """set_activation refuses ambient from any origin but the activation policy or a reviewer."""
    rec = store.add(alice, RecordDraft(text="reply in Hindi", kind="preference"))
    with pytest.raises(UsageError):
        store.set_activation(alice, rec.id, Activation.AMBIENT, actor="x", origin=WriteOrigin.HOST)
    promoted = store.set_activation(
        alice, rec.id, Activation.AMBIENT, actor="reviewer:kim", origin=WriteOrigin.REVIEWER
    )
    assert promoted.activation is Activation.AMBIENT
    assert store.events(alice, type="record.activation_changed")[0].data["to"] == "ambient"


def test_events_are_append_only(store: Store, alice: Principal) -> None:
    """The events table refuses updates and deletes."""
    store.add(alice, RecordDraft(text="x y z"))
    for sql in ("UPDATE events SET type = 'x'", "DELETE FROM events"):
        with pytest.raises(StoreIntegrityError), store.write() as w:
            w.execute(sql)
    assert [e.type for e in store.events(alice)] == ["record.created"]


def test_turn_index_written_once(store: Store, alice: Principal, clock: FixedClock) -> None:
    """A transcript turn index is stored once per session; a duplicate is a named error."""
    turn = TranscriptTurn(session_id="s1", turn_index=0, role=Role.USER, text="hi", time=clock())
    store.add_turn(alice, turn)
    with pytest.raises(InvalidInputError) as err:
        store.add_turn(alice, turn)
    assert err.value.field == "turn_index"
    assert store.turns(alice, "s1") == [turn]


def test_the_newest_turns_of_a_session(store: Store, alice: Principal, clock: FixedClock) -> None:
    """turns(..., last=N) is the session's newest N turns, oldest first; this session's only."""
    for i in range(7):
        for session in ("s1", "s2"):
            role = Role.USER if i % 2 == 0 else Role.ASSISTANT
            turn = TranscriptTurn(
                session_id=session, turn_index=i, role=role, text=f"{session}-{i}", time=clock()
            )
            store.add_turn(alice, turn)
    assert [t.text for t in store.turns(alice, "s1", last=3)] == ["s1-4", "s1-5", "s1-6"]
    assert store.turns(alice, "s1", last=0) == []
    assert store.turns(alice, "s1", last=50) == store.turns(alice, "s1")
    assert store.turns(alice, "nothing-here", last=2) == []
    for bad in (-1, True, 2.0):
        with pytest.raises(InvalidInputError) as err:
            store.turns(alice, "s1", last=bad)  # type: ignore[arg-type]
        assert err.value.field == "last"


@pytest.mark.parametrize("step", ["record_inserted", "fts_indexed", "superseded", "before_commit"])
def test_failed_write_leaves_database_unchanged(
    tmp_path: Path,
    clock: FixedClock,
    alice: Principal,
    step: str,
    store_factory: tuple[str, str | None],
) -> None:
    """A write that fails midway leaves every stored row as before (SQLite: every byte)."""
    kind, schema = store_factory
    path = tmp_path / "retold.db"
    failing: set[str] = set()

    def seam(name: str) -> None:
        if name in failing:
            raise RuntimeError(f"injected failure at {name}")

    store = make_store(
        kind, tmp_path, schema, clock=clock, id_factory=counter_ids(), on_write_step=seam
    )
    old = store.add(alice, RecordDraft(text="original fact about tea"))
    before = _dump(store, path)
    failing.add(step)
    with pytest.raises(RuntimeError):
        store.add(alice, RecordDraft(text="new fact about coffee", supersedes=old.id))
    assert _dump(store, path) == before
    if isinstance(store, SQLiteStore):
        assert store.query("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    assert store.search(alice, "coffee") == []
    failing.clear()
    store.add(alice, RecordDraft(text="new fact about coffee", supersedes=old.id))
    assert store.search(alice, "coffee")
    store.close()


def test_schema_is_versioned_and_reopens(
    tmp_path: Path, store_factory: tuple[str, str | None]
) -> None:
    """Reopening a store applies no migration twice and keeps the redaction key."""
    kind, schema = store_factory
    a = make_store(kind, tmp_path, schema)
    key_id = a.redactor.secret_id("x", "y")
    a.close()
    b = make_store(kind, tmp_path, schema)
    assert b.schema_version("core") == (3 if kind == "sqlite" else 4)
    assert b.redactor.secret_id("x", "y") == key_id
    b.ensure_schema("ext", ["CREATE TABLE ext_a (x int)", "CREATE TABLE ext_b (y int)"])
    b.ensure_schema("ext", ["CREATE TABLE ext_a (x int)", "CREATE TABLE ext_b (y int)"])
    assert b.schema_version("ext") == 2
    b.close()


def _files_holding(path: Path, needle: bytes) -> list[str]:
    """The names of the database's files (main, -wal, -shm) whose bytes hold ``needle``."""
    return sorted(f.name for f in path.parent.glob(path.name + "*") if needle in f.read_bytes())


def test_vacuum_leaves_no_copy_of_erased_text_in_the_files(tmp_path: Path) -> None:
    """A deleted record's words stay in FTS5's index segments and the WAL until vacuum()
    merges the index and empties the WAL; the store then reads and checks as before."""
    path = tmp_path / "erase.db"
    marker = b"zqvaultword"
    alice = Principal(tenant="acme", principal="alice")
    store = SQLiteStore(path)
    try:
        for k in range(40):
            store.add(alice, RecordDraft(text=f"garden note {k} about tomatoes"))
        rec = store.add(alice, RecordDraft(text=f"the vault code word is {marker.decode()}"))
        for k in range(40):
            store.add(alice, RecordDraft(text=f"kitchen note {k} about bread"))
        store.delete(alice, rec.id)
        assert store.search(alice, marker.decode()) == []
        assert [r.text for r, _ in store.search(alice, "tomatoes", limit=1)]
        # Before: the erased words are still in the files (what this test guards against).
        assert _files_holding(path, marker)
        store.vacuum()
        assert _files_holding(path, marker) == []
        assert (tmp_path / "erase.db-wal").stat().st_size == 0
        assert store.check_integrity() == []
        assert len(store.search(alice, "bread", limit=50)) == 40
        store.vacuum()  # idempotent
        assert store.check_integrity() == []
    finally:
        store.close()


@pytest.mark.anyio
async def test_vacuum_runs_on_every_store_and_keeps_the_records(
    store: Store, alice: Principal
) -> None:
    """vacuum() is part of the Store protocol (PostgreSQL: VACUUM FULL; its files are checked in
    test_store_postgres); the async store runs it in a worker thread. Live records survive."""
    kept = store.add(alice, RecordDraft(text="the garden gate is green"))
    gone = store.add(alice, RecordDraft(text="the garden shed code is 4471"))
    store.delete(alice, gone.id)
    await AsyncStore(store).vacuum()
    assert [r.id for r, _ in store.search(alice, "garden")] == [kept.id]
    erased = store.get(alice, gone.id)
    assert erased is not None and erased.text == ""


def test_wal_and_busy_timeout_are_set(tmp_path: Path) -> None:
    """The SQLite store runs in WAL mode with a busy timeout."""
    store = SQLiteStore(tmp_path / "wal.db")
    assert store.query("PRAGMA journal_mode")[0]["journal_mode"] == "wal"
    assert store.query("PRAGMA busy_timeout")[0]["timeout"] >= 1000
    store.close()


def test_pooled_reads_go_through_a_memory_map_unless_told_not_to(tmp_path: Path) -> None:
    """The pooled read connections map mmap_bytes of the file; the event loop's no-wait
    reads and the writer never map (a remap as the file grows stalls the process's
    threads); 0 turns the map off, and a negative size is refused."""
    store = SQLiteStore(tmp_path / "map.db")
    assert store.query("PRAGMA mmap_size")[0]["mmap_size"] == 1 << 30
    assert store.query_inline("PRAGMA mmap_size", within_s=5.0) == [{"mmap_size": 0}]
    with store.write() as w:
        assert w.query("PRAGMA mmap_size")[0]["mmap_size"] == 0
    store.close()
    off = SQLiteStore(tmp_path / "map.db", mmap_bytes=0)
    assert off.query("PRAGMA mmap_size")[0]["mmap_size"] == 0
    off.close()
    with pytest.raises(UsageError, match="mmap_bytes"):
        SQLiteStore(tmp_path / "map.db", mmap_bytes=-1)


@pytest.mark.anyio
async def test_async_store_round_trip(store: Store, alice: Principal) -> None:
    """The async facade writes, searches and deletes through worker threads."""
    a = AsyncStore(store)
    rec = await a.add(alice, RecordDraft(text="async tea ceremony"))
    hits = await a.search(alice, "tea")
    assert [r.id for r, _ in hits] == [rec.id]
    await a.delete(alice, rec.id)
    assert await a.search(alice, "tea") == []
    for i in range(3):
        await a.add_turn(
            alice,
            TranscriptTurn(
                session_id="s", turn_index=i, role=Role.USER, text=f"t{i}", time=store.clock()
            ),
        )
    assert [t.text for t in await a.turns(alice, "s", last=2)] == ["t1", "t2"]


def test_transition_to_superseded_names_its_successor(store: Store, alice: Principal) -> None:
    """Superseding by transition needs a successor in scope and records it on the row and event."""
    old = store.add(alice, RecordDraft(text="reply in Hindi from now on"))
    new = store.add(alice, RecordDraft(text="drop the Hindi thing"))
    with pytest.raises(InvalidInputError) as err:
        store.transition(alice, old.id, LifecycleState.SUPERSEDED, actor="test")
    assert err.value.field == "superseded_by"
    with pytest.raises(InvalidInputError):
        store.transition(
            alice, old.id, LifecycleState.SUPERSEDED, actor="test", superseded_by="nope"
        )
    closed = store.transition(
        alice, old.id, LifecycleState.SUPERSEDED, actor="test", superseded_by=new.id
    )
    assert closed.superseded_by == new.id
    assert store.events(alice, type="record.superseded")[-1].data["superseded_by"] == new.id


@pytest.mark.anyio
async def test_delete_erases_text_index_entities_and_vectors_in_one_write(
    tmp_path: Path, clock: FixedClock, alice: Principal, store_factory: tuple[str, str | None]
) -> None:
    """Deletion by another store object (no retriever) purges the lexical entry, the entity
    names and every vector in the deleting transaction: a delete that fails midway purges
    nothing, one that commits leaves no trace of the text anywhere a search reads."""
    from retold import HybridRetriever, RetrievalConfig

    from .test_retrieval import HashEmbedder

    kind, schema = store_factory
    store = make_store(kind, tmp_path, schema, clock=clock)
    target = store.add(alice, RecordDraft(text="Sourdough starter feeding schedule from Lisbon"))
    store.add(alice, RecordDraft(text="quarterly tax paperwork"))
    cfg = RetrievalConfig(session_window=0)
    retriever = HybridRetriever(store, config=cfg, embedder=HashEmbedder())
    found = (await retriever.search(alice, "sourdough starter Lisbon")).candidates
    assert found[0].record.id == target.id
    assert {"lexical", "dense", "entity"} <= set(found[0].paths)

    def derived() -> list[int]:
        return [
            int(
                store.query(f"SELECT COUNT(*) AS n FROM {t} WHERE record_id = ?", [target.id])[0][
                    "n"
                ]
            )
            for t in ("vectors", "retrieval_entities")
        ]

    assert all(n > 0 for n in derived())

    def fail(step: str) -> None:
        if step == "deleted":
            raise RuntimeError("killed after the erasing UPDATE")

    other = make_store(kind, tmp_path, schema, on_write_step=fail)
    with pytest.raises(RuntimeError):
        other.delete(alice, target.id)
    assert all(n > 0 for n in derived())  # rolled back together
    other.close()
    other = make_store(kind, tmp_path, schema)
    other.delete(alice, target.id)
    other.close()
    assert derived() == [0, 0]
    assert store.search(alice, "sourdough") == []
    got = (await retriever.search(alice, "sourdough starter Lisbon")).candidates
    assert target.id not in {c.record.id for c in got}
    assert store.get(alice, target.id).text == ""  # type: ignore[union-attr]
    store.close()


def test_driver_errors_surface_as_store_errors(store: Store, alice: Principal) -> None:
    """A read or write the database refuses raises StoreError on every store (the driver's
    error as its cause), so callers need not know which database they talk to."""
    from retold import StoreError

    with pytest.raises(StoreError) as err:
        store.query("SELECT * FROM no_such_table")
    assert err.value.__cause__ is not None
    with pytest.raises(StoreError), store.write() as w:
        w.execute("INSERT INTO no_such_table VALUES (1)")
    with pytest.raises(StoreIntegrityError, match="IntegrityError"), store.write() as w:
        w.execute(
            "INSERT INTO transcript_turns (tenant, principal, session_id, turn_index, role, "
            "text, time) VALUES ('acme', 'alice', 's', 0, 'user', 'x', 't'), "
            "('acme', 'alice', 's', 0, 'user', 'y', 't')"
        )
    assert store.turns(alice, "s") == []


def test_sqlite_triggers_and_types_are_spelled_for_postgres() -> None:
    """adapt_ddl: a component's SQLite row trigger becomes a PL/pgSQL trigger (DROP TRIGGER
    finds its table), TEXT sorts bytewise, INTEGER holds 64 bits, WITHOUT ROWID adds no rowid."""
    from retold._store_postgres import adapt_ddl

    ddl = adapt_ddl(
        "CREATE TABLE t (a TEXT NOT NULL, n INTEGER, PRIMARY KEY (a)) WITHOUT ROWID;\n"
        "CREATE TABLE u (b TEXT);\n"
        "DROP TRIGGER old_one;\n"
        "CREATE TRIGGER purge AFTER UPDATE OF lifecycle ON records\n"
        "WHEN NEW.lifecycle = 'deleted'\n"
        "BEGIN\n    DELETE FROM t WHERE a = NEW.id;\nEND;\n"
    )
    assert 'a TEXT COLLATE "C" NOT NULL, n BIGINT' in ddl and "WITHOUT" not in ddl
    assert "CREATE TABLE t (a" in ddl
    assert "CREATE TABLE u (rowid BIGINT GENERATED ALWAYS AS IDENTITY, " in ddl
    assert "DROP TRIGGER old_one ON %s" in ddl and "current_schema()" in ddl
    assert "CREATE OR REPLACE FUNCTION retold_trigger_purge() RETURNS trigger" in ddl
    assert "DELETE FROM t WHERE a = NEW.id;" in ddl
    assert (
        "CREATE TRIGGER purge AFTER UPDATE OF lifecycle ON records FOR EACH ROW "
        "WHEN (NEW.lifecycle = 'deleted') EXECUTE FUNCTION retold_trigger_purge();"
    ) in ddl


def test_a_read_past_its_deadline_is_cut_short(store: Store) -> None:
    """Under a turn-path Deadline a long read stops at the deadline (DeadlineExceeded) on
    every store, and the connection then serves ordinary reads again."""
    import time

    from retold import DeadlineExceeded
    from retold._deadline import Deadline, bounded_by

    slow = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000000) "
        "SELECT COUNT(*) AS n FROM c"
    )
    started = time.monotonic()
    with bounded_by(Deadline.after(0.2)), pytest.raises(DeadlineExceeded):
        store.query(slow)
    assert time.monotonic() - started < 10
    assert store.query("SELECT 1 AS x") == [{"x": 1}]
    if store.dialect == "postgresql":
        assert {r["statement_timeout"] for r in store.query("SHOW statement_timeout")} == {"30s"}


def test_a_rows_record_is_shared_and_long_texts_are_not_kept(tmp_path: Path) -> None:
    """Reading a row twice gives the same immutable Record; a long one is built afresh."""
    from retold._store import _RECORD_COLUMNS, _SHARED_TEXT_MAX, _row_to_record

    scope = Principal(tenant="t", principal="p")
    with SQLiteStore(tmp_path / "m.db") as store:
        short = store.add(scope, RecordDraft(text="I keep the spare key under the mat."))
        long = store.add(scope, RecordDraft(text="word " * (_SHARED_TEXT_MAX // 5 + 10)))
        rows = {
            r["id"]: r
            for r in store.query(f"SELECT {_RECORD_COLUMNS} FROM records WHERE tenant = 't'")
        }
    assert _row_to_record(rows[short.id]) is _row_to_record(dict(rows[short.id]))
    assert _row_to_record(rows[short.id]) == short
    assert _row_to_record(rows[long.id]) is not _row_to_record(rows[long.id])
    assert _row_to_record(rows[long.id]) == long


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_file_gains_the_scope_index_and_scoped_lexical_index_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """A file written by an older version (core schema 1 or 2) is brought to the current
    one when next opened: the scope's rowid index, the lexical index rebuilt with each
    row's scope token. Its records are kept, searched per scope, and the index checks."""
    path = tmp_path / "old.db"
    # What that version ran: its migrations, and a lexical index of the text alone.
    monkeypatch.setattr(store_module, "_CORE_MIGRATIONS", store_module._CORE_MIGRATIONS[:version])

    def index(self: SQLiteStore, w: Any, record_id: str) -> None:
        w.execute(
            "INSERT INTO records_fts (rowid, text) SELECT rowid, text FROM records WHERE id = ?",
            [record_id],
        )

    def unindex(self: SQLiteStore, w: Any, record_id: str) -> None:
        w.execute(
            "INSERT INTO records_fts (records_fts, rowid, text) "
            "SELECT 'delete', rowid, text FROM records WHERE id = ?",
            [record_id],
        )

    monkeypatch.setattr(SQLiteStore, "_index", index)
    monkeypatch.setattr(SQLiteStore, "_unindex", unindex)
    old = SQLiteStore(path)
    a, b = Principal(tenant="t", principal="a"), Principal(tenant="t", principal="b")
    kept = [old.add(s, RecordDraft(text=f"{s.principal} packs light for trips")) for s in (a, b)]
    deleted = old.add(a, RecordDraft(text="a deleted trip note"))
    old.delete(a, deleted.id)
    assert old.schema_version("core") == version
    old.close()
    monkeypatch.undo()
    reopened = SQLiteStore(path)
    assert reopened.schema_version("core") == len(store_module._CORE_MIGRATIONS)
    names = {r["name"] for r in reopened.query("SELECT name FROM sqlite_master")}
    assert "records_scope_rowid" in names
    assert reopened.check_integrity() == []
    for scope, record, rows in zip(
        (a, b), kept, ([kept[0].id, deleted.id], [kept[1].id]), strict=True
    ):
        assert [r.id for r, _ in reopened.search(scope, "trips")] == [record.id]
        after = retrieval_sql(reopened).records_after(reopened, scope, 0)
        assert [r["id"] for r in after] == rows
    # written after the upgrade: indexed with its scope, found by its owner only
    new = reopened.add(b, RecordDraft(text="b packs a tent for trips"))
    assert {r.id for r, _ in reopened.search(b, "trips")} == {kept[1].id, new.id}
    assert [r.id for r, _ in reopened.search(a, "trips")] == [kept[0].id]
    assert reopened.check_integrity() == []
    reopened.close()


def test_insert_many_redacts_each_row_with_its_tenants_key(store: Store) -> None:
    """A bulk insert passes the same gate as one insert per row: each row's secret is
    replaced with the placeholder its own tenant's key gives (the ids differ by tenant)."""
    secret = "config api_key=" + "Zx9Qw8Er7Ty6Ui5O"
    rows = [
        {
            "tenant": tenant,
            "principal": "p",
            "session_id": "s1",
            "turn_index": 0,
            "role": "user",
            "text": secret,
            "time": "2026-01-01T00:00:00Z",
        }
        for tenant in ("t1", "t2")
    ]
    with store.write() as w:
        w.insert_many("transcript_turns", rows)
    texts = {
        r["tenant"]: r["text"]
        for r in store.query("SELECT tenant, text FROM transcript_turns ORDER BY tenant")
    }
    assert texts == {t: store.redactor.for_tenant(t).redact(secret) for t in ("t1", "t2")}
    assert texts["t1"] != texts["t2"] and "Zx9Qw8Er7Ty6Ui5O" not in str(texts)


def test_both_stores_provide_every_member_of_the_store_protocol(store: Store) -> None:
    """Components call the protocol's members directly (no ``getattr`` fallbacks): a member
    one dialect lacks (``shared`` on PostgreSQL, before 4df929c) is caught here, not by a
    component that quietly degrades."""
    members = {n for n in vars(Store) if not n.startswith("_")} | set(Store.__annotations__)
    assert {"shared", "write", "close", "busy_timeout_ms"} <= members
    missing = sorted(name for name in members if not hasattr(store, name))
    assert missing == [] and isinstance(store, Store)
