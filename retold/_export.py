"""Exporting a principal: everything the store keeps about one user, as one document.

The counterpart of :func:`retold.erase_principal` for a user who asks what is stored about
them, or wants to take it elsewhere (an access or portability request).
:func:`export_principal` reads every row kept for one ``(tenant, principal)``:

* ``records``: every record in every lifecycle state, as :class:`~retold.Record` fields
  (a deleted record keeps its id, kind and times; its text is already gone);
* ``transcript``: every session's turns, as :class:`~retold.TranscriptTurn` fields;
* ``profile_snapshots``, ``activation_reviews``, ``extraction_progress`` and
  ``extraction_failures``: their rows;
* ``turn_decisions``, ``searches`` and ``offline_labels``: the audit, decoded as
  ``retold decisions`` reads it;
* ``events``: the append-only event log.

What the store derives from the records only to find them again (the entity and relation
name indexes, the dense vectors and their index cells, the indexes' bookkeeping) is
counted under ``derived``, not copied: it says nothing the records do not, and a vector is
not readable. Secrets were redacted before anything was written, so an export holds their
placeholders, never the secrets.

Like the erasure, this module sits above the store and every component whose tables it
reads; nothing below imports it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from ._audit import decode_decision_row
from ._erasure_fence import erasure_lock
from ._records import Event, Principal, TranscriptTurn
from ._retrieval_sql import retrieval_sql
from ._store import _RECORD_COLUMNS, Store, WriteTx, _row_to_record

__all__ = ["EXPORT_FORMAT", "PrincipalExport", "export_principal"]

EXPORT_FORMAT: Final = "retold.principal-export/1"

_Row = dict[str, Any]


def _json_columns(*columns: str) -> Callable[[Mapping[str, Any]], _Row]:
    def decode(row: Mapping[str, Any]) -> _Row:
        out = dict(row)
        for column in columns:
            if isinstance(out.get(column), str):
                out[column] = json.loads(out[column])
        return out

    return decode


def _record(row: Mapping[str, Any]) -> _Row:
    return _row_to_record(row).model_dump(mode="json")


def _turn(row: Mapping[str, Any]) -> _Row:
    return TranscriptTurn.model_validate(row).model_dump(mode="json")


def _event(row: Mapping[str, Any]) -> _Row:
    return Event.model_validate({**row, "data": json.loads(row["data"])}).model_dump(mode="json")


_SCOPED = "WHERE {t}.tenant = ? AND {t}.principal = ?"

#: Per section: the component whose schema holds its table, the query (scoped by tenant
#: and principal, in a stable order) and how a row is decoded.
_SECTIONS: tuple[tuple[str, str, str, Callable[[Mapping[str, Any]], _Row]], ...] = (
    (
        "records",
        "core",
        f"SELECT {_RECORD_COLUMNS} FROM records r {_SCOPED.format(t='r')} ORDER BY r.rowid",
        _record,
    ),
    (
        "transcript",
        "core",
        "SELECT session_id, turn_index, role, speaker, text, time FROM transcript_turns t "
        f"{_SCOPED.format(t='t')} ORDER BY t.session_id, t.turn_index",
        _turn,
    ),
    (
        "profile_snapshots",
        "profile",
        f"SELECT * FROM profile_snapshots p {_SCOPED.format(t='p')} ORDER BY p.session_id",
        _json_columns("record_ids", "excluded"),
    ),
    (
        "activation_reviews",
        "activation",
        f"SELECT * FROM activation_reviews a {_SCOPED.format(t='a')} ORDER BY a.created_at, a.id",
        _json_columns(),
    ),
    (
        "extraction_progress",
        "extraction",
        f"SELECT * FROM extraction_progress x {_SCOPED.format(t='x')} "
        "ORDER BY x.session_id, x.extractor",
        _json_columns(),
    ),
    (
        "extraction_failures",
        "extraction",
        f"SELECT * FROM extraction_failures x {_SCOPED.format(t='x')} ORDER BY x.id",
        _json_columns(),
    ),
    (
        "turn_decisions",
        "audit",
        "SELECT d.*, c.config FROM turn_decisions d "
        "JOIN turn_decision_configs c ON c.sha256 = d.config_sha256 "
        f"{_SCOPED.format(t='d')} ORDER BY d.created_at, d.session_id, d.turn_index, d.id",
        decode_decision_row,
    ),
    (
        "searches",
        "audit",
        f"SELECT * FROM search_log s {_SCOPED.format(t='s')} ORDER BY s.created_at, s.id",
        _json_columns("result_ids"),
    ),
    (
        "offline_labels",
        "audit",
        "SELECT l.* FROM offline_labels l JOIN turn_decisions d ON d.id = l.decision_id "
        f"{_SCOPED.format(t='d')} ORDER BY l.created_at, l.id",
        _json_columns("subset"),
    ),
    (
        "events",
        "core",
        "SELECT id, tenant, principal, record_id, type, actor, time, data FROM events e "
        f"{_SCOPED.format(t='e')} ORDER BY e.id",
        _event,
    ),
)

#: Tables the store derives from the records to find them again, by component (and the
#: one store dialect that has it, if only one does): counted.
_DERIVED: tuple[tuple[str, str, str | None], ...] = (
    ("core", "lexical_stats", "postgresql"),
    ("retrieval", "retrieval_entities", None),
    ("retrieval", "retrieval_relations", None),
    ("retrieval", "retrieval_watermarks", None),
    ("vectors", "vectors", None),
    ("vectors", "vector_cells", None),
    ("vectors", "vector_indexes", None),
)


class PrincipalExport(BaseModel):
    """Everything stored about one principal (see :func:`export_principal`).

    Each section is a list of rows, oldest first; ``derived`` counts the rows of the
    indexes derived from the records.
    """

    model_config = ConfigDict(frozen=True)

    format: Literal["retold.principal-export/1"] = EXPORT_FORMAT
    tenant: str
    principal: str
    exported_at: datetime
    records: list[_Row]
    transcript: list[_Row]
    profile_snapshots: list[_Row]
    activation_reviews: list[_Row]
    extraction_progress: list[_Row]
    extraction_failures: list[_Row]
    turn_decisions: list[_Row]
    searches: list[_Row]
    offline_labels: list[_Row]
    events: list[_Row]
    derived: dict[str, int]

    def to_json(self) -> str:
        """The export as JSON text: keys sorted, two-space indent, so the same store state
        gives the same bytes. Characters are kept as they are, unless some stored text is
        not valid Unicode (a lone surrogate): then all are escaped, so the text always
        encodes as UTF-8."""
        data = self.model_dump(mode="json")
        text = json.dumps(data, sort_keys=True, ensure_ascii=False, indent=2)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(data, sort_keys=True, ensure_ascii=True, indent=2)
        return text


def export_principal(store: Store, scope: Principal) -> PrincipalExport:
    """Everything ``store`` keeps for ``scope``, read in one transaction.

    The rows are read in the store's write transaction (under the scope's erasure lock),
    so an erasure or a write of the principal lands wholly before or after the export, and
    decoded once it has ended: writers wait only for the reads (about 1 s for a principal
    with 100,000 records on SQLite, against 4.9 s when decoding inside). A component that
    never ran on this store contributes empty sections. Reading writes nothing.

    Raises:
        StoreError: the store refused a statement.
    """
    components = {c for _, c, _, _ in _SECTIONS} | {c for c, _, _ in _DERIVED}
    present = {c for c in components if store.schema_version(c)}
    params = [scope.tenant, scope.principal]
    raw: dict[str, list[dict[str, Any]]] = {}
    derived: dict[str, int] = {}
    with store.write() as w:
        retrieval_sql(store).serialize(w, erasure_lock(scope))
        exported_at = w.now
        for name, component, sql, _ in _SECTIONS:
            raw[name] = w.query(sql, params) if component in present else []
        for component, table, dialect in _DERIVED:
            if dialect in (None, store.dialect):
                derived[table] = _count(w, table, params) if component in present else 0
    # Decoded once the transaction is over: writers wait only for the reads.
    sections = {name: [decode(row) for row in raw[name]] for name, _, _, decode in _SECTIONS}
    return PrincipalExport(
        tenant=scope.tenant,
        principal=scope.principal,
        exported_at=exported_at,
        derived=derived,
        **sections,
    )


def _count(w: WriteTx, table: str, params: list[Any]) -> int:
    rows = w.query(f"SELECT COUNT(*) AS n FROM {table} WHERE tenant = ? AND principal = ?", params)
    return int(rows[0]["n"])
