"""export_principal and ``retold memory export``: everything stored about one principal.

A real chat pipeline writes two principals' words into every table that keeps them; the
export of one holds every row kept for them (every table scoped by tenant and principal is
either a section or a derived count), every word of theirs the store holds, none of the
other principal's, and the same bytes when nothing changed.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import anyio
import pytest

from retold import (
    Principal,
    PrincipalExport,
    RecordDraft,
    SQLiteStore,
    Store,
    erase_principal,
    export_principal,
)
from retold._audit import AuditLog
from retold._components import COMPONENT_MIGRATIONS
from retold._erasure import _COMPONENTS
from retold._export import _SECTIONS
from retold.cli import main

from .conftest import FixedClock
from .test_erasure import EVE, MAYA, WORDS, _converse, _where

#: Where each table scoped by tenant and principal is exported: a section of rows, or a
#: count under ``derived``.
SECTION_OF = {
    "records": "records",
    "transcript_turns": "transcript",
    "profile_snapshots": "profile_snapshots",
    "activation_reviews": "activation_reviews",
    "extraction_progress": "extraction_progress",
    "extraction_failures": "extraction_failures",
    "turn_decisions": "turn_decisions",
    "search_log": "searches",
    "events": "events",
}
DERIVED = {
    "lexical_stats",  # PostgreSQL only
    "retrieval_entities",
    "retrieval_relations",
    "retrieval_watermarks",
    "vectors",
    "vector_cells",
    "vector_indexes",
}


def _scoped_tables(store: Store) -> set[str]:
    """Every table with both a ``tenant`` and a ``principal`` column."""
    if store.dialect == "sqlite":
        tables = [
            r["name"]
            for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r["name"].startswith("sqlite_")
        ]
        columns = {t: {c["name"] for c in store.query(f"PRAGMA table_info({t})")} for t in tables}
    else:
        columns = {}
        for r in store.query(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema()"
        ):
            columns.setdefault(r["table_name"], set()).add(r["column_name"])
    return {t for t, cols in columns.items() if {"tenant", "principal"} <= cols}


def _count(store: Store, table: str, scope: Principal) -> int:
    sql = f"SELECT COUNT(*) AS n FROM {table} WHERE tenant = ? AND principal = ?"
    return int(store.query(sql, [scope.tenant, scope.principal])[0]["n"])


@pytest.mark.anyio
async def test_the_export_holds_every_row_and_word_kept_for_the_principal(
    any_store: Store, clock: FixedClock
) -> None:
    store = any_store
    await _converse(store, clock)
    deleted = store.add(MAYA, RecordDraft(text="My gym locker is number 41."))
    store.delete(MAYA, deleted.id)
    AuditLog(store).flush()

    exported = export_principal(store, MAYA)
    data = exported.model_dump(mode="json")
    text = exported.to_json()

    assert (exported.tenant, exported.principal) == ("acme", "maya")
    assert data["format"] == "retold.principal-export/1"
    tables = _scoped_tables(store)
    assert set(SECTION_OF) <= tables <= set(SECTION_OF) | DERIVED  # a new one is exported too
    assert set(data["derived"]) == tables & DERIVED
    for table, section in SECTION_OF.items():
        assert len(data[section]) == _count(store, table, MAYA), table
    for table in tables & DERIVED:
        assert data["derived"][table] == _count(store, table, MAYA), table
    # The conversation reached every kind of row worth checking.
    for section in ("records", "transcript", "profile_snapshots", "turn_decisions", "searches"):
        assert data[section], section
    assert data["derived"]["retrieval_entities"] > 0
    assert _where(store, WORDS[MAYA])  # the store holds Maya's word ...
    assert WORDS[MAYA] in text  # ... and so does her export
    assert WORDS[EVE] not in text and "eve" not in {r["principal"] for r in data["records"]}
    assert {r["id"]: r["lifecycle"] for r in data["records"]}[deleted.id] == "deleted"
    assert all(isinstance(d["gaps"], list) for d in data["turn_decisions"])
    assert all(isinstance(s["result_ids"], list) for s in data["searches"])
    assert export_principal(store, MAYA).to_json() == text  # same state, same bytes
    assert PrincipalExport.model_validate_json(text) == exported


@pytest.mark.anyio
async def test_an_export_after_erasure_holds_none_of_the_words(
    any_store: Store, clock: FixedClock
) -> None:
    store = any_store
    await _converse(store, clock)
    erase_principal(store, MAYA)

    exported = export_principal(store, MAYA)

    assert WORDS[MAYA] not in exported.to_json()
    assert exported.records and all(
        r["lifecycle"] == "deleted" and r["text"] == "" for r in exported.records
    )
    # The transcript rows stay, content-free (session, index, role, time).
    assert exported.transcript and all(
        t["text"] == "" and t["speaker"] is None for t in exported.transcript
    )
    assert exported.profile_snapshots == []
    assert exported.derived["retrieval_entities"] == 0 and exported.derived["vectors"] == 0
    assert exported.events[-1]["type"] == "principal.erased"
    assert WORDS[EVE] in export_principal(store, EVE).to_json()


def test_an_export_holds_the_placeholder_of_a_secret_never_the_secret(
    store: SQLiteStore,
) -> None:
    store.add(MAYA, RecordDraft(text="The wifi password is Tr0ub4dor&3, write it down."))

    text = export_principal(store, MAYA).to_json()

    assert "Tr0ub4dor" not in text and "[REDACTED:" in text


def test_an_unknown_principal_exports_empty_sections(store: SQLiteStore) -> None:
    exported = export_principal(store, Principal(tenant="acme", principal="nobody"))

    data = exported.model_dump()
    assert all(data[s] == [] for s in SECTION_OF.values())
    assert set(exported.derived.values()) == {0}


def test_memory_export_writes_a_private_file_or_stdout(
    tmp_path: Path,
    clock: FixedClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "memory.db"
    with SQLiteStore(db, clock=clock) as store:
        anyio.run(_converse, store, clock)
        AuditLog(store).flush()
        expected = export_principal(store, MAYA).model_dump(mode="json")
    scope = ["--db", str(db), "--tenant", "acme", "--principal", "maya"]
    out = tmp_path / "maya.json"

    assert main(["memory", "export", *scope, "--out", str(out)]) == 0
    assert "exported acme/maya to" in capsys.readouterr().out
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    written = json.loads(out.read_text(encoding="utf-8"))
    assert main(["memory", "export", *scope]) == 0
    printed = json.loads(capsys.readouterr().out)
    for got in (written, printed):
        assert {k: v for k, v in got.items() if k != "exported_at"} == {
            k: v for k, v in expected.items() if k != "exported_at"
        }
    assert list(tmp_path.glob(".maya.json.*")) == []  # no temporary file left behind


def test_memory_export_refuses_bad_input_and_writes_nothing(
    tmp_path: Path, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    store.add(MAYA, RecordDraft(text="My dentist is in Porto."))
    scope = ["--db", store.path, "--tenant", "acme", "--principal", "maya"]
    missing = tmp_path / "no-such-dir" / "out.json"

    assert main(["memory", "export", *scope, "--out", str(missing)]) == 2
    assert "out" in capsys.readouterr().err and not missing.parent.exists()
    assert main(["memory", "export", *scope, "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    nothing = tmp_path / "none.db"
    assert main(["memory", "export", "--db", str(nothing), *scope[2:]]) == 2
    assert "db" in capsys.readouterr().err and not nothing.exists()


def test_erasing_or_exporting_a_principal_scans_no_table(store: SQLiteStore) -> None:
    """Every statement of the erasure and of the export finds one principal's rows through
    an index: none reads every principal's rows (the audit's searches are the largest)."""
    for component, _ in _COMPONENTS:
        store.ensure_schema(component, COMPONENT_MIGRATIONS[component])
    statements = [sql for _, stmts in _COMPONENTS for _, sql in stmts]
    statements += [sql for _, _, sql, _ in _SECTIONS]
    for sql in statements:
        plan = [r["detail"] for r in store.query("EXPLAIN QUERY PLAN " + sql, ["acme", "maya"])]
        assert not any(step.startswith("SCAN") for step in plan), (sql, plan)
