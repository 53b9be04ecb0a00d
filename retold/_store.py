"""The ``Store`` protocol and its SQLite implementation.

One SQLite file (WAL, ``busy_timeout``), schema versioned per component, every write in a
``BEGIN IMMEDIATE`` transaction, an FTS5 index maintained with the records, and an
append-only ``events`` table. Every read and write takes its scope from a trusted
:class:`~retold.Principal` and filters on it in SQL (CTI-1). Every string a write binds
passes the store's :class:`~retold.Redactor` first (SR-1), so no caller can bypass the gate.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
import re
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar, cast, runtime_checkable

import anyio
import structlog
from pydantic import ValidationError
from sqlite_utils import Database

from ._deadline import _ACTIVE_DEADLINE, Deadline
from ._errors import (
    InvalidInputError,
    StoreError,
    StoreIntegrityError,
    UsageError,
    store_error,
)
from ._records import (
    Activation,
    Event,
    EvidenceRef,
    LifecycleState,
    Principal,
    Record,
    RecordDraft,
    TranscriptTurn,
    WriteOrigin,
    scope_id,
)
from ._redaction import Redactor

__all__ = [
    "AsyncStore",
    "SQLiteStore",
    "Store",
    "WriteTx",
    "Writer",
    "iso",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")
Clock = Callable[[], datetime]

_UNTRUSTED_ORIGINS = frozenset({WriteOrigin.EXTRACTION, WriteOrigin.TOOL_CALL})


def iso(value: datetime | None) -> str | None:
    """Canonical, lexicographically sortable UTC text for a datetime."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return "r" + uuid.uuid4().hex


# -- SQL under a deadline (retold._deadline) ----------------------------------------------

#: SQLite virtual-machine steps between two deadline checks of a bounded statement. A check
#: takes the GIL for a moment (and may make the event loop hand it over), so it is not run
#: on every step. Measured on the turn path's FTS, vector and record scans: 1-3.5 million
#: steps a second, so 4000 steps are 1-4 ms of SQL: how late a statement on a worker thread
#: stops after its deadline (the turn itself does not wait for it).
_PROGRESS_STEPS = 4000

#: The same for reads on the event loop itself (:meth:`SQLiteStore.query_inline`), whose
#: time slice is about a millisecond: 500 steps are 0.15-0.5 ms.
_INLINE_PROGRESS_STEPS = 500

#: Idle read connections a file-backed store keeps for reuse.
_MAX_IDLE_READERS = 8
#: SQLiteStore's default ``mmap_bytes``: 1 GiB of address space per pooled read connection
#: (SQLite clamps it to its build's limit; the mapped pages are the shared file cache).
DEFAULT_MMAP_BYTES = 1 << 30


def _interrupted(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "interrupt" in str(exc).lower()


def _sqlite_cause(exc: BaseException) -> sqlite3.Error | None:
    """The sqlite3 error ``exc`` is, or was translated from (None for other errors)."""
    if isinstance(exc, sqlite3.Error):
        return exc
    if isinstance(exc, StoreError) and isinstance(exc.__cause__, sqlite3.Error):
        return exc.__cause__
    return None


def _busy(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED: another connection holds a lock this one needs."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


#: A row's scope token in the lexical index: one word made of the hex of its tenant and
#: principal (ids are ASCII letters, digits and ``._:@-``), so no two scopes share a token
#: and no query word can equal one. :func:`scope_token` spells the same word in Python.
_FTS_SCOPE_SQL = "'s' || hex(tenant) || 'x' || hex(principal) || 'z'"
#: BM25 over the text column only: the scope token (weight 0) adds nothing to a score.
BM25 = "bm25(records_fts, 1.0, 0.0)"


def scope_token(scope: Principal) -> str:
    """The lexical index's token of ``scope`` (:data:`_FTS_SCOPE_SQL`, lower-cased as the
    tokenizer folds it)."""
    return f"s{scope.tenant.encode().hex()}x{scope.principal.encode().hex()}z"


def scoped_match(scope: Principal, match: str) -> str:
    """``match`` (an FTS5 expression over the text) limited to ``scope``'s rows."""
    return f'fts_scope : "{scope_token(scope)}" AND text : ({match})'


_CORE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE retold_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE records (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        activation TEXT NOT NULL DEFAULT 'conditional',
        lifecycle TEXT NOT NULL,
        epistemic TEXT NOT NULL,
        confidence REAL NOT NULL,
        source_type TEXT NOT NULL,
        speaker TEXT,
        event_time TEXT,
        valid_from TEXT,
        valid_to TEXT,
        expires_at TEXT,
        superseded_by TEXT,
        conflicts_with TEXT NOT NULL DEFAULT '[]',
        evidence TEXT NOT NULL DEFAULT '[]',
        attribute TEXT,
        tags TEXT NOT NULL DEFAULT '[]',
        session_id TEXT,
        idempotency_key TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (tenant, principal, idempotency_key)
    );
    CREATE INDEX records_scope ON records (tenant, principal, lifecycle, created_at);
    CREATE VIRTUAL TABLE records_fts USING fts5(
        text, content='records', content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TABLE transcript_turns (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        session_id TEXT NOT NULL,
        turn_index INTEGER NOT NULL,
        role TEXT NOT NULL,
        speaker TEXT,
        text TEXT NOT NULL,
        time TEXT NOT NULL,
        PRIMARY KEY (tenant, principal, session_id, turn_index)
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        record_id TEXT,
        type TEXT NOT NULL,
        actor TEXT NOT NULL,
        time TEXT NOT NULL,
        data TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_scope ON events (tenant, principal, record_id);
    CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
    """,
    # A scope's rows after a watermark (what entity indexing and embedding have not yet
    # seen) in rowid order: the index's entries are (tenant, principal, rowid), so the read
    # seeks to the scope's first new row instead of walking every other principal's newer
    # rows (7 ms per check at 20k foreign rows, on every search of a quiet principal).
    """
    CREATE INDEX IF NOT EXISTS records_scope_rowid ON records (tenant, principal);
    """,
    # The lexical index also holds each row's scope as one token (``fts_scope``, computed
    # from the row, never stored twice), so a search ANDs the scope's token with its words
    # and FTS5 skips other principals' postings instead of reading and discarding them: in
    # a store where many principals write in turns, a common word's postings are mostly
    # other people's. The index is rebuilt from the records table, which it mirrors.
    f"""
    ALTER TABLE records ADD COLUMN fts_scope TEXT GENERATED ALWAYS AS ({_FTS_SCOPE_SQL}) VIRTUAL;
    DROP TABLE records_fts;
    CREATE VIRTUAL TABLE records_fts USING fts5(
        text, fts_scope, content='records', content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    INSERT INTO records_fts (records_fts) VALUES ('rebuild');
    """,
)

_RECORD_COLUMNS = (
    "id, tenant, principal, kind, text, activation, lifecycle, epistemic, confidence, "
    "source_type, speaker, event_time, valid_from, valid_to, expires_at, superseded_by, "
    "conflicts_with, evidence, attribute, tags, session_id, idempotency_key, created_at, "
    "updated_at"
)


def _row_to_record(row: Mapping[str, Any]) -> Record:
    """The :class:`Record` a ``records`` row holds (extra ``rowid``/``score`` keys ignored).

    Records are immutable, so one row's record is shared: the turn path reads the same rows
    again and again (a retriever's candidates, then their verification; the same records
    on the next turn), and validating a row costs far more than looking it up. Only rows
    whose text is at most :data:`_SHARED_TEXT_MAX` characters are kept, so the cache stays
    a few megabytes.
    """
    values = _record_values(row)
    if len(row["text"] or "") > _SHARED_TEXT_MAX:
        return _record_from_values.__wrapped__(values)
    return _record_from_values(values)


_RECORD_COLUMN_NAMES = tuple(c.strip() for c in _RECORD_COLUMNS.split(","))
#: A row's record columns, in :data:`_RECORD_COLUMNS` order (the cache key); a row that
#: lacks one is a bug of its query and raises ``KeyError``.
_record_values = operator.itemgetter(*_RECORD_COLUMN_NAMES)
_SHARED_TEXT_MAX = 4096


@functools.lru_cache(maxsize=1024)
def _record_from_values(values: tuple[Any, ...]) -> Record:
    data = dict(zip(_RECORD_COLUMN_NAMES, values, strict=True))
    for key in ("conflicts_with", "evidence", "tags"):
        data[key] = json.loads(data[key])
    return Record.model_validate(data)


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression that ORs the words of free text (None when it has none).

    Words are quoted, so user text can never inject FTS5 syntax.
    """
    words = re.findall(r"\w+", text.lower())
    if not words:
        return None
    unique = list(dict.fromkeys(words))
    return " OR ".join(f'"{w}"' for w in unique)


class _WriterBase:
    """What every store's writer shares: the one door to every column (SR-1).

    Every bound value passes the redactor of the row's tenant first: strings (and strings
    that are themselves encoded JSON, decoded and redacted value by value), and lists or
    dicts, which are redacted value by value and only then encoded as JSON text. The
    tenant is the row's ``tenant`` column for :meth:`insert`, the scope for :meth:`event`,
    and ``tenant`` (from the store's ``write(tenant=...)``) for raw statements. A store's
    writer supplies :meth:`execute` and :meth:`query`.
    """

    _store: Any
    now: datetime
    tenant: str | None

    def redactor(self, tenant: str | None = None) -> Redactor:
        """The redactor this write uses for ``tenant`` (default: the write's tenant)."""
        tenant = tenant if tenant is not None else self.tenant
        base: Redactor = self._store.redactor
        return base if tenant is None else base.for_tenant(tenant)

    def clean(self, value: Any, tenant: str | None = None) -> Any:
        """One bound value as it will be stored: redacted before any encoding."""
        if isinstance(value, str):
            return self.redactor(tenant).redact_encoded(value)
        if isinstance(value, Mapping | list | tuple):
            return json.dumps(self.redactor(tenant).redact_value(value), ensure_ascii=False)
        return value

    def _clean(self, params: Sequence[Any] | Mapping[str, Any], tenant: str | None = None) -> Any:
        if isinstance(params, Mapping):
            return {k: self.clean(v, tenant) for k, v in params.items()}
        return [self.clean(v, tenant) for v in params]

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | dict[str, Any] = (),
        *,
        tenant: str | None = None,
    ) -> Any:
        """Run one statement inside the transaction with redacted parameters."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Read inside the transaction (sees its uncommitted writes)."""
        raise NotImplementedError

    def insert(self, table: str, row: Mapping[str, Any], *, or_ignore: bool = False) -> int:
        """Insert one row; returns the number of rows written (0 when ignored)."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        tail = " ON CONFLICT DO NOTHING" if or_ignore else ""
        tenant = row.get("tenant")
        cur = self.execute(
            f"INSERT INTO {table} ({cols}) VALUES ({marks}){tail}",
            list(row.values()),
            tenant=tenant if isinstance(tenant, str) else None,
        )
        return int(cur.rowcount)

    def insert_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert rows that have the columns of the first, as one statement run for each
        (each row's values redacted with its own tenant's key): a bulk load without a
        round trip per row on PostgreSQL."""
        if not rows:
            return
        columns = list(rows[0])
        sql = (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
        )
        params = []
        for row in rows:
            tenant = row.get("tenant")
            params.append(
                self._clean([row[c] for c in columns], tenant if isinstance(tenant, str) else None)
            )
        self._execute_many(sql, params)

    def _execute_many(self, sql: str, params: list[list[Any]]) -> None:
        """Run ``sql`` once per parameter list (already redacted)."""
        raise NotImplementedError

    def step(self, name: str) -> None:
        """Mark a point inside a write; the store's fault seam may raise here (tests)."""
        if self._store._on_write_step is not None:
            self._store._on_write_step(name)

    def event(
        self,
        scope: Principal,
        type: str,
        *,
        actor: str,
        record_id: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one audit event in this transaction."""
        payload = json.dumps(
            self.redactor(scope.tenant).redact_value(dict(data or {})), sort_keys=True
        )
        self.execute(
            "INSERT INTO events (tenant, principal, record_id, type, actor, time, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [scope.tenant, scope.principal, record_id, type, actor, iso(self.now), payload],
            tenant=scope.tenant,
        )


class Writer(_WriterBase):
    """The write side of one open SQLite transaction (see :class:`_WriterBase` for SR-1)."""

    def __init__(self, store: SQLiteStore, tenant: str | None = None) -> None:
        self._store = store
        self.now = store.clock()
        self.tenant = tenant

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | dict[str, Any] = (),
        *,
        tenant: str | None = None,
    ) -> sqlite3.Cursor:
        """Run one statement inside the transaction with redacted parameters."""
        cursor: sqlite3.Cursor = self._store.db.execute(sql, self._clean(params, tenant))
        return cursor

    def _execute_many(self, sql: str, params: list[list[Any]]) -> None:
        self._store.db.conn.executemany(sql, params)

    def _raw(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # Key bookkeeping only (values that are not user data); no redaction.
        return self._store.db.conn.execute(sql, list(params))

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Read inside the transaction (sees its uncommitted writes)."""
        return list(self._store.db.query(sql, params))


class WriteTx(Protocol):
    """One open write transaction of a store (``with store.write() as w``).

    A conforming writer must redact every string it binds (SQL text never carries values:
    ``?`` placeholders only), see its own uncommitted rows in :meth:`query`, and commit or
    roll back as a whole with the ``with`` block.
    """

    now: datetime

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any: ...

    def insert(self, table: str, row: Mapping[str, Any], *, or_ignore: bool = False) -> int: ...

    def insert_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def query(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
    ) -> list[dict[str, Any]]: ...

    def step(self, name: str) -> None: ...

    def event(
        self,
        scope: Principal,
        type: str,
        *,
        actor: str,
        record_id: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None: ...


@runtime_checkable
class Store(Protocol):
    """Scoped persistence for records, transcript turns and audit events.

    A conforming store must:

    * filter every read, search, list, update and delete on the given ``Principal`` in the
      query itself, with no way to read across tenants;
    * pass every persisted string through its redactor before it is written (SR-1);
    * write each call atomically: either all of it (record, index, events) or none of it;
    * never return deleted text, and never return superseded or expired records from
      ``search`` or default listings.

    Components that own tables (retrieval, audit, ...) use :meth:`ensure_schema`,
    :meth:`query` and :meth:`write` with ``?`` placeholders; ``dialect`` (``"sqlite"`` or
    ``"postgresql"``) tells them which DDL and which dialect-specific SQL to use.
    """

    @property
    def clock(self) -> Clock: ...

    @property
    def dialect(self) -> str: ...

    @property
    def busy_timeout_ms(self) -> int:
        """How long a write waits for another connection's lock (outside any deadline)."""
        ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def keeps_redaction_key(self) -> bool:
        """Whether the redaction key is the one kept in the database (the store was opened
        without a ``redaction_key``)."""
        ...

    @property
    def location(self) -> str | None:
        """What ``--db`` opens this store from the command line (never with a password);
        None for an in-memory store."""
        ...

    def shared(self, key: str, factory: Callable[[], T]) -> T:
        """The store-wide component ``key`` (one per store, closed by :meth:`close`)."""
        ...

    def close(self) -> None:
        """Close the store-wide components (the audit writer flushes), then the connections."""
        ...

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc: object) -> None: ...

    def write(self, *, tenant: str | None = None) -> AbstractContextManager[WriteTx]:
        """Open a write transaction; ``tenant`` picks the redaction key of its strings."""
        ...

    def query(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
    ) -> list[dict[str, Any]]: ...

    def query_tuples(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Like :meth:`query`, rows as plain tuples (for hot read paths)."""
        ...

    def ensure_schema(self, component: str, migrations: Sequence[str]) -> None: ...

    def schema_version(self, component: str) -> int: ...

    def add(
        self,
        scope: Principal,
        draft: RecordDraft,
        *,
        origin: WriteOrigin = WriteOrigin.HOST,
        actor: str = "host",
    ) -> Record: ...

    def add_batch(
        self,
        scope: Principal,
        drafts: Sequence[RecordDraft],
        *,
        origin: WriteOrigin = WriteOrigin.HOST,
        actor: str = "host",
        also: Callable[[WriteTx], None] | None = None,
    ) -> list[Record]: ...

    def insert_record(
        self, w: Any, scope: Principal, draft: RecordDraft, *, origin: WriteOrigin, actor: str
    ) -> Record:
        """Insert one record inside the open transaction ``w`` (see :meth:`add`)."""
        ...

    def refuse_untrusted_ambient(
        self, scope: Principal, drafts: Sequence[RecordDraft], *, origin: WriteOrigin, actor: str
    ) -> None:
        """Audit and refuse a write from extraction or a tool call that asks for ambient."""
        ...

    def get(self, scope: Principal, record_id: str) -> Record | None: ...

    def list_records(
        self,
        scope: Principal,
        *,
        lifecycle: Sequence[LifecycleState] | None = (LifecycleState.ACTIVE,),
        activation: Activation | None = None,
        include_expired: bool = False,
        limit: int | None = None,
    ) -> list[Record]: ...

    def search(
        self, scope: Principal, query: str, *, limit: int = 20
    ) -> list[tuple[Record, float]]: ...

    def delete(self, scope: Principal, record_id: str, *, actor: str = "host") -> Record: ...

    def erase_scope(self, w: Any, scope: Principal, *, actor: str) -> dict[str, int]: ...

    def vacuum(self) -> None:
        """Remove the copies of erased text the database keeps after a delete from its files."""
        ...

    def transition(
        self,
        scope: Principal,
        record_id: str,
        lifecycle: LifecycleState,
        *,
        actor: str,
        reason: str = "",
        superseded_by: str | None = None,
    ) -> Record: ...

    def set_activation(
        self,
        scope: Principal,
        record_id: str,
        activation: Activation,
        *,
        actor: str,
        origin: WriteOrigin,
        data: Mapping[str, Any] | None = None,
    ) -> Record: ...

    def add_turn(self, scope: Principal, turn: TranscriptTurn) -> TranscriptTurn: ...

    def insert_turn(self, w: Any, scope: Principal, turn: TranscriptTurn) -> TranscriptTurn:
        """Append one transcript turn inside the open transaction ``w`` (see :meth:`add_turn`)."""
        ...

    def get_turn(self, scope: Principal, ref: EvidenceRef) -> TranscriptTurn | None: ...

    def turns(
        self, scope: Principal, session_id: str, *, last: int | None = None
    ) -> list[TranscriptTurn]: ...

    def next_turn_index(self, scope: Principal, session_id: str) -> int: ...

    def append_event(
        self,
        scope: Principal,
        type: str,
        *,
        actor: str,
        record_id: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None: ...

    def events(
        self, scope: Principal, *, record_id: str | None = None, type: str | None = None
    ) -> list[Event]: ...


class _SharedStoreOps:
    """The store operations whose SQL is the same on every dialect, written once.

    ``SQLiteStore`` and ``PostgresStore`` inherit them. Each supplies the transaction
    (``write``, which raises driver errors as :class:`StoreError`), the reads (``query``),
    ``search``, and the hooks where the dialects differ: :meth:`_index` and :meth:`_unindex`
    (SQLite's FTS5 table; PostgreSQL's ``tsvector`` is a generated column),
    :meth:`_lock_for_insert` (PostgreSQL's advisory locks) and ``_row_lock`` (the clause
    that locks a record read inside a write).
    """

    _clock: Clock
    _new_id: Callable[[], str]
    redactor: Redactor
    keeps_redaction_key: bool
    #: Appended to a record read inside a write that is about to change it.
    _row_lock = ""

    if TYPE_CHECKING:

        def write(self, *, tenant: str | None = None) -> AbstractContextManager[Any]: ...

        def query(
            self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
        ) -> list[dict[str, Any]]: ...

        def close(self) -> None: ...

    # -- store-wide components ------------------------------------------------------------

    _shared: dict[str, Any]
    _shared_lock: threading.Lock

    def shared(self, key: str, factory: Callable[[], T]) -> T:
        """The store-wide component ``key``, made by ``factory`` on first use.

        Components that hold resources over this store (the turn-decision writer) live here,
        so every user of the store shares one, and ``close`` closes them first.
        """
        with self._shared_lock:
            if key not in self._shared:
                self._shared[key] = factory()
            component: T = self._shared[key]
            return component

    def _close_shared(self) -> BaseException | None:
        """Close the components made by :meth:`shared`, newest first (the audit writer
        flushes its queue); returns the first failure, for ``close`` to raise once the
        connections are closed too."""
        error: BaseException | None = None
        with self._shared_lock:
            components, self._shared = list(self._shared.values()), {}
        for component in reversed(components):
            closer = getattr(component, "close", None)
            if closer is None:
                continue
            try:
                closer()
            except Exception as exc:
                error = error or exc
        return error

    def _keep_key(self, w: Any, key: bytes) -> None:
        """Inside ``w``: make ``key`` the redaction key kept in this database (the redactor
        in use changes once ``w`` commits, by the caller; bound as is, not redacted)."""
        w._raw("UPDATE retold_meta SET value = ? WHERE key = 'redaction_key'", [key.hex()])

    # -- dialect hooks ------------------------------------------------------------------

    def _index(self, w: Any, record_id: str) -> None:
        """Add the record's text to the lexical index (in the write)."""

    def _unindex(self, w: Any, record_id: str) -> None:
        """Remove the record's text from the lexical index (in the write, before erasing)."""

    def _lock_for_insert(self, w: Any, scope: Principal, idempotency_key: str | None) -> None:
        """Take the locks a record insert needs before its idempotency check."""

    @property
    def clock(self) -> Clock:
        return self._clock

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self, component: str) -> int:
        rows = self.query("SELECT version FROM retold_schema WHERE component = ?", [component])
        return int(rows[0]["version"]) if rows else 0

    def refuse_untrusted_ambient(
        self, scope: Principal, drafts: Sequence[RecordDraft], *, origin: WriteOrigin, actor: str
    ) -> None:
        """Audit and refuse a write from extraction or a tool call that asks for ambient."""
        if origin not in _UNTRUSTED_ORIGINS:
            return
        if not any(d.activation is Activation.AMBIENT for d in drafts):
            return
        self.append_event(
            scope,
            "record.activation_refused",
            actor=actor,
            data={"origin": origin.value, "requested": "ambient"},
        )
        log.warning("ambient_write_refused", origin=origin.value, tenant=scope.tenant)
        raise InvalidInputError(
            "activation",
            f"a write from {origin.value} cannot set ambient activation; "
            "only the audited activation policy or a reviewer can promote a record",
        )

    def _link_conflict(self, w: WriteTx, scope: Principal, record_id: str, other: str) -> None:
        row = self._require(w, scope, record_id, "conflicts_with")
        links = sorted(set(row.conflicts_with) | {other})
        w.execute(
            "UPDATE records SET conflicts_with = ?, updated_at = ? "
            "WHERE tenant = ? AND principal = ? AND id = ?",
            [json.dumps(links), iso(w.now), scope.tenant, scope.principal, record_id],
        )

    def get(self, scope: Principal, record_id: str) -> Record | None:
        """The record with ``record_id`` in ``scope`` (any lifecycle), or None."""
        return self._fetch(self, scope, record_id)

    def _fetch(
        self, reader: Any, scope: Principal, record_id: str, *, lock: bool = False
    ) -> Record | None:
        rows = reader.query(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE tenant = ? AND principal = ? AND id = ?"
            + (self._row_lock if lock else ""),
            [scope.tenant, scope.principal, record_id],
        )
        return _row_to_record(rows[0]) if rows else None

    def _require(self, w: Any, scope: Principal, record_id: str, field: str) -> Record:
        # Locked (PostgreSQL: FOR UPDATE): two writers superseding or deleting one record
        # serialise on its row.
        record = self._fetch(w, scope, record_id, lock=True)
        if record is None:
            raise InvalidInputError(field, f"no record {record_id!r} in this scope")
        return record

    def add(
        self,
        scope: Principal,
        draft: RecordDraft,
        *,
        origin: WriteOrigin = WriteOrigin.HOST,
        actor: str = "host",
    ) -> Record:
        """Write a new record (redacted) with its index entry and ``record.created`` event.

        If ``draft.supersedes`` names a record, that record is closed (``superseded``) in the
        same transaction. If ``draft.idempotency_key`` is already stored for the principal,
        nothing is written and the stored record is returned.

        Raises:
            InvalidInputError: ambient activation from extraction or a tool call (the attempt
                is audited), or a supersedes/conflict id not found in this scope.
            StoreError: the database refused the write (nothing of it is stored).
        """
        self.refuse_untrusted_ambient(scope, [draft], origin=origin, actor=actor)
        with self.write() as w:
            record = self.insert_record(w, scope, draft, origin=origin, actor=actor)
        log.debug("record_written", record_id=record.id, tenant=scope.tenant)
        return record

    def add_batch(
        self,
        scope: Principal,
        drafts: Sequence[RecordDraft],
        *,
        origin: WriteOrigin = WriteOrigin.HOST,
        actor: str = "host",
        also: Callable[[Any], None] | None = None,
    ) -> list[Record]:
        """Write several records, and whatever ``also`` writes, in one transaction.

        Either every record (with its index entries and events) and ``also``'s rows are
        stored, or none are: a batch killed midway leaves nothing behind. Drafts later in the
        batch may supersede records written earlier in it.
        """
        self.refuse_untrusted_ambient(scope, drafts, origin=origin, actor=actor)
        with self.write() as w:
            records = [self.insert_record(w, scope, d, origin=origin, actor=actor) for d in drafts]
            if also is not None:
                also(w)
        log.debug("records_written", count=len(records), tenant=scope.tenant)
        return records

    def insert_record(
        self, w: Any, scope: Principal, draft: RecordDraft, *, origin: WriteOrigin, actor: str
    ) -> Record:
        """Insert one record inside an open transaction (see :meth:`add` for the semantics).

        For composing a larger atomic write; callers outside a transaction use :meth:`add`.
        An ambient draft from an untrusted origin raises here too, but only :meth:`add`,
        :meth:`add_batch` and :meth:`refuse_untrusted_ambient` audit the attempt (an event
        written inside the caller's transaction would roll back with it).
        """
        if draft.activation is Activation.AMBIENT and origin in _UNTRUSTED_ORIGINS:
            raise InvalidInputError(
                "activation", f"a write from {origin.value} cannot set ambient activation"
            )
        key = None
        if draft.idempotency_key is not None:
            key = w.clean(draft.idempotency_key, scope.tenant)
        self._lock_for_insert(w, scope, key)
        if key is not None:
            rows = w.query(
                f"SELECT {_RECORD_COLUMNS} FROM records WHERE tenant = ? AND principal = ? "
                "AND idempotency_key = ?",
                [scope.tenant, scope.principal, key],
            )
            if rows:
                return _row_to_record(rows[0])
        if draft.supersedes is not None:
            old = self._require(w, scope, draft.supersedes, "supersedes")
            if old.lifecycle in (LifecycleState.DELETED, LifecycleState.SUPERSEDED):
                raise InvalidInputError(
                    "supersedes", f"record {old.id!r} is {old.lifecycle.value} already"
                )
        for other in draft.conflicts_with:
            self._require(w, scope, other, "conflicts_with")
        now = w.now
        record_id = self._new_id()
        body = draft.model_dump(exclude={"supersedes", "idempotency_key"})
        record = Record.model_validate(
            {
                **body,
                "id": record_id,
                "tenant": scope.tenant,
                "principal": scope.principal,
                "idempotency_key": draft.idempotency_key,
                "created_at": now,
                "updated_at": now,
            }
        )
        # Redact before building the row so the returned record equals the stored one.
        record = self._redacted(record, scope.tenant)
        w.insert("records", _record_row(record))
        w.step("record_inserted")
        self._index(w, record.id)
        w.step("fts_indexed")
        w.event(
            scope,
            "record.created",
            actor=actor,
            record_id=record.id,
            data={"origin": origin.value, "kind": record.kind.value},
        )
        if draft.supersedes is not None:
            w.execute(
                "UPDATE records SET lifecycle = 'superseded', superseded_by = ?, updated_at = ? "
                "WHERE tenant = ? AND principal = ? AND id = ?",
                [record.id, iso(now), scope.tenant, scope.principal, draft.supersedes],
            )
            w.step("superseded")
            w.event(
                scope,
                "record.superseded",
                actor=actor,
                record_id=draft.supersedes,
                data={"superseded_by": record.id},
            )
        for other in draft.conflicts_with:
            self._link_conflict(w, scope, other, record.id)
            w.event(
                scope,
                "record.conflict_linked",
                actor=actor,
                record_id=record.id,
                data={"other": other},
            )
        w.step("before_commit")
        return record

    def _redacted(self, record: Record, tenant: str) -> Record:
        r = self.redactor.for_tenant(tenant).redact
        return record.model_copy(
            update={
                "text": r(record.text),
                "speaker": r(record.speaker) if record.speaker else record.speaker,
                "attribute": r(record.attribute) if record.attribute else record.attribute,
                "tags": tuple(r(t) for t in record.tags),
            }
        )

    def delete(self, scope: Principal, record_id: str, *, actor: str = "host") -> Record:
        """Delete a record: its text is erased everywhere; the row and its events stay.

        In one transaction: the lexical index entry goes, the text, speaker and tags are
        erased, the idempotency key is released (it may hold or hash the writer's words,
        and a later add with the same key writes a new record), and the components' purge
        triggers remove what they derived from the text (entity names, vectors).

        Raises:
            InvalidInputError: no such record in ``scope``.
        """
        with self.write() as w:
            record = self._require(w, scope, record_id, "id")
            if record.lifecycle is not LifecycleState.DELETED:
                self._erase(w, scope, record_id, record.lifecycle.value, actor)
            deleted = self._require(w, scope, record_id, "id")
        log.debug("record_deleted", record_id=record_id, tenant=scope.tenant)
        return deleted

    def erase_scope(self, w: Any, scope: Principal, *, actor: str) -> dict[str, int]:
        """Inside the write ``w``: delete every record of ``scope`` and blank its transcript.

        Each record not yet deleted is deleted as :meth:`delete` does (text erased, index
        entry and derived rows purged, one ``record.deleted`` event), and the transcript's
        turns lose their text and speaker. The rows stay, content-free (session, index,
        role, time), as transcript retention leaves them: a session that continues keeps
        counting its turns, so its new turns do not reuse the indexes its decisions keep,
        and a gateway client that resends the erased conversation finds those messages
        held (matched by position) instead of having them recorded again. Returns how many
        records were deleted and turns blanked. :func:`retold.erase_principal` calls it
        and erases what the other components keep, in the same transaction.
        """
        rows = w.query(
            "SELECT id, lifecycle FROM records WHERE tenant = ? AND principal = ? "
            f"AND lifecycle != 'deleted' ORDER BY created_at, id{self._row_lock}",
            [scope.tenant, scope.principal],
        )
        for row in rows:
            self._erase(w, scope, row["id"], row["lifecycle"], actor)
        turns = w.execute(
            "UPDATE transcript_turns SET text = '', speaker = NULL "
            "WHERE tenant = ? AND principal = ? AND (text != '' OR speaker IS NOT NULL)",
            [scope.tenant, scope.principal],
        ).rowcount
        return {"records": len(rows), "transcript_turns": int(turns)}

    def _erase(self, w: Any, scope: Principal, record_id: str, previous: str, actor: str) -> None:
        """Delete the live record ``record_id`` (lifecycle ``previous``) inside ``w``."""
        self._unindex(w, record_id)
        w.execute(
            "UPDATE records SET lifecycle = 'deleted', text = '', speaker = NULL, "
            "tags = '[]', idempotency_key = NULL, updated_at = ? "
            "WHERE tenant = ? AND principal = ? AND id = ?",
            [iso(w.now), scope.tenant, scope.principal, record_id],
        )
        # The erased (empty) text is indexed again, so the index still mirrors the
        # records table row for row (FTS5's integrity check passes).
        self._index(w, record_id)
        w.step("deleted")
        w.event(
            scope, "record.deleted", actor=actor, record_id=record_id, data={"previous": previous}
        )

    def list_records(
        self,
        scope: Principal,
        *,
        lifecycle: Sequence[LifecycleState] | None = (LifecycleState.ACTIVE,),
        activation: Activation | None = None,
        include_expired: bool = False,
        limit: int | None = None,
    ) -> list[Record]:
        """Records in ``scope``, newest first (ties by id).

        By default only active, unexpired records; pass ``lifecycle=None`` for every state.
        """
        where = ["tenant = ?", "principal = ?"]
        params: list[Any] = [scope.tenant, scope.principal]
        if lifecycle is not None:
            states = [LifecycleState(s).value for s in lifecycle]
            where.append(f"lifecycle IN ({', '.join('?' for _ in states)})")
            params.extend(states)
        if activation is not None:
            where.append("activation = ?")
            params.append(activation.value)
        if not include_expired:
            where.append("(expires_at IS NULL OR expires_at > ?)")
            params.append(iso(self._clock()))
        sql = (
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE {' AND '.join(where)} "
            "ORDER BY COALESCE(event_time, created_at) DESC, id"
        )
        if limit is not None:
            if limit < 0:
                raise InvalidInputError("limit", "must be >= 0")
            sql += " LIMIT ?"
            params.append(limit)
        return [_row_to_record(row) for row in self.query(sql, params)]

    def transition(
        self,
        scope: Principal,
        record_id: str,
        lifecycle: LifecycleState,
        *,
        actor: str,
        reason: str = "",
        superseded_by: str | None = None,
    ) -> Record:
        """Move a record to another lifecycle state (``deleted`` goes through :meth:`delete`).

        ``superseded`` needs ``superseded_by``, the id of the record in ``scope`` that
        replaces it (as a write with ``RecordDraft.supersedes`` records it).

        Raises:
            InvalidInputError: no such record, a deleted one, or a missing or unknown successor.
        """
        lifecycle = LifecycleState(lifecycle)
        if lifecycle is LifecycleState.DELETED:
            return self.delete(scope, record_id, actor=actor)
        if (lifecycle is LifecycleState.SUPERSEDED) != (superseded_by is not None):
            raise InvalidInputError(
                "superseded_by", "is required for, and only for, the superseded state"
            )
        with self.write() as w:
            record = self._require(w, scope, record_id, "id")
            if record.lifecycle is LifecycleState.DELETED:
                raise InvalidInputError("id", f"record {record_id!r} is deleted")
            data: dict[str, Any] = {"previous": record.lifecycle.value, "reason": reason}
            if superseded_by is not None:
                self._require(w, scope, superseded_by, "superseded_by")
                data["superseded_by"] = superseded_by
            w.execute(
                "UPDATE records SET lifecycle = ?, superseded_by = ?, updated_at = ? "
                "WHERE tenant = ? AND principal = ? AND id = ?",
                [
                    lifecycle.value,
                    superseded_by,
                    iso(w.now),
                    scope.tenant,
                    scope.principal,
                    record_id,
                ],
            )
            w.event(scope, f"record.{lifecycle.value}", actor=actor, record_id=record_id, data=data)
            return self._require(w, scope, record_id, "id")

    def set_activation(
        self,
        scope: Principal,
        record_id: str,
        activation: Activation,
        *,
        actor: str,
        origin: WriteOrigin,
        data: Mapping[str, Any] | None = None,
    ) -> Record:
        """Change a record's activation and append ``record.activation_changed``.

        Only the activation policy and reviewers may promote to ambient.
        """
        activation = Activation(activation)
        if activation is Activation.AMBIENT and origin not in (
            WriteOrigin.ACTIVATION_POLICY,
            WriteOrigin.REVIEWER,
        ):
            raise UsageError("only the activation policy or a reviewer may set ambient activation")
        with self.write() as w:
            record = self._require(w, scope, record_id, "id")
            if record.activation is not activation:
                w.execute(
                    "UPDATE records SET activation = ?, updated_at = ? "
                    "WHERE tenant = ? AND principal = ? AND id = ?",
                    [activation.value, iso(w.now), scope.tenant, scope.principal, record_id],
                )
                w.event(
                    scope,
                    "record.activation_changed",
                    actor=actor,
                    record_id=record_id,
                    data={
                        "from": record.activation.value,
                        "to": activation.value,
                        "origin": origin.value,
                        **(data or {}),
                    },
                )
            return self._require(w, scope, record_id, "id")

    def _turns(
        self, scope: Principal, where: str, params: list[Any], *, last: int | None = None
    ) -> list[TranscriptTurn]:
        """The turns ``where`` selects, oldest first (with ``last``: only the newest)."""
        sql = (
            "SELECT session_id, turn_index, role, speaker, text, time FROM transcript_turns "
            f"WHERE tenant = ? AND principal = ? AND {where} ORDER BY turn_index"
        )
        args = [scope.tenant, scope.principal, *params]
        if last is None:
            rows = self.query(sql, args)
        else:
            rows = self.query(sql + " DESC LIMIT ?", [*args, last])[::-1]
        return [TranscriptTurn.model_validate(row) for row in rows]

    def get_turn(self, scope: Principal, ref: EvidenceRef) -> TranscriptTurn | None:
        turns = self._turns(
            scope, "session_id = ? AND turn_index = ?", [ref.session_id, ref.turn_index]
        )
        return turns[0] if turns else None

    def append_event(
        self,
        scope: Principal,
        type: str,
        *,
        actor: str,
        record_id: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one audit event in its own transaction."""
        with self.write() as w:
            w.event(scope, type, actor=actor, record_id=record_id, data=data)

    def events(
        self, scope: Principal, *, record_id: str | None = None, type: str | None = None
    ) -> list[Event]:
        """Audit events in ``scope``, oldest first."""
        where, params = ["tenant = ?", "principal = ?"], [scope.tenant, scope.principal]
        if record_id is not None:
            where.append("record_id = ?")
            params.append(record_id)
        if type is not None:
            where.append("type = ?")
            params.append(type)
        rows = self.query(
            "SELECT id, tenant, principal, record_id, type, actor, time, data FROM events "
            f"WHERE {' AND '.join(where)} ORDER BY id",
            params,
        )
        return [Event.model_validate({**row, "data": json.loads(row["data"])}) for row in rows]

    # -- transcript ---------------------------------------------------------------------

    def add_turn(self, scope: Principal, turn: TranscriptTurn) -> TranscriptTurn:
        """Persist one transcript turn (redacted). A turn index is written once per session.

        Raises:
            InvalidInputError: the session already has a turn with this index.
        """
        try:
            with self.write(tenant=scope.tenant) as w:
                return self.insert_turn(w, scope, turn)
        except StoreIntegrityError as exc:
            raise InvalidInputError(
                "turn_index",
                f"session {turn.session_id!r} already has turn {turn.turn_index}",
            ) from exc

    def insert_turn(self, w: Any, scope: Principal, turn: TranscriptTurn) -> TranscriptTurn:
        """Insert one transcript turn inside an open transaction; returns it as stored.

        For composing a larger atomic write (a chat turn's user turn, decision and reply);
        a duplicate index makes the enclosing ``write()`` raise :class:`StoreIntegrityError`
        and the whole transaction rolls back.
        """
        redact = self.redactor.for_tenant(scope.tenant).redact
        clean = turn.model_copy(
            update={
                "text": redact(turn.text),
                "speaker": redact(turn.speaker) if turn.speaker else turn.speaker,
            }
        )
        w.insert(
            "transcript_turns",
            {
                "tenant": scope.tenant,
                "principal": scope.principal,
                "session_id": clean.session_id,
                "turn_index": clean.turn_index,
                "role": clean.role.value,
                "speaker": clean.speaker,
                "text": clean.text,
                "time": iso(clean.time),
            },
        )
        w.step(f"turn_{clean.role.value}")
        return clean

    def turns(
        self, scope: Principal, session_id: str, *, last: int | None = None
    ) -> list[TranscriptTurn]:
        """The session's transcript, oldest first; with ``last``, only its newest ``last``
        turns (one indexed read, however long the session has grown)."""
        session_id = scope_id("session_id", session_id)
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise InvalidInputError("last", "must be an int >= 0 or None")
        return self._turns(scope, "session_id = ?", [session_id], last=last)

    def next_turn_index(self, scope: Principal, session_id: str) -> int:
        session_id = scope_id("session_id", session_id)
        rows = self.query(
            "SELECT COALESCE(MAX(turn_index) + 1, 0) AS n FROM transcript_turns "
            "WHERE tenant = ? AND principal = ? AND session_id = ?",
            [scope.tenant, scope.principal, session_id],
        )
        return int(rows[0]["n"])


class SQLiteStore(_SharedStoreOps):
    """The default store: one SQLite file, no server.

    Args:
        path: database file (created if missing). ``":memory:"`` works for throwaway use.
        clock: returns the current time; inject a fixed clock for reproducible rows.
        id_factory: returns a new record id; inject for reproducible ids.
        redaction_key: key for secret ids; by default a random key is created with the file
            and kept in it, so ids are stable for that store.
        busy_timeout_ms: how long a writer waits for another process's lock. Under a
            :class:`Deadline` (the turn path) every lock wait is clamped to the time left.
        on_write_step: test seam called with a step name at each point inside a write;
            raising from it aborts the write (which must then leave no trace).
        mmap_bytes: how much of the file the pooled read connections (the worker threads'
            reads: retrieval, listings) read through a memory map (SQLite's ``mmap_size``;
            0 reads every page with a system call). Retrieval reads records and index
            pages scattered over the file, so mapping them spares a copy per page (about a
            tenth of a search at 100k records); the pages are the operating system's file
            cache, shared by every connection and process. The event loop's own reads
            (:meth:`query_inline`) and the write connection do not map: a map is redone
            as writes grow the file, and that stalls the other threads of the process for
            a moment, which the turn path's short reads would feel. An I/O error on a mapped
            page is a ``SIGBUS`` instead of an error: pass 0 on storage that can fail
            under a running process (network file systems).

    Reads of a file-backed store run on a small pool of read-only connections, so under
    WAL they never wait for a writer (of this process or another) and never queue behind
    this store's write lock. Writes share one connection, serialised by that lock. Inside a
    write, reads on the writing thread use the write connection (they see its changes).
    """

    dialect = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        id_factory: Callable[[], str] | None = None,
        redaction_key: bytes | None = None,
        busy_timeout_ms: int = 30_000,
        on_write_step: Callable[[str], None] | None = None,
        mmap_bytes: int = DEFAULT_MMAP_BYTES,
    ) -> None:
        if mmap_bytes < 0:
            raise UsageError(f"mmap_bytes must be >= 0, not {mmap_bytes}")
        self.path = str(path)
        self._mmap = int(mmap_bytes)
        self._clock: Clock = clock or _utcnow
        self._new_id = id_factory or _new_id
        self._on_write_step = on_write_step
        self._lock = threading.RLock()
        self._busy_ms = int(busy_timeout_ms)
        self._local = threading.local()
        self._closed = False
        # ``:memory:`` is private to its connection, so such a store reads on its only one.
        self._readers: list[sqlite3.Connection] | None = None if self.location is None else []
        # The event loop's own reads (query_inline) never wait for a lock: their connections
        # are opened with the busy handler off, so no read toggles it.
        self._inline_readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._schema_done: dict[str, int] = {}
        self._shared: dict[str, Any] = {}
        self._shared_lock = threading.Lock()
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path!r}: {exc}") from exc
        self.db = Database(conn)
        self._conn = conn
        self.ensure_schema("core", _CORE_MIGRATIONS)
        self.redactor = Redactor(redaction_key or self._stored_key())
        self.keeps_redaction_key = redaction_key is None

    # -- plumbing -----------------------------------------------------------------------

    @property
    def busy_timeout_ms(self) -> int:
        """How long a write waits for another connection's lock (outside any deadline)."""
        return self._busy_ms

    @property
    def location(self) -> str | None:
        """The database file's absolute path; None in memory."""
        if self.path in ("", ":memory:") or "mode=memory" in self.path:
            return None
        return os.path.abspath(self.path)

    def close(self) -> None:
        """Close the components attached with :meth:`shared` (the audit writer flushes its
        queue), then the connections. A component's failure is raised after everything is
        closed."""
        error = self._close_shared()
        with self._lock:
            self._conn.close()
        with self._readers_lock:
            self._closed = True
            idle, self._readers = self._readers or [], [] if self._readers is not None else None
            idle += self._inline_readers
            self._inline_readers = []
        for conn in idle:
            conn.close()
        if error is not None:
            raise error

    def _acquire(self, deadline: Deadline | None, what: str) -> None:
        """Take the write lock, waiting no longer than ``deadline`` allows."""
        if deadline is None:
            self._lock.acquire()
            return
        left = deadline.remaining()
        if left <= 0 or not self._lock.acquire(timeout=-1 if math.isinf(left) else left):
            raise deadline.exceeded(what)

    @contextmanager
    def write(self, *, tenant: str | None = None) -> Iterator[Writer]:
        """Open a ``BEGIN IMMEDIATE`` transaction; commit on success, roll back on any error.

        Under a :class:`Deadline` the waits for this store's lock and for SQLite's write lock
        are clamped to the time left, and the transaction's statements are interrupted when
        it passes (the transaction then rolls back whole): :class:`DeadlineExceeded`.

        A ``write()`` opened inside another on the same thread joins the outer transaction
        (it commits with it, or rolls back with it), so writes can be composed into one
        atomic unit, e.g. a chat turn's transcript rows and its decision row.
        ``tenant`` selects the redaction key of raw statements (see :class:`Writer`).
        """
        joined: Writer | None = getattr(self._local, "writer", None)
        if joined is not None:
            previous = joined.tenant
            if tenant is not None:
                joined.tenant = tenant
            try:
                yield joined
            finally:
                joined.tenant = previous
            return
        deadline = _ACTIVE_DEADLINE.get()
        self._acquire(deadline, "waiting for the write lock")
        conn = self._conn
        outer = getattr(self._local, "writing", False)
        left_ms = math.inf
        try:
            self._local.writing = True
            try:
                if deadline is not None:
                    conn.set_progress_handler(deadline.passed, _PROGRESS_STEPS)
                    left_ms = deadline.remaining() * 1000
                    if left_ms < self._busy_ms:
                        conn.execute(f"PRAGMA busy_timeout = {max(1, math.ceil(left_ms))}")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                finally:
                    if deadline is not None and left_ms < self._busy_ms:
                        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            except sqlite3.Error as exc:
                # A busy error after a clamped wait is the deadline's doing too.
                clamped = left_ms < self._busy_ms
                if deadline is not None and (deadline.passed() or _interrupted(exc) or clamped):
                    raise deadline.exceeded("waiting for the write lock") from exc
                raise StoreError(f"cannot start a write transaction: {exc}") from exc
            try:
                writer = Writer(self, tenant)
                self._local.writer = writer
                yield writer
                conn.execute("COMMIT")
            except BaseException as exc:
                # An interrupted statement may already have rolled the transaction back.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                driver = _sqlite_cause(exc)
                if deadline is not None and driver is not None:
                    if _interrupted(driver) or deadline.passed():
                        raise deadline.exceeded("a write") from exc
                if isinstance(exc, sqlite3.Error):
                    raise store_error("a write", exc) from exc
                raise
        finally:
            self._local.writer = None
            if deadline is not None:
                conn.set_progress_handler(None, 0)
            self._local.writing = outer
            self._lock.release()

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Run a read-only query and return its rows as dicts.

        Under a :class:`Deadline` the statement is interrupted when the deadline passes and
        :class:`DeadlineExceeded` is raised; a deadline already past raises before any SQL.
        """
        deadline = _ACTIVE_DEADLINE.get()
        if deadline is not None and deadline.passed():
            raise deadline.exceeded("a read")
        if self._readers is None or getattr(self._local, "writing", False):
            self._acquire(deadline, "waiting for the store lock")
            try:
                # Inside a write the write's own progress handler already applies.
                bound = None if getattr(self._local, "writing", False) else deadline
                return self._run(self._conn, sql, params, bound)
            finally:
                self._lock.release()
        conn = self._reader()
        try:
            return self._run(conn, sql, params, deadline)
        finally:
            self._give_back(conn)

    def query_inline(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, within_s: float
    ) -> list[dict[str, Any]] | None:
        """Run a small read on the calling thread, if it finishes in ``within_s`` without waiting.

        For the event loop's own short reads on the turn path (the inventory, candidate
        verification), where handing the read to a worker thread costs more than the read:
        it never waits for a lock (its pooled connections have SQLite's busy handler off, and this
        store's own lock is only tried), and the statement is interrupted after
        ``within_s`` or at the context's :class:`Deadline`, whichever comes first.

        Returns:
            The rows as dicts, or None when the read could not finish that way (a lock was
            busy, or the time ran out): run :meth:`query` on a worker thread instead.

        Raises:
            DeadlineExceeded: the context's deadline passed (before or during the read).
        """
        outer = _ACTIVE_DEADLINE.get()
        if outer is not None and outer.passed():
            raise outer.exceeded("a read")
        limit = Deadline.after(within_s, parent=outer)
        writing = getattr(self._local, "writing", False)
        pooled = self._readers is not None and not writing
        if pooled:
            conn = self._reader(inline=True)
        elif self._lock.acquire(blocking=False):
            conn = self._conn
        else:
            return None
        cursor: sqlite3.Cursor | None = None
        try:
            if not writing:
                # Inside a write the write's own progress handler and lock already apply.
                conn.set_progress_handler(limit.passed, _INLINE_PROGRESS_STEPS)
                if not pooled:
                    conn.execute("PRAGMA busy_timeout = 0")
            cursor = conn.execute(sql, params)
            keys = [d[0] for d in cursor.description or ()]
            return [dict(zip(keys, row, strict=True)) for row in cursor.fetchall()]
        except sqlite3.OperationalError as exc:
            if outer is not None and outer.passed():
                raise outer.exceeded("a read") from exc
            if _interrupted(exc) or _busy(exc):
                return None
            raise
        finally:
            if cursor is not None:
                cursor.close()
            if not writing:
                conn.set_progress_handler(None, 0)
                if not pooled:
                    conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            if pooled:
                self._give_back(conn, inline=True)
            else:
                self._lock.release()

    def query_tuples(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Like :meth:`query` (same locking and deadline), as plain tuples: for hot read
        paths such as vector and id scans, where building a dict per row is the cost."""
        return cast("list[tuple[Any, ...]]", self._read(sql, params, tuples=True))

    def _read(self, sql: str, params: Sequence[Any] | dict[str, Any], *, tuples: bool) -> list[Any]:
        deadline = _ACTIVE_DEADLINE.get()
        if deadline is not None and deadline.passed():
            raise deadline.exceeded("a read")
        if self._readers is None or getattr(self._local, "writing", False):
            self._acquire(deadline, "waiting for the store lock")
            try:
                bound = None if getattr(self._local, "writing", False) else deadline
                return self._run(self._conn, sql, params, bound, tuples=tuples)
            finally:
                self._lock.release()
        conn = self._reader()
        try:
            return self._run(conn, sql, params, deadline, tuples=tuples)
        finally:
            self._give_back(conn)

    def _run(
        self,
        conn: sqlite3.Connection,
        sql: str,
        params: Sequence[Any] | dict[str, Any],
        deadline: Deadline | None,
        *,
        tuples: bool = False,
    ) -> list[Any]:
        clamped = False
        cursor: sqlite3.Cursor | None = None
        try:
            if deadline is not None:
                conn.set_progress_handler(deadline.passed, _PROGRESS_STEPS)
                # A reader can wait for a lock too (another process in exclusive locking
                # mode, WAL recovery), and no progress handler runs while it waits.
                left_ms = deadline.remaining() * 1000
                if left_ms < self._busy_ms:
                    clamped = True
                    conn.execute(f"PRAGMA busy_timeout = {max(1, math.ceil(left_ms))}")
            cursor = conn.execute(sql, params)
            if tuples:
                return list(cursor.fetchall())
            keys = [d[0] for d in cursor.description or ()]
            return [dict(zip(keys, row, strict=True)) for row in cursor.fetchall()]
        except sqlite3.Error as exc:
            if deadline is not None and (
                _interrupted(exc) or deadline.passed() or (clamped and _busy(exc))
            ):
                raise deadline.exceeded("a read") from exc
            raise store_error("a read", exc) from exc
        finally:
            if cursor is not None:
                cursor.close()
            if deadline is not None:
                conn.set_progress_handler(None, 0)
                if clamped:
                    conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    def _reader(self, *, inline: bool = False) -> sqlite3.Connection:
        """An idle read connection of the pool (``inline``: of the no-wait pool), or a new one."""
        with self._readers_lock:
            if self._closed:
                raise StoreError("the store is closed")
            idle = self._inline_readers if inline else self._readers
            if idle:
                return idle.pop()
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=0 if inline else self._busy_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA query_only = ON")
            if not inline:
                conn.execute(f"PRAGMA mmap_size = {self._mmap}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open a read connection to {self.path!r}: {exc}") from exc
        return conn

    def _give_back(self, conn: sqlite3.Connection, *, inline: bool = False) -> None:
        with self._readers_lock:
            if not self._closed and self._readers is not None:
                idle = self._inline_readers if inline else self._readers
                if len(idle) < _MAX_IDLE_READERS:
                    idle.append(conn)
                    return
        conn.close()

    def ensure_schema(self, component: str, migrations: Sequence[str]) -> None:
        """Apply the not-yet-applied migrations of ``component``, each in one transaction.

        Components (core, retrieval, profile, audit, ...) version their tables separately, so
        a module can own its schema. Safe to call from several processes at once.
        """
        if self._schema_done.get(component, -1) >= len(migrations):
            # Already checked by this store: no SQL, and no write lock taken (this runs on
            # the turn path, e.g. before every entity search).
            return
        with self._lock:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS retold_schema "
                "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            for version, script in enumerate(migrations, start=1):
                with self.write() as w:
                    row = w.query(
                        "SELECT version FROM retold_schema WHERE component = ?", [component]
                    )
                    current = row[0]["version"] if row else 0
                    if current >= version:
                        continue
                    for statement in _split_sql(script):
                        self._conn.execute(statement)
                    self._conn.execute(
                        "INSERT INTO retold_schema (component, version) VALUES (?, ?) "
                        "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                        [component, version],
                    )
                    log.debug("schema_migrated", component=component, version=version)
            self._schema_done[component] = len(migrations)

    def vacuum(self) -> None:
        """Remove every stored copy of erased text from the database file and its WAL.

        Deletion erases a record's text and its lexical index entry in one transaction, so
        nothing reads or matches it again; but FTS5 keeps a deleted entry's words in its
        index segments until they merge (SQLite 3.40 has no FTS5 ``secure-delete``), and
        the WAL keeps pages as they were until a checkpoint. This merges the lexical index
        into one segment (FTS5 ``optimize``, which drops deleted entries), then checkpoints
        the WAL into the file and truncates it. Freed pages are zeroed (the store runs with
        ``secure_delete`` on), so afterwards no copy of erased text is left in either file.
        The merge rewrites the whole lexical index under the write lock: run it off peak.

        Raises:
            StoreError: another connection kept reading, so the WAL could not be emptied
                (the merge is committed; call it again).
        """
        with self.write() as w:
            w.execute("INSERT INTO records_fts (records_fts) VALUES ('optimize')")
        with self._lock:
            try:
                busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as exc:
                raise StoreError(f"vacuum: the WAL checkpoint failed: {exc}") from exc
        if busy:
            raise StoreError(
                "vacuum: another connection was reading, so the WAL still holds old pages; "
                "call vacuum() again when it is idle"
            )

    def check_integrity(self) -> list[str]:
        """Run SQLite's ``integrity_check`` and FTS5's index-against-table check.

        Returns the problems found (empty when both pass).
        """
        problems: list[str] = []
        with self._lock:
            rows = self._conn.execute("PRAGMA integrity_check").fetchall()
            problems.extend(str(r[0]) for r in rows if r[0] != "ok")
            try:
                self._conn.execute(
                    "INSERT INTO records_fts (records_fts, rank) VALUES ('integrity-check', 1)"
                )
            except sqlite3.DatabaseError as exc:
                problems.append(f"records_fts: {exc}")
        return problems

    def _stored_key(self) -> bytes:
        with self._lock:
            with self.write():
                self._conn.execute(
                    "INSERT OR IGNORE INTO retold_meta (key, value) VALUES ('redaction_key', ?)",
                    [secrets.token_hex(32)],
                )
            row = self.query("SELECT value FROM retold_meta WHERE key = 'redaction_key'")
            return bytes.fromhex(row[0]["value"])

    # -- records ------------------------------------------------------------------------

    def search(
        self, scope: Principal, query: str, *, limit: int = 20
    ) -> list[tuple[Record, float]]:
        """BM25 full-text search over live records in ``scope``; best first, equal scores
        newest written first.

        Scores are FTS5 ``bm25()`` negated, so higher is better.
        """
        match = fts_query(query)
        if match is None or limit <= 0:
            return []
        rows = self.query(
            f"SELECT {', '.join('r.' + c.strip() for c in _RECORD_COLUMNS.split(','))}, "
            f"-{BM25} AS score "
            "FROM records_fts JOIN records r ON r.rowid = records_fts.rowid "
            "WHERE records_fts MATCH ? AND r.tenant = ? AND r.principal = ? "
            "AND r.lifecycle = 'active' AND r.superseded_by IS NULL "
            "AND (r.expires_at IS NULL OR r.expires_at > ?) "
            "ORDER BY score DESC, r.rowid DESC LIMIT ?",
            [scoped_match(scope, match), scope.tenant, scope.principal, iso(self._clock()), limit],
        )
        return [(_row_to_record(row), float(row["score"])) for row in rows]

    def _index(self, w: _WriterBase, record_id: str) -> None:
        w.execute(
            "INSERT INTO records_fts (rowid, text, fts_scope) "
            "SELECT rowid, text, fts_scope FROM records WHERE id = ?",
            [record_id],
        )

    def _unindex(self, w: _WriterBase, record_id: str) -> None:
        w.execute(
            "INSERT INTO records_fts (records_fts, rowid, text, fts_scope) "
            "SELECT 'delete', rowid, text, fts_scope FROM records WHERE id = ?",
            [record_id],
        )


def _record_row(record: Record) -> dict[str, Any]:
    data = record.model_dump(mode="json")
    for key in ("event_time", "valid_from", "valid_to", "expires_at", "created_at", "updated_at"):
        data[key] = iso(getattr(record, key))
    for key in ("conflicts_with", "evidence", "tags"):
        data[key] = json.dumps(data[key], sort_keys=True)
    return data


def _split_sql(script: str) -> list[str]:
    """Split a migration script into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buf: list[str] = []
    for line in script.strip().splitlines():
        buf.append(line)
        joined = "\n".join(buf).strip()
        if joined.endswith(";") and sqlite3.complete_statement(joined):
            statements.append(joined)
            buf = []
    if "\n".join(buf).strip():
        statements.append("\n".join(buf).strip())
    return statements


def draft_from(data: Mapping[str, Any]) -> RecordDraft:
    """Validate a write payload; raises :class:`InvalidInputError` naming the bad field."""
    try:
        return RecordDraft.model_validate(dict(data))
    except ValidationError as exc:
        raise InvalidInputError.from_validation_error(exc) from exc


class AsyncStore:
    """Async facade over a :class:`Store`: every call runs in a worker thread.

    The event loop never blocks on SQLite. Calls are not abandoned on cancellation: a write
    that has started finishes (or rolls back) before the cancellation is delivered, so a
    cancelled caller never leaves a partial row or a held lock.
    """

    def __init__(self, store: Store) -> None:
        self.sync = store

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run any blocking store function in a worker thread."""
        return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))

    async def add(self, scope: Principal, draft: RecordDraft, **kw: Any) -> Record:
        return await self.run(self.sync.add, scope, draft, **kw)

    async def get(self, scope: Principal, record_id: str) -> Record | None:
        return await self.run(self.sync.get, scope, record_id)

    async def list_records(self, scope: Principal, **kw: Any) -> list[Record]:
        return await self.run(self.sync.list_records, scope, **kw)

    async def search(
        self, scope: Principal, query: str, *, limit: int = 20
    ) -> list[tuple[Record, float]]:
        return await self.run(self.sync.search, scope, query, limit=limit)

    async def delete(self, scope: Principal, record_id: str, *, actor: str = "host") -> Record:
        return await self.run(self.sync.delete, scope, record_id, actor=actor)

    async def vacuum(self) -> None:
        await self.run(self.sync.vacuum)

    async def add_turn(self, scope: Principal, turn: TranscriptTurn) -> TranscriptTurn:
        return await self.run(self.sync.add_turn, scope, turn)

    async def turns(
        self, scope: Principal, session_id: str, *, last: int | None = None
    ) -> list[TranscriptTurn]:
        return await self.run(self.sync.turns, scope, session_id, last=last)

    async def append_event(self, scope: Principal, type: str, **kw: Any) -> None:
        await self.run(self.sync.append_event, scope, type, **kw)

    async def events(self, scope: Principal, **kw: Any) -> list[Event]:
        return await self.run(self.sync.events, scope, **kw)
