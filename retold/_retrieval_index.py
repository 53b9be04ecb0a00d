"""The retrieval component's own tables, and the name index its entity stage and relation
path read.

Schema (``retrieval`` migrations): the name index, its watermarks, and the indexes on
``records`` that session expansion and the speaker lists read.

The name index holds two readings of every live record of a scope, each in its own table
under its own watermark (the last record read, by rowid):

- ``entity``: the names, places and acronyms :func:`extract_entities` reads
  (``retrieval_entities``);
- ``relation``: the people a record introduces by relation, "my brother Luis"
  (:func:`retold._lexicon.introductions`, ``retrieval_relations``).

It is brought up to date lazily, before a search reads it (or by a write path calling
:func:`index_entities`), in committed steps of :data:`_INDEX_CHUNK` records, so a turn's
deadline stops a large first build between steps and loses none of it. A deleted record's
rows are purged by a trigger in the deleting transaction. Each reading is versioned
(:data:`_INDEX_STAGES`): a changed reading clears the scope's rows of the earlier one and
reads the scope again.
"""

from __future__ import annotations

import re
from typing import Any

from ._deadline import check_deadline
from ._lexicon import FUNCTION_WORDS as _STOPWORDS
from ._lexicon import introductions, noun_singular
from ._records import Principal
from ._retrieval_sql import RetrievalSQL, retrieval_sql
from ._store import Store

__all__ = ["ensure_retrieval_schema", "extract_entities", "index_entities", "index_scope"]

# Capitalised words (names, places, brands) and acronyms; sentence-initial stopwords are dropped.
_CAPITALISED = re.compile(r"(?<![\w'’])([A-Z][\w'’-]*[\w]|[A-Z])")


#: Function words that are also given names ("my friend Will", "ask Don"): capitalised
#: inside a sentence they name someone; at its start they are the function word.
NAMES_AMONG_FUNCTION_WORDS = frozenset({"will", "don"})


def _starts_sentence(text: str, at: int) -> bool:
    """Whether position ``at`` of ``text`` begins a sentence (or a quotation)."""
    before = text[max(0, at - 8) : at].rstrip()
    return not before or before[-1] in '.!?…:;"“‘('


def extract_entities(text: str) -> set[str]:
    """Names, places and acronyms in ``text`` (capitalised, non-function words), lower-cased.

    A function word that is also a given name (:data:`NAMES_AMONG_FUNCTION_WORDS`) counts
    when capitalised inside a sentence ("What does Will do?"), never at its start
    ("Will you come?")."""
    found: set[str] = set()
    for m in _CAPITALISED.finditer(text):
        word = m.group(1).strip("'’-").lower()
        word = re.sub(r"['’]s$", "", word)
        if len(word) < 2 or word.isdigit():
            continue
        if word not in _STOPWORDS or (
            word in NAMES_AMONG_FUNCTION_WORDS and not _starts_sentence(text, m.start())
        ):
            found.add(word)
    return found


_RETRIEVAL_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE retrieval_entities (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        entity TEXT NOT NULL,
        record_id TEXT NOT NULL,
        PRIMARY KEY (tenant, principal, entity, record_id)
    ) WITHOUT ROWID;
    CREATE TABLE retrieval_watermarks (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        stage TEXT NOT NULL,
        last_rowid INTEGER NOT NULL,
        PRIMARY KEY (tenant, principal, stage)
    );
    CREATE TABLE retrieval_vectors (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        record_id TEXT NOT NULL,
        model_id TEXT NOT NULL,
        dimensions INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (tenant, principal, model_id, record_id)
    );
    """,
    # Session-neighbour expansion reads whole sessions; the core index does not cover them.
    """
    CREATE INDEX IF NOT EXISTS retrieval_records_session
        ON records (tenant, principal, session_id);
    """,
    # Deletion erases a record's text; its entity names and vectors go in the same
    # transaction, whichever process or command deletes it.
    """
    CREATE TRIGGER retrieval_purge_deleted AFTER UPDATE OF lifecycle ON records
    WHEN NEW.lifecycle = 'deleted'
    BEGIN
        DELETE FROM retrieval_entities
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
        DELETE FROM retrieval_vectors
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
    END;
    """,
    # Vectors moved to the IVF-indexed ``vectors`` table (retold._vectors); the old table is
    # a rebuildable cache, so it is dropped, and the purge trigger keeps the entity part.
    """
    DROP TRIGGER retrieval_purge_deleted;
    CREATE TRIGGER retrieval_purge_deleted AFTER UPDATE OF lifecycle ON records
    WHEN NEW.lifecycle = 'deleted'
    BEGIN
        DELETE FROM retrieval_entities
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
    END;
    DROP TABLE retrieval_vectors;
    CREATE INDEX IF NOT EXISTS retrieval_records_speaker
        ON records (tenant, principal, speaker);
    """,
    # The people records introduce by relation ("my brother Luis"), keyed by the relation's
    # singular word and the record's place in the store (newest last), so the relation path
    # reads introductions, not every record that uses the word; and by the lower-cased
    # name, for the way back (a question naming Luis reaches "my brother" said without the
    # name). Indexed by the entity indexer under its own watermark (stage 'relation'): an
    # existing store is read once from its first record. The purge trigger removes them
    # with the record's other names.
    """
    CREATE TABLE retrieval_relations (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        relation TEXT NOT NULL,
        seq INTEGER NOT NULL,
        name TEXT NOT NULL,
        own INTEGER NOT NULL,
        record_id TEXT NOT NULL,
        PRIMARY KEY (tenant, principal, relation, seq, name, own)
    ) WITHOUT ROWID;
    CREATE INDEX retrieval_relations_name ON retrieval_relations (tenant, principal, name);
    DROP TRIGGER retrieval_purge_deleted;
    CREATE TRIGGER retrieval_purge_deleted AFTER UPDATE OF lifecycle ON records
    WHEN NEW.lifecycle = 'deleted'
    BEGIN
        DELETE FROM retrieval_entities
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
        DELETE FROM retrieval_relations
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
    END;
    """,
    # A watermark names the version of the reading its table holds ("relation@1"); the
    # rows indexed so far were read by version 1 of each.
    """
    UPDATE retrieval_watermarks SET stage = stage || '@1'
        WHERE stage IN ('entity', 'relation');
    """,
    # The purge trigger deletes a record's names by record id: without these it read every
    # name row of the scope per deleted record (22 ms at 100,000 records, in the write).
    """
    CREATE INDEX IF NOT EXISTS retrieval_entities_record
        ON retrieval_entities (tenant, principal, record_id);
    CREATE INDEX IF NOT EXISTS retrieval_relations_record
        ON retrieval_relations (tenant, principal, record_id);
    """,
    # A name's postings are keyed by the record's place in the store (``seq``, its rowid),
    # so the entity stage's limit for one name keeps the newest records naming it, not the
    # first in record-id order (random ids made that a random subset). The table is built
    # anew: its watermark goes, so each scope's names are read again from its first record,
    # in the indexer's committed steps (its reading did not change, so neither does its
    # version). Dropping the old table is this migration's cost (0.13 s for 65,000 names).
    """
    DROP TABLE retrieval_entities;
    CREATE TABLE retrieval_entities (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        entity TEXT NOT NULL,
        seq INTEGER NOT NULL,
        record_id TEXT NOT NULL,
        PRIMARY KEY (tenant, principal, entity, seq)
    ) WITHOUT ROWID;
    CREATE INDEX retrieval_entities_record
        ON retrieval_entities (tenant, principal, record_id);
    DELETE FROM retrieval_watermarks WHERE stage LIKE 'entity@%';
    """,
)


def ensure_retrieval_schema(store: Store) -> None:
    """Create (or migrate) the retrieval component's tables; idempotent."""
    store.ensure_schema("retrieval", _RETRIEVAL_MIGRATIONS)


def index_entities(store: Store, scope: Principal) -> int:
    """Index the entity names and the introductions by relation ("my brother Luis") of
    records written since the last call; returns how many records were read.

    The write path may call this after a write (or it runs lazily before the entity stage);
    it runs in its own transaction and never touches the records themselves. Entries of
    deleted records are purged by the ``retrieval_purge_deleted`` trigger in the deleting
    transaction, so erased text leaves no names behind.
    """
    return index_scope(store, scope)[0]


#: The version of the reading each index table holds: ``entity`` is what
#: :func:`extract_entities` reads from a text (``retrieval_entities``), ``relation`` what
#: :func:`introductions` reads (``retrieval_relations``). Bump a stage's version whenever its
#: reading changes (a test pins both readings' output on a fixed corpus and fails until the
#: version moves): a store indexed by an earlier version then drops that table's rows for
#: the scope and reads its records again, in committed steps like a first build, instead of
#: keeping the old reading of every record written before the upgrade.
_INDEX_STAGES = {"entity": 2, "relation": 1}
#: Each stage's table and the columns that, with the scope, key its rows.
_INDEX_TABLES = {
    "entity": ("retrieval_entities", "entity, seq"),
    "relation": ("retrieval_relations", "relation, seq, name, own"),
}
#: Records indexed per transaction: a store indexed for the first time (an import, an
#: upgrade that adds a table or changes a reading) commits its progress in steps, so a
#: turn's deadline, checked between steps, stops it after one step's work and loses none
#: (a step took at most 67 ms in a first build of 100,000 records on a 2-core machine).
_INDEX_CHUNK = 300
#: Rows of an earlier reading deleted per transaction before a stage reads its scope again
#: (bounded like the indexing steps: a large scope is cleared over several turns if need be).
_CLEAR_BATCH = 5000
#: A stage's watermark while the rows an earlier version of its reading wrote are deleted.
_CLEARING = -1


def _stage_key(stage: str) -> str:
    """The watermark row of ``stage`` at its current version ("relation@1")."""
    return f"{stage}@{_INDEX_STAGES[stage]}"


def index_scope(store: Store, scope: Principal) -> tuple[int, int]:
    """:func:`index_entities`, returning (records read now, the entity watermark after).

    Each table has its own watermark, so one added later (the relation table) or read
    anew (a new version of its reading) catches up from the first record while the other
    goes on from its own.
    """
    ensure_retrieval_schema(store)
    dialect = retrieval_sql(store)
    marks = _watermarks(store, scope)
    missing = sorted(set(_INDEX_STAGES) - set(marks))
    if missing:
        check_deadline("indexing entity names")
        _start_stages(store, scope, missing)
        marks = _watermarks(store, scope)
    clearing = sorted(stage for stage, mark in marks.items() if mark == _CLEARING)
    if clearing:
        for stage in clearing:
            _clear_stage(store, dialect, scope, stage)
        marks = _watermarks(store, scope)
    # A stage whose row another process removed meanwhile (an indexer of a newer version,
    # in a deployment running two) reads as 0 instead of failing the search; its rows then
    # mix with the newer reading's until every process runs the newer version.
    marks = {**dict.fromkeys(_INDEX_STAGES, 0), **marks}
    read, last = 0, min(marks.values())
    while True:
        new = dialect.records_after(store, scope, last, limit=_INDEX_CHUNK)
        if not new:
            break
        check_deadline("indexing entity names")
        _index_chunk(store, dialect, scope, new, marks)
        read, last = read + len(new), int(new[-1]["rowid"])
        if len(new) < _INDEX_CHUNK:
            break
    return read, max(last, marks["entity"])


def _watermarks(store: Store, scope: Principal) -> dict[str, int]:
    """Each stage's watermark at its current version (a stage not started is absent)."""
    keys = {_stage_key(stage): stage for stage in _INDEX_STAGES}
    rows = store.query(
        "SELECT stage, last_rowid FROM retrieval_watermarks "
        f"WHERE tenant = ? AND principal = ? AND stage IN ({', '.join('?' for _ in keys)})",
        [scope.tenant, scope.principal, *keys],
    )
    return {keys[r["stage"]]: int(r["last_rowid"]) for r in rows}


def _start_stages(store: Store, scope: Principal, stages: list[str]) -> None:
    """Start ``stages`` at their current version for ``scope``, in one write: the stage's
    watermark row is created (two indexers may race; the primary key lets one) and the
    watermark an earlier version left goes with it. When there was one, the row starts
    clearing and :func:`_clear_stage` deletes that version's rows before the scope's records
    are read again; when there was none, no rows were written for the scope (rows and their
    watermark are written together), so it starts at 0 and a new scope's first index writes
    no clearing steps."""
    with store.write() as w:
        for stage in stages:
            key = _stage_key(stage)
            row = {"tenant": scope.tenant, "principal": scope.principal, "stage": key}
            if not w.insert(
                "retrieval_watermarks", {**row, "last_rowid": _CLEARING}, or_ignore=True
            ):
                continue
            earlier = w.execute(
                "DELETE FROM retrieval_watermarks WHERE tenant = ? AND principal = ? "
                "AND stage LIKE ? AND stage != ?",
                [scope.tenant, scope.principal, f"{stage}@%", key],
            ).rowcount
            if not earlier:
                w.execute(
                    "UPDATE retrieval_watermarks SET last_rowid = 0 "
                    "WHERE tenant = ? AND principal = ? AND stage = ?",
                    [scope.tenant, scope.principal, key],
                )


def _clear_stage(store: Store, dialect: RetrievalSQL, scope: Principal, stage: str) -> None:
    """Delete the scope's rows of ``stage``'s table, :data:`_CLEAR_BATCH` per committed step
    (a deadline stops it between steps), then set its watermark from clearing to 0.

    Each step reads the watermark locked first, so it deletes only while the stage is
    clearing: once an indexer has finished, a racing one deletes nothing it wrote since.
    """
    table, key = _INDEX_TABLES[stage]
    scoped = [scope.tenant, scope.principal]
    where = "tenant = ? AND principal = ?"
    while True:
        check_deadline("clearing the index of an earlier reading")
        with store.write() as w:
            mark = w.query(
                f"SELECT last_rowid FROM retrieval_watermarks WHERE {where} AND stage = ?"
                + dialect.for_update,
                [*scoped, _stage_key(stage)],
            )
            if not mark or int(mark[0]["last_rowid"]) != _CLEARING:
                return
            deleted = w.execute(
                f"DELETE FROM {table} WHERE {where} AND ({key}) IN "
                f"(SELECT {key} FROM {table} WHERE {where} LIMIT ?)",
                [*scoped, *scoped, _CLEAR_BATCH],
            ).rowcount
            if deleted < _CLEAR_BATCH:
                w.execute(
                    f"UPDATE retrieval_watermarks SET last_rowid = 0 WHERE {where} AND stage = ?",
                    [*scoped, _stage_key(stage)],
                )
                return


def _index_chunk(
    store: Store,
    dialect: RetrievalSQL,
    scope: Principal,
    new: list[dict[str, Any]],
    marks: dict[str, int],
) -> None:
    """Index ``new`` (records in rowid order) past each table's watermark, in one write."""
    with store.write() as w:
        # Only records still alive as this write commits get names: one deleted since the
        # read above was purged by its trigger and must stay purged.
        alive = dialect.live_ids(
            w, scope, [row["id"] for row in new if row["lifecycle"] != "deleted"]
        )
        entities: list[tuple[Any, ...]] = []
        relations: list[tuple[Any, ...]] = []
        key = (scope.tenant, scope.principal)
        for row in new:
            if row["id"] not in alive:
                continue
            seq = int(row["rowid"])
            if seq > marks["entity"]:
                entities.extend(
                    (*key, entity, seq, row["id"])
                    for entity in sorted(extract_entities(row["text"]))
                )
            if seq > marks["relation"]:
                relations.extend(
                    (*key, noun_singular(relation), seq, name.lower(), int(own), row["id"])
                    for name, relation, own in introductions(row["text"])
                )
        _insert_rows(w, "retrieval_entities", "tenant, principal, entity, seq, record_id", entities)
        _insert_rows(
            w,
            "retrieval_relations",
            "tenant, principal, relation, seq, name, own, record_id",
            relations,
        )
        # Two indexers may race: a watermark only moves forward.
        for stage in _INDEX_STAGES:
            w.execute(
                "INSERT INTO retrieval_watermarks (tenant, principal, stage, last_rowid) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, principal, stage) "
                "DO UPDATE SET last_rowid = CASE WHEN excluded.last_rowid > "
                "retrieval_watermarks.last_rowid THEN excluded.last_rowid "
                "ELSE retrieval_watermarks.last_rowid END",
                [scope.tenant, scope.principal, _stage_key(stage), int(new[-1]["rowid"])],
            )


def _insert_rows(w: Any, table: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (values of ``columns``) into ``table``, a duplicate ignored, 100 rows
    per statement (under SQLite's oldest limit of 999 parameters)."""
    one = "(" + ", ".join("?" for _ in columns.split(",")) + ")"
    for at in range(0, len(rows), 100):
        batch = rows[at : at + 100]
        w.execute(
            f"INSERT INTO {table} ({columns}) VALUES {', '.join(one for _ in batch)} "
            "ON CONFLICT DO NOTHING",
            [value for row in batch for value in row],
        )
