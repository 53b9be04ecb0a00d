"""copy_store and ``retold memory copy``: moving a store's memory into another store.

A real chat pipeline fills a SQLite file (two principals of one tenant, a third of another
tenant, a deleted record, an offline label and a recorded fitness result); the copy, into
a new SQLite file and into PostgreSQL, exports the same for every principal, finds the same
records, lets the same bundle serve, and is all or nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import retold._copy as copy_module
import retold._vectors as vectors_module
from retold import (
    HybridRetriever,
    InvalidInputError,
    OfflineExtractor,
    OfflineLabel,
    Principal,
    RecordDraft,
    ReviewQueue,
    SQLiteStore,
    Store,
    StoreError,
    copy_store,
    export_principal,
)
from retold._audit import AuditLog
from retold._serving_gate import recorded_fitness, write_fitness_record
from retold.cli import main
from retold.testing import HashingEmbedder
from retold.testing._loopback import hashed_embedding

from .conftest import STORE_KINDS, FixedClock, counter_ids, fresh_pg_schema, make_store
from .test_chat import make_chat
from .test_erasure import EVE, MAYA, WORDS, _converse
from .test_export import DERIVED

pytestmark = pytest.mark.anyio

BOB = Principal(tenant="globex", principal="bob")
SCOPES = (MAYA, EVE, BOB)


async def _filled(path: Path, clock: FixedClock) -> SQLiteStore:
    """A SQLite store with a row in every table the copy takes (Maya's records have
    vectors)."""
    store = SQLiteStore(path, clock=clock, id_factory=counter_ids())
    await _converse(store, clock)
    deleted = store.add(MAYA, RecordDraft(text="My gym locker is number 41."))
    store.delete(MAYA, deleted.id)
    store.add(BOB, RecordDraft(text="Bob keeps bees in Utrecht.", kind="fact"))

    class FailingExtractor(OfflineExtractor):
        def extract(self, turns: Any, *, user: str | None, **kw: Any) -> Any:
            raise RuntimeError("the extractor is down")

    chat = make_chat(store, extractor=FailingExtractor())
    await chat.turn(BOB, "s1", "I moved my hives to Leiden.")
    failed = await chat.end_session(BOB, "s1")
    assert failed is not None and failed.failure == "exception"
    ReviewQueue(store)  # its table; an item as activation files one for a reviewer
    record = store.list_records(MAYA)[0]
    with store.write() as w:
        w.insert(
            "activation_reviews",
            {
                "id": "rv1",
                "tenant": "acme",
                "principal": "maya",
                "record_id": record.id,
                "reason": "classifier_uncertain",
                "policy_version": "copy-test@1",
                "created_at": "2026-01-01T00:00:00Z",
            },
        )
    audit = AuditLog(store)
    decision = audit.decision_rows(tenant="acme")[0]
    assert audit.add_label(
        OfflineLabel(
            decision_id=decision["id"],
            subset=(record.id,),
            labeler_version="copy-test@1",
            model_family="family-a",
            provenance="copy_test",
            useful=False,
            verdict="unchanged",
        )
    )
    write_fitness_record(
        store,
        bundle="b",
        bundle_sha256="ab" * 32,
        scenario_set_sha256="cd" * 32,
        verdict="pass",
        gates=[],
        category_counts={},
        result_json="{}",
        harness_version="h1",
    )
    await HybridRetriever(store, embedder=HashingEmbedder(16)).prepare(MAYA)  # vectors
    return store


def _exports(store: Store) -> dict[Principal, dict[str, Any]]:
    """Each principal's export without the indexes derived from the records."""
    return {
        scope: export_principal(store, scope).model_dump(mode="json", exclude={"derived"})
        for scope in SCOPES
    }


@pytest.fixture(params=STORE_KINDS)
def destination(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Any:
    if request.param == "sqlite":
        (tmp_path / "to").mkdir()
        store = make_store("sqlite", tmp_path / "to", None, clock=clock)
        yield store
        store.close()
        return
    with fresh_pg_schema() as schema:
        store = make_store("postgresql", tmp_path, schema, clock=clock)
        yield store
        store.close()


async def test_the_copy_exports_finds_and_serves_as_the_source(
    tmp_path: Path, clock: FixedClock, destination: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copy_module, "_BATCH", 2)  # every table is read in several pages
    source = await _filled(tmp_path / "from.db", clock)
    copied = copy_store(source, destination)

    assert copied.tenant is None
    assert copied.counts == {
        t.name: source.query(f"SELECT COUNT(*) AS n FROM {t.name}")[0]["n"]
        for t in copy_module._TABLES
    }
    # Every table had rows to copy (cells need more vectors: the vector test has them).
    assert all(n for t, n in copied.counts.items() if t != "vector_cells"), copied.counts
    assert _exports(destination) == _exports(source)  # every row, event ids included
    for scope, word in WORDS.items():
        # The lexical index holds the copied text (the deleted record's is gone) ...
        assert (
            [r.id for r, _ in destination.search(scope, f"{word} Porto")]
            == [r.id for r, _ in source.search(scope, f"{word} Porto")]
            != []
        )
        assert destination.search(scope, "locker") == []
        # ... and a search rebuilds the name index, which the copy left out.
        found = await HybridRetriever(destination).search(scope, f"Dr. {word}")
        assert word in found.candidates[0].record.text
    assert destination.query("SELECT COUNT(*) AS n FROM retrieval_entities")[0]["n"] > 0
    assert recorded_fitness(destination, "ab" * 32) == recorded_fitness(source, "ab" * 32)
    # And back (from PostgreSQL, when that was the destination) into a third store.
    with SQLiteStore(tmp_path / "back.db", clock=clock) as back:
        copy_store(destination, back)
        assert _exports(back) == _exports(source)
    # The destination writes on as a store of its own.
    assert destination.add(MAYA, RecordDraft(text="A new note.")).text == "A new note."
    source.close()


async def test_a_tenant_copy_takes_that_tenants_rows_only(
    tmp_path: Path, clock: FixedClock, destination: Store
) -> None:
    source = await _filled(tmp_path / "from.db", clock)
    copied = copy_store(source, destination, tenant="acme")

    assert copied.tenant == "acme" and copied.counts["fitness_results"] == 0
    assert {r["tenant"] for r in destination.query("SELECT tenant FROM records")} == {"acme"}
    copied_out, source_out = _exports(destination), _exports(source)
    for scope in (MAYA, EVE):
        # Events are numbered anew, in the same order (the other tenant's left gaps).
        events = [
            [{k: v for k, v in e.items() if k != "id"} for e in out[scope].pop("events")]
            for out in (copied_out, source_out)
        ]
        assert events[0] == events[1] and copied_out[scope] == source_out[scope]
    assert copied_out[BOB]["records"] == []
    # The other tenant can follow into the same store; acme cannot come twice.
    assert copy_store(source, destination, tenant="globex").counts["records"] == 1
    with pytest.raises(InvalidInputError, match=r"destination.*records rows of tenant 'acme'"):
        copy_store(source, destination, tenant="acme")
    source.close()


SECRET = "my wifi password is Zx9Qw8Er7Ty6Ui5O"


def _kept_key(store: Store) -> str | None:
    """The redaction key kept in the database (None: the store was opened with a host's)."""
    rows = store.query("SELECT value FROM retold_meta WHERE key = 'redaction_key'")
    return str(rows[0]["value"]) if rows else None


async def test_a_whole_store_copy_keeps_the_sources_secret_placeholders(
    tmp_path: Path, clock: FixedClock, destination: Store
) -> None:
    """The source's redaction key comes along: the same secret written after the move gets
    the placeholder it had before, and an idempotency key holding it still matches."""
    source = SQLiteStore(tmp_path / "from.db", clock=clock)
    before = source.add(MAYA, RecordDraft(text=SECRET, idempotency_key=f"note {SECRET}"))
    assert "Zx9Qw8Er7Ty6Ui5O" not in before.text
    assert _kept_key(destination) != _kept_key(source)

    copy_store(source, destination)

    assert _kept_key(destination) == _kept_key(source)
    assert destination.add(EVE, RecordDraft(text=SECRET)).text == before.text
    again = destination.add(MAYA, RecordDraft(text=SECRET, idempotency_key=f"note {SECRET}"))
    assert again.id == before.id
    source.close()


async def test_a_tenant_copy_or_a_hosts_key_keeps_the_destinations_key(
    tmp_path: Path, clock: FixedClock
) -> None:
    """A one-tenant copy keeps the destination's key (it may hold other tenants); a store
    opened with a host's key neither gives it away nor takes another."""
    host_key = b"h" * 32
    keyed = SQLiteStore(tmp_path / "keyed.db", clock=clock, redaction_key=host_key)
    plain = SQLiteStore(tmp_path / "plain.db", clock=clock)
    for store in (keyed, plain):
        store.add(MAYA, RecordDraft(text=SECRET))
    into_keyed = SQLiteStore(tmp_path / "into-keyed.db", clock=clock, redaction_key=b"d" * 32)
    stores = {
        "from a host's key": (keyed, SQLiteStore(tmp_path / "a.db", clock=clock), None),
        "into a host's key": (plain, into_keyed, None),
        "one tenant": (plain, SQLiteStore(tmp_path / "b.db", clock=clock), "acme"),
    }
    for why, (source, to, tenant) in stores.items():
        kept = _kept_key(to)
        placeholder = to.redactor.for_tenant("acme").redact(SECRET)
        copy_store(source, to, tenant=tenant)
        assert _kept_key(to) == kept, why
        assert to.add(EVE, RecordDraft(text=SECRET)).text == placeholder, why
        assert host_key.hex() not in json.dumps(to.query("SELECT * FROM retold_meta")), why
        to.close()
    keyed.close()
    plain.close()


async def test_a_copy_into_a_store_with_memory_or_into_itself_writes_nothing(
    tmp_path: Path, clock: FixedClock, destination: Store
) -> None:
    source = await _filled(tmp_path / "from.db", clock)
    with pytest.raises(InvalidInputError, match=r"destination.*source"):
        copy_store(source, source)
    with (
        SQLiteStore(tmp_path / "from.db") as same,
        pytest.raises(InvalidInputError, match=r"destination.*source"),
    ):
        copy_store(source, same)
    destination.add(BOB, RecordDraft(text="Already here."))
    with pytest.raises(InvalidInputError, match=r"destination.*records rows"):
        copy_store(source, destination)
    assert destination.query("SELECT COUNT(*) AS n FROM records")[0]["n"] == 1
    source.close()


async def test_a_copy_that_fails_midway_leaves_the_destination_as_it_was(
    tmp_path: Path, clock: FixedClock, destination: Store, monkeypatch: Any
) -> None:
    source = await _filled(tmp_path / "from.db", clock)
    write = copy_module._write

    def failing(dest: Store, w: Any, table: Any, rows: Any, scopes: Any) -> None:
        if table.name == "search_log":
            raise StoreError("the disk is full")
        write(dest, w, table, rows, scopes)

    monkeypatch.setattr(copy_module, "_write", failing)
    with pytest.raises(StoreError, match="disk is full"):
        copy_store(source, destination)
    for table in ("records", "transcript_turns", "events", "turn_decisions"):
        assert destination.query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] == 0, table
    monkeypatch.setattr(copy_module, "_write", write)
    assert copy_store(source, destination).counts["search_log"] > 0  # then it goes through
    source.close()


async def test_memory_copy_command(
    tmp_path: Path, clock: FixedClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """`retold memory copy` needs --tenant T or --all-tenants and prints the counts (JSON
    with --json); a destination that holds memory, a missing source, a destination that is
    no database and an invalid tenant exit 2, naming the option."""
    (await _filled(tmp_path / "from.db", clock)).close()
    src, dst = str(tmp_path / "from.db"), str(tmp_path / "to.db")
    capsys.readouterr()
    with pytest.raises(SystemExit):  # --tenant T or --all-tenants: one is required
        main(["memory", "copy", "--db", src, "--to", dst])
    capsys.readouterr()
    assert main(["memory", "copy", "--db", src, "--to", dst, "--all-tenants", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tenant"] is None and out["counts"]["records"] > 0
    assert main(["memory", "list", "--db", dst, "--tenant", "acme", "--principal", "maya"]) == 0
    assert WORDS[MAYA] in capsys.readouterr().out
    every = ["--all-tenants"]
    assert main(["memory", "copy", "--db", src, "--to", dst, *every]) == 2
    assert "destination: already holds records rows" in capsys.readouterr().err
    assert main(["memory", "copy", "--db", str(tmp_path / "none.db"), "--to", dst, *every]) == 2
    assert "db: no database at" in capsys.readouterr().err
    assert main(["memory", "copy", "--db", src, "--to", str(tmp_path), *every]) == 2
    assert "to: " in capsys.readouterr().err
    new = str(tmp_path / "t.db")
    assert main(["memory", "copy", "--db", src, "--to", new, "--tenant", "a b"]) == 2
    assert "tenant: " in capsys.readouterr().err
    assert main(["memory", "copy", "--db", src, "--to", new, "--tenant", "globex"]) == 0
    assert capsys.readouterr().out.startswith(f"copied to {new}: records 1,")


#: Tables a copy leaves out: the store's own bookkeeping (its redaction key, schema
#: versions) and what it derives from the records (rebuilt on each principal's first search).
LEFT_OUT = {"retold_meta", "retold_schema"} | DERIVED - {
    "vectors",
    "vector_cells",
    "vector_indexes",
}


async def test_every_table_is_copied_or_left_out_on_purpose(
    tmp_path: Path, clock: FixedClock
) -> None:
    """A table a new component adds must join the copy (or LEFT_OUT, saying why)."""
    source = await _filled(tmp_path / "from.db", clock)
    tables = {
        r["name"]
        for r in source.query("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not r["name"].startswith(("sqlite_", "records_fts"))
    }
    assert tables - LEFT_OUT == {t.name for t in copy_module._TABLES}
    source.close()


async def test_prepare_builds_a_copied_scopes_indexes_before_its_first_search(
    tmp_path: Path, clock: FixedClock, destination: Store
) -> None:
    """After a copy, HybridRetriever.prepare reads every record into the name index and
    embeds every live one; a second call, and the search after it, have nothing left to do."""
    source = await _filled(tmp_path / "from.db", clock)
    copy_store(source, destination)
    embedder = HashingEmbedder(16, model_id="hashing-other")  # not the copied vectors' model
    retriever = HybridRetriever(destination, embedder=embedder)
    rows = destination.list_records(MAYA, lifecycle=None, include_expired=True)
    live = [r for r in rows if r.lifecycle.value != "deleted"]

    assert await retriever.prepare(MAYA) == (len(rows), len(live))
    assert await retriever.prepare(MAYA) == (0, 0)
    calls = embedder.calls
    found = await retriever.search(MAYA, f"Dr. {WORDS[MAYA]}")
    assert embedder.calls == calls + 1  # the query only: no record waited for a vector
    assert WORDS[MAYA] in found.candidates[0].record.text
    assert await HybridRetriever(destination).prepare(EVE) == (
        len(destination.list_records(EVE, lifecycle=None, include_expired=True)),
        0,
    )
    source.close()


def test_memory_index_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`retold memory index` prepares every principal (or one tenant's) and reports the
    counts; a second run reads nothing; an unknown bundle or an invalid tenant exits 2."""
    db = str(tmp_path / "m.db")
    with SQLiteStore(db) as store:
        for scope in SCOPES:
            store.add(scope, RecordDraft(text=f"{scope.principal} keeps bees in Utrecht."))
    base = ["memory", "index", "--db", db]
    capsys.readouterr()
    assert main([*base, "--tenant", "acme", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "principals": 2,
        "names_read": 2,
        "embedded": 0,
        "embedder": None,
    }
    assert main([*base, "--all-tenants", "--bundle", "offline-reference"]) == 0
    assert capsys.readouterr().out.startswith("indexed 3 principals: name index read 1 records")
    assert main([*base, "--all-tenants", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["names_read"] == 0
    assert main([*base, "--all-tenants", "--bundle", "no-such-bundle"]) == 2
    assert "no-such-bundle" in capsys.readouterr().err
    assert main([*base, "--tenant", " "]) == 2
    assert "tenant: " in capsys.readouterr().err


async def test_vectors_travel_with_the_copy_and_only_newer_records_are_embedded(
    tmp_path: Path, clock: FixedClock, destination: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vectors, cells and index state are copied (the watermark translated to the
    destination's rowids): the copy's dense search ranks as the source's, and only the
    records the source had not embedded yet are embedded on the destination."""
    monkeypatch.setattr(vectors_module, "DEFAULT_PROBE", 8)  # a cell index from 16 vectors on
    source = await _filled(tmp_path / "from.db", clock)
    for i in range(40):
        source.add(MAYA, RecordDraft(text=f"note {i} about {WORDS[MAYA]} and the garden"))
    assert await HybridRetriever(source, embedder=HashingEmbedder(16)).prepare(MAYA) != (0, 0)
    later = [source.add(MAYA, RecordDraft(text=f"later note {i}")) for i in range(3)]
    model = HashingEmbedder(16).model_id
    # One tenant: the other's records leave gaps, so the rowids differ from the source's.
    copy_store(source, destination, tenant="acme")

    assert vectors_module.vector_counts(destination, MAYA) == vectors_module.vector_counts(
        source, MAYA
    )
    cells = "SELECT cell, size FROM vector_cells WHERE principal = 'maya' ORDER BY cell"
    assert destination.query(cells) == source.query(cells) != []
    probe = hashed_embedding(f"{WORDS[MAYA]} garden", 16)
    assert vectors_module.dense_search(
        destination, MAYA, model, probe, 5
    ) == vectors_module.dense_search(source, MAYA, model, probe, 5)
    embedder = HashingEmbedder(16)
    _, embedded = await HybridRetriever(destination, embedder=embedder).prepare(MAYA)
    assert embedded == len(later) and embedder.calls == 1
    source.close()


@pytest.mark.skipif("postgresql" not in STORE_KINDS, reason="needs the PostgreSQL test cluster")
async def test_a_postgresql_source_is_copied_from_one_snapshot(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record (and its event) another process writes to a PostgreSQL source after the
    copy began is in neither table of the copy: the copy is one state of the source."""
    filled = await _filled(tmp_path / "from.db", clock)
    with fresh_pg_schema() as schema:
        source = make_store("postgresql", tmp_path, schema, clock=clock)
        copy_store(filled, source)
        other = make_store("postgresql", tmp_path, schema, clock=clock)  # another process
        write = copy_module._write
        late: list[str] = []

        def writing_meanwhile(dest: Store, w: Any, table: Any, rows: Any, scopes: Any) -> None:
            if table.name == "transcript_turns" and not late:  # records read, events not yet
                late.append(other.add(BOB, RecordDraft(text="Written during the copy.")).id)
            write(dest, w, table, rows, scopes)

        monkeypatch.setattr(copy_module, "_write", writing_meanwhile)
        with SQLiteStore(tmp_path / "to.db", clock=clock) as copied:
            copy_store(source, copied)
            assert late and copied.get(BOB, late[0]) is None
            events = "SELECT COUNT(*) AS n FROM events WHERE record_id = ?"
            assert copied.query(events, late)[0]["n"] == 0
            assert source.query(events, late)[0]["n"] == 1
            assert _exports(copied) == _exports(filled)
        other.close()
        source.close()
    filled.close()
