"""Copying a store into another: from the SQLite file to PostgreSQL, or between stores.

A host that outgrows one SQLite file (several workers or machines on one store) moves to
:class:`~retold.PostgresStore`; :func:`copy_store` takes what the first store holds along,
whole or one tenant's rows:

* the records in every lifecycle state, with their ids, times, activation, evidence,
  supersession and conflict links and idempotency keys, in the order they were written;
* the transcript, the append-only ``events`` log, session profile snapshots, the review
  queue, extraction progress and failures;
* the audit: turn decisions with their configuration snapshots, searches and offline labels;
* recorded fitness results (whole-store copies only: they belong to no tenant), so a
  bundle that may serve live on the source may on the destination;
* dense vectors with their index cells, so no record is embedded again (the embedder's
  model id stays with each vector, as does the record it belongs to).

Not copied: the name indexes the store derives from the records (entity and relation
names, the lexical index's bookkeeping): the destination indexes each record's text as it
is written and rebuilds the names on each principal's first search (or ahead of it,
:meth:`~retold.HybridRetriever.prepare`), as it does for records written by any other
process.

Rows arrive already redacted and pass the destination's redaction gate again, which changes
nothing already redacted. A whole-store copy also carries the source's redaction key over,
when both stores keep theirs in the database (neither was opened with a
``redaction_key``): a secret written after the move gets the same placeholder as before it.
That matters for more than reading: an idempotency key holding a secret still matches, and
a gateway client's resent message holding one is still found in its session. Open the
destination in other processes only after the copy; they read the key when they open it.
A one-tenant copy (whose destination may hold other tenants, redacted with its key) or a
store opened with a host's key keeps the destination's key: later secrets then get the
destination's placeholders, and a host's key is never written into a database.

Everything is written in one transaction of the destination, read in one transaction of
the source: a failure leaves the destination as it was, and what is copied is one
consistent state of the source (SQLite's write lock; a REPEATABLE READ snapshot on
PostgreSQL). What hosts write to the source after that is not copied: stop them first.

Like the erasure and the export, this module sits above the store and every component
whose tables it copies; nothing below imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from ._components import COMPONENT_MIGRATIONS
from ._errors import InvalidInputError
from ._records import Principal, RowCounts, scope_id
from ._redaction import Redactor
from ._store import Store, WriteTx

__all__ = ["StoreCopy", "copy_store"]

log = structlog.get_logger("retold.copy")

#: Rows read from the source per statement.
_BATCH = 1000


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    component: str
    #: ORDER BY of the source read (the order the rows were written in), columns that
    #: are unique together: the reads page on them (keyset), so each costs the same.
    order: str
    #: Columns the destination fills itself: keys it numbers (rowid, autoincrement ids,
    #: assigned in the same order) and columns it generates from the row.
    skip: tuple[str, ...] = ()
    #: How the rows of one tenant are chosen ("" for a table of no tenant's).
    where_tenant: str = "tenant = ?"


#: In dependency order (a search or label after its decision, a decision after its
#: configuration snapshot).
_TABLES: tuple[_Table, ...] = (
    _Table("records", "core", "rowid", ("rowid", "fts_scope", "text_tsv", "text_len")),
    _Table("transcript_turns", "core", "tenant, principal, session_id, turn_index"),
    _Table("events", "core", "id", ("id",)),
    _Table("profile_snapshots", "profile", "tenant, principal, session_id"),
    _Table("activation_reviews", "activation", "created_at, id"),
    _Table("extraction_progress", "extraction", "tenant, principal, session_id, extractor"),
    _Table("extraction_failures", "extraction", "id", ("id",)),
    _Table(
        "turn_decision_configs",
        "audit",
        "sha256",
        where_tenant="sha256 IN (SELECT config_sha256 FROM turn_decisions WHERE tenant = ?)",
    ),
    _Table("turn_decisions", "audit", "created_at, id"),
    _Table("search_log", "audit", "created_at, id"),
    _Table(
        "offline_labels",
        "audit",
        "id",
        ("id",),
        where_tenant="decision_id IN (SELECT id FROM turn_decisions WHERE tenant = ?)",
    ),
    _Table("fitness_results", "fitness", "id", ("id",), where_tenant=""),
    # Dense vectors, their cells and index state as they are (computing them again means
    # running the embedder over every record); an index's watermark names a source rowid
    # and is translated (see _vector_mark).
    _Table("vector_indexes", "vectors", "tenant, principal, model_id"),
    _Table("vector_cells", "vectors", "tenant, principal, model_id, cell"),
    _Table("vectors", "vectors", "tenant, principal, model_id, cell, record_id"),
)

#: Tables whose rows say the destination already holds memory (a copy never merges).
_OCCUPIED = ("records", "transcript_turns", "events", "turn_decisions")


class StoreCopy(RowCounts):
    """What :func:`copy_store` wrote: rows per table (``counts``), and the tenant it was
    limited to (None: the whole store)."""

    tenant: str | None


def copy_store(source: Store, destination: Store, *, tenant: str | None = None) -> StoreCopy:
    """Copy what ``source`` holds into ``destination``, which must hold none of it yet.

    ``tenant`` limits the copy to one tenant's rows (fitness results, which belong to no
    tenant, are then left out). See the module documentation for what is copied and what
    the destination rebuilds.

    Raises:
        InvalidInputError: ``tenant`` is not a valid scope id; ``destination`` is
            ``source`` (field ``destination``), or it already holds records, transcript,
            events or turn decisions (of ``tenant``).
        StoreError: a store refused a statement; the destination is left as it was.
    """
    if tenant is not None:
        tenant = scope_id("tenant", tenant)
    if destination is source or (
        source.location is not None and source.location == destination.location
    ):
        raise InvalidInputError("destination", "is the source store; copy into another store")
    # The source's components are brought to this version's schema (as any component
    # does when it opens a store); one that never ran there has nothing to copy.
    present = {"core"} | {c for c in COMPONENT_MIGRATIONS if source.schema_version(c)}
    for component in sorted(present - {"core"}):
        source.ensure_schema(component, COMPONENT_MIGRATIONS[component])
    for component, migrations in COMPONENT_MIGRATIONS.items():
        destination.ensure_schema(component, migrations)
    counts = dict.fromkeys((t.name for t in _TABLES), 0)
    adopt = tenant is None and source.keeps_redaction_key and destination.keeps_redaction_key
    carried: bytes | None = None  # the source's redaction key, once written to the destination
    with source.write() as r, destination.write() as w:
        if source.dialect == "postgresql":
            # Every read sees one snapshot (a SQLite write transaction already does).
            r.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        _check_empty(w, tenant)
        if adopt:
            rows = r.query("SELECT value FROM retold_meta WHERE key = 'redaction_key'")
            carried = bytes.fromhex(str(rows[0]["value"]))
            destination._keep_key(w, carried)  # type: ignore[attr-defined]
        scopes: set[Principal] = set()
        for table in _TABLES:
            if table.component not in present or (tenant is not None and not table.where_tenant):
                continue
            key = [c.strip() for c in table.order.split(",")]
            after: list[Any] = []  # the last row's key: the next page starts past it
            while True:
                where = [table.where_tenant] if tenant is not None else []
                if after:
                    where.append(f"({table.order}) > ({', '.join('?' for _ in key)})")
                rows = r.query(
                    f"SELECT * FROM {table.name}"
                    + (f" WHERE {' AND '.join(where)}" if where else "")
                    + f" ORDER BY {table.order} LIMIT ?",
                    [*([tenant] if tenant is not None else []), *after, _BATCH],
                )
                if rows:
                    after = [rows[-1][c] for c in key]
                if table.name == "vector_indexes":
                    rows = [{**row, "last_rowid": _vector_mark(r, w, row)} for row in rows]
                _write(destination, w, table, rows, scopes)
                counts[table.name] += len(rows)
                if len(rows) < _BATCH:
                    break
    if carried is not None:
        destination.redactor = Redactor(carried)  # type: ignore[misc]
    log.info("store_copied", tenant=tenant, redaction_key_copied=carried is not None, **counts)
    return StoreCopy(counts=counts, tenant=tenant)


def _vector_mark(r: WriteTx, w: WriteTx, index: dict[str, Any]) -> int:
    """The destination's rowid up to which ``index``'s scope is embedded: that of the last
    record at or under the source's watermark (records keep their order, so the ones above
    it, not embedded yet, are above it in the destination too)."""
    scope = [index["tenant"], index["principal"]]
    last = r.query(
        "SELECT id FROM records WHERE tenant = ? AND principal = ? AND rowid <= ? "
        "ORDER BY rowid DESC LIMIT 1",
        [*scope, index["last_rowid"]],
    )
    if not last:
        return 0
    rows = w.query("SELECT rowid FROM records WHERE id = ?", [last[0]["id"]])
    return int(rows[0]["rowid"])


def _check_empty(w: WriteTx, tenant: str | None) -> None:
    for name in _OCCUPIED:
        where, params = ("", []) if tenant is None else (" WHERE tenant = ?", [tenant])
        if w.query(f"SELECT 1 AS x FROM {name}{where} LIMIT 1", params):
            whose = "" if tenant is None else f" of tenant {tenant!r}"
            raise InvalidInputError(
                "destination",
                f"already holds {name} rows{whose}; copy into a store without them "
                "(a copy never merges two stores)",
            )


def _write(
    destination: Store,
    w: WriteTx,
    table: _Table,
    rows: list[dict[str, Any]],
    scopes: set[Principal],
) -> None:
    """Write one batch of ``table``'s rows read from the source."""
    values = [{k: v for k, v in row.items() if k not in table.skip} for row in rows]
    if table.name == "turn_decision_configs":
        for row in values:  # shared by several tenants' turns: one may be there already
            w.insert(table.name, row, or_ignore=True)
        return
    if table.name == "records":
        for row in values:
            scope = Principal(tenant=str(row["tenant"]), principal=str(row["principal"]))
            if scope not in scopes:
                # The lock an insert of the scope's records takes (PostgreSQL: readers of
                # "records written since" wait for it), once per scope.
                destination._lock_for_insert(w, scope, None)  # type: ignore[attr-defined]
                scopes.add(scope)
    w.insert_many(table.name, values)
    if table.name == "records":
        for row in values:
            if row["lifecycle"] != "deleted":  # a deleted record's (erased) text is not indexed
                destination._index(w, str(row["id"]))  # type: ignore[attr-defined]
