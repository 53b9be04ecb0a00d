"""``PostgresStore``: the shared, multi-worker store (the ``postgres`` extra, psycopg 3).

Same contract as :class:`~retold.SQLiteStore` (see :class:`~retold.Store`): every query
filters on the trusted :class:`~retold.Principal` in SQL (CTI-1); every bound string passes
the same :class:`~retold.Redactor` before it leaves the process (SR-1), so a secret never
reaches the server, its WAL or its data files; ``events`` is append-only (a trigger refuses
UPDATE, DELETE and TRUNCATE); idempotency keys and transcript turn indexes are UNIQUE
constraints; supersession, index maintenance and events commit in one transaction; deletion
erases the text, and the generated ``tsvector`` follows it in the same statement (dead row
versions and GIN pages keep bytes until :meth:`PostgresStore.vacuum`); schemas are
versioned per component under an advisory lock.

Sync API over a connection pool, on purpose: the :class:`~retold.Store` protocol and every
component that composes writes with it (retrieval, audit, activation, extraction) are
synchronous and run through :class:`~retold.AsyncStore` in worker threads. With a pool, each
worker thread holds its own connection, so concurrent calls run in parallel on the server
(SQLite serialises them on one lock). An async-only store would need a second async API in
every component; the thread offload costs one thread hop per call, which is small next to a
network round trip. Every wait is bounded: pool checkout (``pool_timeout_s``), connect
(``connect_timeout_s``), statements and lock waits (``statement_timeout_ms``).

Lexical search (``search()``, and the retrieval lexical stage through :meth:`PostgresStore.bm25`)
is Okapi BM25 with FTS5's constants and formula, computed in SQL over a generated
``tsvector`` column with a GIN index; its collection statistics are kept per scope
(``lexical_stats``), so no other tenant's data moves a score. The text search configuration
``retold`` stems like FTS5's porter tokenizer (Snowball English) and keeps stop words (FTS5
has none). Components' SQLite-style DDL, row triggers included, is spelled for PostgreSQL
by :func:`adapt_ddl`; the few queries that cannot be portable go through
:mod:`retold._retrieval_sql`. Driver errors are raised as :class:`~retold.StoreError`
(:class:`~retold.StoreIntegrityError` for integrity violations), as SQLiteStore raises them.
"""

from __future__ import annotations

import math
import re
import secrets
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import structlog

from ._deadline import Deadline, current_deadline
from ._errors import InvalidInputError, StoreError, UsageError, store_error
from ._records import (
    Principal,
    Record,
)
from ._redaction import Redactor
from ._store import (
    _RECORD_COLUMNS,
    _row_to_record,
    _SharedStoreOps,
    _WriterBase,
    iso,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStore", "PostgresWriter", "pg_sql"]

log = structlog.get_logger(__name__)

Clock = Callable[[], datetime]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_BM25_K1 = 1.2
_BM25_B = 0.75
#: A lexical query made only of common words scores its newest matches among the scope's
#: newest this many times ``lexical_common_postings`` live rows (see :meth:`PostgresStore.bm25`).
NEWEST_WINDOW = 4
#: A query text's stems (as the ``text_tsv`` column stems), one row each: the ``FROM`` of
#: :data:`_ANY_STEM`, whose ``?`` is the text.
_STEMS_OF = "unnest(to_tsvector('retold', ?::text))"
#: The tsquery matching any of those stems (NULL when the text has none).
_ANY_STEM = "string_agg(DISTINCT quote_literal(lexeme), ' | ')::tsquery"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return "r" + uuid.uuid4().hex


def pg_sql(sql: str) -> str:
    """Translate the store's portable SQL (``?`` placeholders) to psycopg's ``%s`` style.

    ``?`` outside string literals becomes ``%s``; every ``%`` is doubled so a ``LIKE '%x'``
    literal survives psycopg's parameter parsing. Values are always sent as server-side
    parameters, never spliced into the text.
    """
    out: list[str] = []
    in_literal = False
    for ch in sql:
        if ch == "'":
            in_literal = not in_literal
            out.append(ch)
        elif ch == "%":
            out.append("%%")
        elif ch == "?" and not in_literal:
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


# Text columns are COLLATE "C" so ORDER BY and comparisons of ids and ISO timestamps are
# byte order, as in SQLite, whatever the cluster's default collation.
_CORE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE retold_meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);

    CREATE TEXT SEARCH DICTIONARY retold_stem (TEMPLATE = snowball, Language = english);
    CREATE TEXT SEARCH CONFIGURATION retold (COPY = english);
    ALTER TEXT SEARCH CONFIGURATION retold
        ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
        WITH retold_stem;

    CREATE FUNCTION retold_doclen(tsvector) RETURNS integer
        LANGUAGE sql IMMUTABLE PARALLEL SAFE
        AS $$ SELECT COALESCE(SUM(COALESCE(array_length(positions, 1), 1)), 0)::integer
              FROM unnest($1) $$;

    CREATE TABLE records (
        rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        tenant TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,
        text TEXT NOT NULL,
        activation TEXT COLLATE "C" NOT NULL DEFAULT 'conditional',
        lifecycle TEXT COLLATE "C" NOT NULL,
        epistemic TEXT COLLATE "C" NOT NULL,
        confidence DOUBLE PRECISION NOT NULL,
        source_type TEXT COLLATE "C" NOT NULL,
        speaker TEXT,
        event_time TEXT COLLATE "C",
        valid_from TEXT COLLATE "C",
        valid_to TEXT COLLATE "C",
        expires_at TEXT COLLATE "C",
        superseded_by TEXT COLLATE "C",
        conflicts_with TEXT NOT NULL DEFAULT '[]',
        evidence TEXT NOT NULL DEFAULT '[]',
        attribute TEXT,
        tags TEXT NOT NULL DEFAULT '[]',
        session_id TEXT COLLATE "C",
        idempotency_key TEXT COLLATE "C",
        created_at TEXT COLLATE "C" NOT NULL,
        updated_at TEXT COLLATE "C" NOT NULL,
        text_tsv tsvector GENERATED ALWAYS AS (to_tsvector('retold', text)) STORED,
        text_len integer GENERATED ALWAYS AS
            (retold_doclen(to_tsvector('retold', text))) STORED,
        UNIQUE (tenant, principal, idempotency_key)
    );
    CREATE INDEX records_scope ON records (tenant, principal, lifecycle, created_at);
    CREATE INDEX records_tsv ON records USING GIN (text_tsv);

    CREATE TABLE transcript_turns (
        tenant TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        session_id TEXT COLLATE "C" NOT NULL,
        turn_index INTEGER NOT NULL,
        role TEXT NOT NULL,
        speaker TEXT,
        text TEXT NOT NULL,
        time TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (tenant, principal, session_id, turn_index)
    );

    CREATE TABLE events (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        record_id TEXT COLLATE "C",
        type TEXT COLLATE "C" NOT NULL,
        actor TEXT NOT NULL,
        time TEXT COLLATE "C" NOT NULL,
        data TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_scope ON events (tenant, principal, record_id);
    CREATE FUNCTION retold_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'events are append-only' USING ERRCODE = 'integrity_constraint_violation';
    END $$;
    CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
        FOR EACH ROW EXECUTE FUNCTION retold_events_append_only();
    CREATE TRIGGER events_append_only_truncate BEFORE TRUNCATE ON events
        FOR EACH STATEMENT EXECUTE FUNCTION retold_events_append_only();
    """,
    # SQLite's instr(), so components' portable SQL (conflict-link lookups) runs unchanged.
    """
    CREATE FUNCTION instr(text, text) RETURNS integer
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT strpos($1, $2) $$;
    """,
    # Watermark reads (entity and embedding indexing) scan a scope's rows after a rowid.
    """
    CREATE INDEX records_scope_rowid ON records (tenant, principal, rowid);
    """,
    # BM25's collection statistics per scope, kept as FTS5 keeps its own: every record
    # written counts, a deleted one with its erased (empty) text. Rows are added by
    # PostgresStore._lexical_stats as they are read (a watermark, like entity indexing);
    # a text change of a counted row (deletion) adjusts the total in its own transaction.
    """
    CREATE TABLE lexical_stats (
        tenant TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        last_rowid BIGINT NOT NULL,
        docs BIGINT NOT NULL,
        total_len BIGINT NOT NULL,
        PRIMARY KEY (tenant, principal)
    );
    CREATE FUNCTION retold_lexical_stats_text() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE lexical_stats SET total_len = total_len - OLD.text_len + NEW.text_len
            WHERE tenant = NEW.tenant AND principal = NEW.principal
            AND last_rowid >= NEW.rowid;
        RETURN NULL;
    END $$;
    CREATE TRIGGER lexical_stats_text AFTER UPDATE OF text ON records
        FOR EACH ROW WHEN (OLD.text_len IS DISTINCT FROM NEW.text_len)
        EXECUTE FUNCTION retold_lexical_stats_text();
    """,
)


# The portable subset of SQLite DDL the components write, and its PostgreSQL spelling:
# a component that keeps to it (TEXT/INTEGER/REAL/BLOB columns, AUTOINCREMENT keys, plain
# and partial indexes, row triggers whose body is plain SQL) needs no second copy of its
# migrations. TEXT columns get COLLATE "C", so comparisons and ORDER BY are byte order, as
# in SQLite, whatever the cluster's default collation (type names are matched in upper
# case only, so a column called ``text`` keeps its name).
_DDL_ADAPTATIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\s+AUTOINCREMENT\b", re.I),
        "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bBLOB\b", re.I), "BYTEA"),
    (re.compile(r"\bREAL\b", re.I), "DOUBLE PRECISION"),
    (re.compile(r"\bTEXT\b(?!\s+(?:COLLATE|SEARCH)\b)"), 'TEXT COLLATE "C"'),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),  # SQLite's INTEGER holds 64 bits
)

_CREATE_TABLE = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s*\(", re.I)
_WITHOUT_ROWID = re.compile(r"\s*WITHOUT\s+ROWID", re.I)
_NAMES_ROWID = re.compile(r"\browid\b", re.I)
_CREATE_TRIGGER = re.compile(
    r"CREATE\s+TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>\w+)\s+"
    r"(?P<when>BEFORE|AFTER)\s+(?P<event>[^;]+?)\s+ON\s+(?P<table>\w+)\s+"
    r"(?:FOR\s+EACH\s+ROW\s+)?(?:WHEN\s+(?P<cond>[^;]+?)\s+)?"
    r"BEGIN\b(?P<body>.*?)\bEND\s*;",
    re.I | re.S,
)
_DROP_TRIGGER = re.compile(r"DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(?P<name>\w+)\s*;", re.I)
_RAISE_ABORT = re.compile(r"SELECT\s+RAISE\s*\(\s*ABORT\s*,\s*('(?:[^']|'')*')\s*\)", re.I)


def _trigger(match: re.Match[str]) -> str:
    # A SQLite row trigger becomes a PL/pgSQL trigger function (the body's statements run
    # as they are: NEW and OLD mean the same) and a FOR EACH ROW trigger calling it.
    name, table = match["name"], match["table"]
    body = _RAISE_ABORT.sub(r"RAISE EXCEPTION \1", match["body"]).strip()
    cond = f" WHEN ({match['cond'].strip()})" if match["cond"] else ""
    return (
        f"CREATE OR REPLACE FUNCTION retold_trigger_{name}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $retold$ BEGIN {body} "
        "IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $retold$;\n"
        f"CREATE TRIGGER {name} {match['when'].upper()} {match['event'].strip()} ON {table} "
        f"FOR EACH ROW{cond} EXECUTE FUNCTION retold_trigger_{name}();"
    )


def _drop_trigger(match: re.Match[str]) -> str:
    # PostgreSQL names a trigger per table; SQLite's DROP TRIGGER names none. The table is
    # looked up in the current schema (each schema may hold its own copy of the trigger).
    name = match["name"]
    return (
        "DO $retold$ DECLARE t text; BEGIN "
        "SELECT format('%I.%I', n.nspname, c.relname) INTO t FROM pg_trigger g "
        "JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE g.tgname = '{name}' AND n.nspname = current_schema(); "
        f"IF t IS NOT NULL THEN EXECUTE format('DROP TRIGGER {name} ON %s', t); END IF; "
        "END $retold$;"
    )


def adapt_ddl(script: str) -> str:
    """SQLite-flavoured DDL (the portable subset) spelled for PostgreSQL.

    A table without an integer key gets SQLite's implicit ``rowid`` as an identity column
    (so ``ORDER BY rowid`` keeps meaning write order), and :meth:`PostgresStore.query`
    hides it from ``SELECT *`` as SQLite does; a ``WITHOUT ROWID`` table gets none. Row
    triggers (``CREATE TRIGGER ... BEGIN ...; END``) become PL/pgSQL trigger functions, and
    ``DROP TRIGGER`` finds the trigger's table in the current schema.
    """
    triggers: list[str] = []

    def keep(match: re.Match[str]) -> str:
        triggers.append(_trigger(match))
        return f"\x00{len(triggers) - 1}\x00"

    # Trigger bodies are plain SQL that the column-type rewrites must not touch.
    script = _CREATE_TRIGGER.sub(keep, script)
    script = _DROP_TRIGGER.sub(_drop_trigger, script)
    for pattern, replacement in _DDL_ADAPTATIONS:
        script = pattern.sub(replacement, script)
    out: list[str] = []
    pos = 0
    for match in _CREATE_TABLE.finditer(script):
        depth, end = 1, match.end()
        while end < len(script) and depth:
            depth += {"(": 1, ")": -1}.get(script[end], 0)
            end += 1
        body = script[match.end() : end]
        out.append(script[pos : match.end()])
        without_rowid = _WITHOUT_ROWID.match(script, end)
        if not without_rowid and not re.search(r"\bIDENTITY\b|\browid\b", body, re.I):
            out.append("rowid BIGINT GENERATED ALWAYS AS IDENTITY, ")
        out.append(body)
        pos = without_rowid.end() if without_rowid else end
    out.append(script[pos:])
    script = "".join(out)
    return re.sub("\x00(\\d+)\x00", lambda m: triggers[int(m[1])], script)


def _rows(sql: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # SQLite's rowid is hidden unless a query names it; ours is a real column.
    if rows and "rowid" in rows[0] and not _NAMES_ROWID.search(sql):
        for row in rows:
            del row["rowid"]
    return rows


def _configure_connection(conn: Any) -> None:
    # SQLite stores Python bools as 0/1 in INTEGER columns, and the components bind bools
    # to such columns; send them to PostgreSQL as integers too.
    from psycopg.types.numeric import Int8Dumper

    class _BoolAsInt(Int8Dumper):
        def dump(self, obj: Any) -> bytes:
            return b"1" if obj else b"0"

    conn.adapters.register_dumper(bool, _BoolAsInt)


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UsageError(
            "PostgresStore needs the 'postgres' extra: pip install 'retold[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class PostgresWriter(_WriterBase):
    """The write side of one open PostgreSQL transaction (see ``_WriterBase`` for SR-1)."""

    def __init__(
        self, store: PostgresStore, conn: psycopg.Connection[Any], tenant: str | None = None
    ) -> None:
        self._store = store
        self._conn = conn
        self.tenant = tenant  # selects the per-tenant redaction key of raw statements
        self.now = store.clock()

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] = (),
        *,
        tenant: str | None = None,
    ) -> Any:
        """Run one statement inside the transaction with redacted parameters."""
        if isinstance(params, Mapping):
            raise UsageError("PostgresStore takes positional '?' parameters, not a mapping")
        return self._conn.execute(pg_sql(sql), self._clean(params, tenant))

    def _execute_many(self, sql: str, params: list[list[Any]]) -> None:
        # psycopg pipelines executemany: one round trip for the batch, not one per row.
        with self._conn.cursor() as cur:
            cur.executemany(pg_sql(sql), params)

    def _raw(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # Schema and key bookkeeping only (values that are not user data); no redaction.
        return self._conn.execute(pg_sql(sql), list(params))

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[dict[str, Any]]:
        """Read inside the transaction (sees its uncommitted writes)."""
        if isinstance(params, Mapping):
            raise UsageError("PostgresStore takes positional '?' parameters, not a mapping")
        return _rows(sql, list(self._conn.execute(pg_sql(sql), list(params)).fetchall()))


class PostgresStore(_SharedStoreOps):
    """A store in a PostgreSQL database, shared by many processes and workers.

    Args:
        url: a ``postgresql://`` (or ``postgres://``) connection URL.
        schema: PostgreSQL schema to keep the tables in (created if missing); by default the
            connection's ``search_path`` decides (normally ``public``).
        clock: returns the current time; inject a fixed clock for reproducible rows.
        id_factory: returns a new record id; inject for reproducible ids.
        redaction_key: key for secret ids; by default a random key is created with the
            database and kept in it, so ids are stable for that store.
        pool_size: most connections this store holds at once.
        pool_timeout_s: longest wait for a free pooled connection.
        connect_timeout_s: longest wait to open one connection.
        statement_timeout_ms: longest run of one statement, lock waits included.
        on_write_step: test seam called with a step name at each point inside a write;
            raising from it aborts the write (which must then leave no trace).

    Raises:
        UsageError: the ``postgres`` extra is missing or ``schema`` is not a plain name.
        StoreError: the database cannot be reached or migrated.
    """

    dialect = "postgresql"
    _row_lock = " FOR UPDATE"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        id_factory: Callable[[], str] | None = None,
        redaction_key: bytes | None = None,
        pool_size: int = 8,
        pool_timeout_s: float = 30.0,
        connect_timeout_s: int = 10,
        statement_timeout_ms: int = 30_000,
        on_write_step: Callable[[str], None] | None = None,
    ) -> None:
        psycopg, psycopg_pool = _psycopg()
        from psycopg.rows import dict_row

        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise InvalidInputError("schema", "must be a lower-case SQL name ([a-z_][a-z0-9_]*)")
        self.url = url
        self.schema = schema
        self._clock: Clock = clock or _utcnow
        self._new_id = id_factory or _new_id
        self._on_write_step = on_write_step
        self._local = threading.local()
        self._ensured: dict[str, int] = {}
        self._shared: dict[str, Any] = {}
        self._shared_lock = threading.Lock()
        self._statement_timeout_ms = int(statement_timeout_ms)
        self._pool_timeout_s = float(pool_timeout_s)
        options = f"-c statement_timeout={int(statement_timeout_ms)} -c lock_timeout={int(statement_timeout_ms)}"
        options += f" -c idle_in_transaction_session_timeout={int(statement_timeout_ms) * 2}"
        # psycopg prepares a statement run 5 times; PostgreSQL's generic plan for it then
        # guesses at range and list parameters (a watermark's ``rowid > ?`` scanned the whole
        # scope: 7 ms instead of 0.1). Plan each execution with its parameters instead.
        options += " -c plan_cache_mode=force_custom_plan"
        if schema is not None:
            options += f" -c search_path={schema}"
        try:
            self._pool: ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=max(1, pool_size),
                timeout=pool_timeout_s,
                kwargs={
                    "autocommit": True,
                    "row_factory": dict_row,
                    "connect_timeout": int(connect_timeout_s),
                    "options": options,
                },
                open=False,
                name="retold",
                configure=_configure_connection,
            )
            self._pool.open(wait=True, timeout=pool_timeout_s)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StoreError(f"cannot open PostgreSQL database {_safe_url(url)!r}: {exc}") from exc
        try:
            if schema is not None:
                self._create_schema(schema)
            self.ensure_schema("core", _CORE_MIGRATIONS)
            self.redactor = Redactor(redaction_key or self._stored_key())
            self.keeps_redaction_key = redaction_key is None
        except BaseException:
            self._pool.close()
            raise

    def _create_schema(self, schema: str) -> None:
        from psycopg import sql

        try:
            with self.write() as w:
                w._raw("SELECT pg_advisory_xact_lock(?)", [_lock_key("schema:" + schema)])
                w._conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
        except StoreError as exc:
            raise StoreError(f"cannot create schema {schema!r}: {exc}") from exc.__cause__

    # -- plumbing -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the components attached with :meth:`shared` (the audit writer flushes its
        queue), then the connection pool. A component's failure is raised after both."""
        error = self._close_shared()
        self._pool.close()
        if error is not None:
            raise error

    @contextmanager
    def _connection(self, deadline: Deadline | None = None) -> Iterator[psycopg.Connection[Any]]:
        current = getattr(self._local, "conn", None)
        if current is not None:
            yield current
            return
        _, psycopg_pool = _psycopg()
        wait = self._pool_timeout_s
        if deadline is not None:
            wait = max(0.001, min(wait, deadline.remaining()))
        try:
            cm = self._pool.connection(timeout=wait)
            conn = cm.__enter__()
        except psycopg_pool.PoolTimeout as exc:
            if deadline is not None and deadline.passed():
                raise deadline.exceeded("waiting for a connection") from exc
            raise StoreError(
                f"no PostgreSQL connection free within the pool timeout: {exc}"
            ) from exc
        try:
            yield conn
        except BaseException as exc:
            cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        else:
            cm.__exit__(None, None, None)

    @contextmanager
    def write(self, *, tenant: str | None = None) -> Iterator[PostgresWriter]:
        """Open a transaction; commit on success, roll back on any error.

        A write opened inside another on the same thread becomes a savepoint of it, and
        :meth:`query` inside a write reads through the same transaction. Driver errors are
        raised as :class:`StoreError` (integrity violations as
        :class:`StoreIntegrityError`), as SQLiteStore raises them.
        """
        psycopg, _ = _psycopg()
        with self._connection() as conn:
            outer = getattr(self._local, "conn", None) is None
            if outer:
                self._local.conn = conn
            try:
                with conn.transaction():
                    yield PostgresWriter(self, conn, tenant)
            except psycopg.errors.QueryCanceled as exc:
                raise StoreError(f"write timed out: {exc}") from exc
            except psycopg.errors.LockNotAvailable as exc:
                raise StoreError(f"write timed out waiting for a lock: {exc}") from exc
            except psycopg.Error as exc:
                raise store_error("a write", exc) from exc
            finally:
                if outer:
                    self._local.conn = None

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[dict[str, Any]]:
        """Run a read-only query (``?`` placeholders) and return its rows as dicts.

        Under a :class:`~retold.Deadline` (the turn path) the pool checkout and the
        statement are bounded by the time left, and a read cut short raises
        :class:`~retold.DeadlineExceeded`, as on SQLite.
        """
        return _rows(sql, self._read(sql, params, tuples=False))

    def query_tuples(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Like :meth:`query`, rows as plain tuples (hot read paths: id and vector scans)."""
        return self._read(sql, params, tuples=True)

    def _read(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any], *, tuples: bool
    ) -> list[Any]:
        psycopg, _ = _psycopg()
        from psycopg.rows import dict_row, tuple_row

        if isinstance(params, Mapping):
            raise UsageError("PostgresStore takes positional '?' parameters, not a mapping")
        writing = getattr(self._local, "conn", None) is not None
        deadline = None if writing else current_deadline()
        limit_ms: int | None = None
        if deadline is not None:
            left = deadline.remaining()
            if left <= 0:
                raise deadline.exceeded("a read")
            if left * 1000 < self._statement_timeout_ms:
                limit_ms = max(1, math.ceil(left * 1000))
        with self._connection(deadline) as conn:
            try:
                if limit_ms is not None:
                    conn.execute(
                        "SELECT set_config('statement_timeout', %s, false)", [str(limit_ms)]
                    )
                try:
                    # Binary results: a bytea vector arrives as its bytes, not as hex text.
                    factory = tuple_row if tuples else dict_row
                    with conn.cursor(row_factory=factory, binary=tuples) as cur:
                        cur.execute(pg_sql(sql), list(params))
                        return list(cur.fetchall())
                finally:
                    if limit_ms is not None and not conn.closed:
                        conn.execute(
                            "SELECT set_config('statement_timeout', %s, false)",
                            [str(self._statement_timeout_ms)],
                        )
            except psycopg.errors.QueryCanceled as exc:
                if deadline is not None and (limit_ms is not None or deadline.passed()):
                    raise deadline.exceeded("a read") from exc
                raise StoreError(f"query timed out: {exc}") from exc
            except psycopg.Error as exc:
                raise store_error("a read", exc) from exc

    def ensure_schema(self, component: str, migrations: Sequence[str]) -> None:
        """Apply the not-yet-applied migrations of ``component``, each in one transaction.

        Migrations are PostgreSQL scripts (several statements each). An advisory lock
        serialises migrators, so several processes may open a new database at once.

        Raises:
            StoreError: a migration failed (it is rolled back, the version stays).
        """
        psycopg, _ = _psycopg()
        # Components ensure their schema on every construction (a retriever per turn):
        # once a version is known to be applied, skip the locked migration transactions.
        if self._ensured.get(component, -1) >= len(migrations):
            return
        rows: list[dict[str, Any]] = []
        if getattr(self._local, "conn", None) is None:  # an error would abort an open write
            try:
                rows = self.query(
                    "SELECT version FROM retold_schema WHERE component = ?", [component]
                )
            except StoreError as exc:
                if not isinstance(exc.__cause__, psycopg.errors.UndefinedTable):
                    raise
                rows = []
        if rows and int(rows[0]["version"]) >= len(migrations):
            self._ensured[component] = int(rows[0]["version"])
            return
        lock = _lock_key("migrate")
        for version, script in enumerate(migrations, start=1):
            try:
                with self.write() as w:
                    w._raw("SELECT pg_advisory_xact_lock(?)", [lock])
                    w._raw(
                        "CREATE TABLE IF NOT EXISTS retold_schema "
                        '(component TEXT COLLATE "C" PRIMARY KEY, version INTEGER NOT NULL)'
                    )
                    row = w.query(
                        "SELECT version FROM retold_schema WHERE component = ?", [component]
                    )
                    if (row[0]["version"] if row else 0) >= version:
                        continue
                    w._conn.execute(adapt_ddl(script).encode())
                    w._raw(
                        "INSERT INTO retold_schema (component, version) VALUES (?, ?) "
                        "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                        [component, version],
                    )
                    log.debug("schema_migrated", component=component, version=version)
                self._ensured[component] = version
            except StoreError as exc:
                raise StoreError(
                    f"migration {version} of component {component!r} failed on PostgreSQL: "
                    f"{exc.__cause__ or exc} (is its DDL in the portable subset adapt_ddl "
                    "spells for PostgreSQL?)"
                ) from exc.__cause__

    def _stored_key(self) -> bytes:
        with self.write() as w:
            w._conn.execute(
                "INSERT INTO retold_meta (key, value) VALUES ('redaction_key', %s) "
                "ON CONFLICT (key) DO NOTHING",
                [secrets.token_hex(32)],
            )
        row = self.query("SELECT value FROM retold_meta WHERE key = 'redaction_key'")
        return bytes.fromhex(row[0]["value"])

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (scratch stores: benchmarks, tests).

        Raises:
            UsageError: the store was opened without an explicit ``schema``.
        """
        from psycopg import sql

        if self.schema is None:
            raise UsageError("drop_schema() needs a store opened with an explicit schema")
        with self._connection() as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )

    def checkpoint(self) -> None:
        """Ask the server for a CHECKPOINT (needs superuser or pg_checkpoint rights)."""
        with self._connection() as conn:
            conn.execute("CHECKPOINT")

    def vacuum(self) -> None:
        """``VACUUM FULL`` every table of the store's schema.

        Deletion erases the text in the live row and its ``tsvector`` at once, so nothing
        reads or matches it again; but PostgreSQL keeps the dead row version in the table
        file and its lexemes in GIN index pages, and a plain VACUUM does not clear the
        index pages. Every component's table can hold such copies: an erasure also deletes
        transcript turns and blanks audit queries. This rewrites each table (its TOAST data
        too) and rebuilds its indexes, so no dead copy of erased text stays in their files
        (WAL segments still hold it until they are recycled). It takes an exclusive lock
        per table: run it off peak.
        """
        from psycopg import sql

        with self._connection() as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY tablename"
            ).fetchall()
            for row in tables:
                conn.execute(sql.SQL("VACUUM FULL {}").format(sql.Identifier(row["tablename"])))

    # -- records ------------------------------------------------------------------------

    @property
    def busy_timeout_ms(self) -> int:
        """How long a write waits for another connection's lock: the ``lock_timeout``, which
        is the statement timeout (outside any deadline)."""
        return self._statement_timeout_ms

    @property
    def location(self) -> str | None:
        """The store's URL (with ``retold_schema``) without its password, which libpq then
        takes from ``PGPASSWORD`` or ``~/.pgpass``; None when the store was opened from a
        key=value connection string rather than a URL."""
        parts = urlsplit(self.url)
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            return None
        host = parts.netloc.rpartition("@")[2]
        if parts.username:
            host = f"{parts.username}@{host}"
        query = parse_qsl(parts.query, keep_blank_values=True)
        if self.schema is not None:
            query.append(("retold_schema", self.schema))
        return urlunsplit(parts._replace(netloc=host, query=urlencode(query)))

    def _lock_for_insert(
        self, w: PostgresWriter, scope: Principal, idempotency_key: str | None
    ) -> None:
        # Shared scope lock: records_after() takes it exclusively to see no write in flight.
        w._raw("SELECT pg_advisory_xact_lock_shared(?)", [_scope_lock(scope)])
        if idempotency_key is not None:
            # Writers with one key serialise here, so the second sees the first's commit.
            w._raw(
                "SELECT pg_advisory_xact_lock(?)",
                [_lock_key(f"idem:{scope.tenant}:{scope.principal}:{idempotency_key}")],
            )

    def records_after(
        self, scope: Principal, rowid: int, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """``rowid, id, text, lifecycle`` of the scope's records after ``rowid``, in order.

        Identity values are handed out before commit, so a plain ``rowid >`` scan could
        pass a row that commits later with a lower rowid. When there is anything new, this
        read first waits (bounded by the statement timeout) for the scope's in-flight record
        writes, which hold a shared lock, so a watermark advanced to the last row returned
        never skips one. With nothing new it returns at once: a row still in flight then
        has a rowid above the mark and is seen by a later call.
        """
        tail = " LIMIT ?" if limit is not None else ""
        extra = [limit] if limit is not None else []
        if not self.query(
            "SELECT 1 AS x FROM records WHERE tenant = ? AND principal = ? AND rowid > ? LIMIT 1",
            [scope.tenant, scope.principal, rowid],
        ):
            return []
        with self.write() as w:
            w._raw("SELECT pg_advisory_xact_lock(?)", [_scope_lock(scope)])
            return w.query(
                "SELECT rowid, id, text, lifecycle FROM records "
                "WHERE tenant = ? AND principal = ? AND rowid > ? ORDER BY rowid" + tail,
                [scope.tenant, scope.principal, rowid, *extra],
            )

    def _lexical_stats(self, scope: Principal) -> tuple[float, float]:
        """(N, average length) of the scope's records for BM25; brought up to date first.

        Counted as FTS5 counts them (every record written, a deleted one with length 0),
        but per scope. Records written since the last call are added under the scope's
        exclusive lock (see :meth:`records_after`), so none is skipped or counted twice.
        """
        rows = self.query(
            "SELECT last_rowid, docs, total_len FROM lexical_stats "
            "WHERE tenant = ? AND principal = ?",
            [scope.tenant, scope.principal],
        )
        mark = int(rows[0]["last_rowid"]) if rows else 0
        if self.query(
            "SELECT 1 AS x FROM records WHERE tenant = ? AND principal = ? AND rowid > ? LIMIT 1",
            [scope.tenant, scope.principal, mark],
        ):
            with self.write() as w:
                w._raw("SELECT pg_advisory_xact_lock(?)", [_scope_lock(scope)])
                w._raw(
                    "INSERT INTO lexical_stats (tenant, principal, last_rowid, docs, total_len) "
                    "VALUES (?, ?, 0, 0, 0) ON CONFLICT DO NOTHING",
                    [scope.tenant, scope.principal],
                )
                w._raw(
                    "UPDATE lexical_stats s SET last_rowid = GREATEST(s.last_rowid, d.top), "
                    "docs = s.docs + d.n, total_len = s.total_len + d.len FROM ("
                    "SELECT COUNT(*) AS n, COALESCE(SUM(r.text_len), 0) AS len, MAX(r.rowid) AS top "
                    "FROM records r, lexical_stats m WHERE m.tenant = ? AND m.principal = ? "
                    "AND r.tenant = m.tenant AND r.principal = m.principal "
                    "AND r.rowid > m.last_rowid) d "
                    "WHERE s.tenant = ? AND s.principal = ? AND d.n > 0",
                    [scope.tenant, scope.principal, scope.tenant, scope.principal],
                )
                rows = w.query(
                    "SELECT last_rowid, docs, total_len FROM lexical_stats "
                    "WHERE tenant = ? AND principal = ?",
                    [scope.tenant, scope.principal],
                )
        docs = float(rows[0]["docs"]) if rows else 0.0
        return docs, (float(rows[0]["total_len"]) / docs if docs else 0.0)

    def common_terms(
        self, scope: Principal | None, terms: Sequence[str], cap: int
    ) -> frozenset[str]:
        """The terms found in more than ``cap`` records: ``scope``'s own when given (a
        shared store), else the whole table's.

        Each term is stemmed as the ``text_tsv`` column is; its GIN posting list gives the
        candidate rows and the count stops one past the cap, so a term costs its posting
        list and at most ``cap + 1`` row reads (no scoring). A term with no stem matches
        nothing, so it is never common.
        """
        if not terms:
            return frozenset()
        scoped = "r.tenant = ? AND r.principal = ? AND " if scope is not None else ""
        count = (
            f"(SELECT count(*) FROM (SELECT 1 FROM records r WHERE {scoped}r.text_tsv @@ "
            f"(SELECT {_ANY_STEM} FROM {_STEMS_OF}) LIMIT ?) AS m)"
        )
        owner = [scope.tenant, scope.principal] if scope is not None else []
        rows = self.query_tuples(
            "SELECT " + ", ".join(count for _ in terms),
            [x for term in terms for x in (*owner, term, cap + 1)],
        )
        return frozenset(t for t, n in zip(terms, rows[0], strict=True) if int(n) > cap)

    def bm25(
        self,
        scope: Principal,
        text: str,
        where: str,
        params: Sequence[Any],
        limit: int,
        *,
        newest: int | None = None,
    ) -> list[tuple[str, float]]:
        """``(record id, score)`` of records matching any word of ``text``, best first.

        The lexical stage on PostgreSQL. Matching uses the ``text_tsv`` column and its GIN
        index (words stemmed by the ``retold`` text search configuration: Snowball English,
        stop words kept, as FTS5's porter tokenizer keeps them). The score is Okapi BM25 with
        FTS5's constants and formula (k1=1.2, b=0.75, IDF ``ln((N - n + 0.5) / (n + 0.5))``
        floored at 1e-6, term frequency from the tsvector's positions), so a configuration
        ranks alike on both stores. Statistics are the scope's own, so no other tenant's
        data moves a score (FTS5 counts the whole file): N and the average length as FTS5
        keeps them (:meth:`_lexical_stats`, maintained incrementally), a word's document
        frequency n over the rows the filter lets through (FTS5 also counts superseded and
        expired rows). ``where`` and ``params`` filter alias ``r`` and must include the
        scope. Equal scores go newest written first (never by id).

        ``newest``: for a query made only of common words (whose matches are a large share
        of the scope), score only the newest that many matching rows among the scope's
        newest :data:`NEWEST_WINDOW` times that many rows the filter lets through (read
        newest first on the scope's rowid index, so the cost does not grow with the scope
        or with how common the words are); a word's document frequency is then counted
        among the rows scored, as every match would have to be read to count it exactly.
        """
        if limit <= 0:
            return []
        n_docs, avgdl = self._lexical_stats(scope)
        # One pass over the matching rows (``hit``, inlined as a subquery): each keeps only
        # its query lexemes (ts_filter of a setweight mark, in C) with their term
        # frequencies; IDF from those rows.
        if newest is None:
            hit = f"records r, q WHERE q.tq IS NOT NULL AND r.text_tsv @@ q.tq AND {where}"
            hit_params = list(params)
        else:
            hit = (
                "(SELECT r.rowid, r.id, r.text_len, r.text_tsv FROM records r "
                f"WHERE {where} ORDER BY r.rowid DESC LIMIT ?) r, q "
                "WHERE q.tq IS NOT NULL AND r.text_tsv @@ q.tq ORDER BY r.rowid DESC LIMIT ?"
            )
            hit_params = [*params, NEWEST_WINDOW * newest, newest]
        sql = f"""
            WITH q AS MATERIALIZED (
                SELECT array_agg(DISTINCT lexeme) AS lexemes, {_ANY_STEM} AS tq
                FROM {_STEMS_OF}
            ),
            hit AS (SELECT r.rowid, r.id, r.text_len, r.text_tsv FROM {hit}),
            tf AS MATERIALIZED (
                SELECT h.rowid, h.id, h.text_len::float8 AS dl, u.lexeme,
                       COALESCE(array_length(u.positions, 1), 1)::float8 AS n
                FROM hit h, q,
                     unnest(ts_filter(setweight(h.text_tsv, 'A', q.lexemes), '{{a}}')) u
            ),
            idf AS (
                SELECT lexeme,
                       GREATEST(LN((?::float8 - COUNT(*) + 0.5) / (COUNT(*) + 0.5)), 1e-6) AS w
                FROM tf GROUP BY lexeme
            )
            SELECT tf.id, SUM(idf.w * tf.n * ?::float8 / (tf.n + ?::float8 + ?::float8 * tf.dl))
                AS score
            FROM tf JOIN idf ON idf.lexeme = tf.lexeme
            GROUP BY tf.rowid, tf.id ORDER BY score DESC, tf.rowid DESC LIMIT ?
        """
        k1, b = _BM25_K1, _BM25_B
        rows = self.query_tuples(
            sql,
            [
                text,
                *hit_params,
                n_docs,
                k1 + 1,
                k1 * (1 - b),
                k1 * b / max(avgdl, 1.0),
                limit,
            ],
        )
        return [(str(rid), float(score)) for rid, score in rows]

    def search(
        self, scope: Principal, query: str, *, limit: int = 20
    ) -> list[tuple[Record, float]]:
        """BM25 full-text search over live records in ``scope``; best first, equal scores
        newest written first.

        Scored by :meth:`bm25`.
        """
        words = re.findall(r"\w+", query.lower())
        if not words or limit <= 0:
            return []
        ranked = self.bm25(
            scope,
            " ".join(dict.fromkeys(words)),
            "r.tenant = ? AND r.principal = ? AND r.lifecycle = 'active' "
            "AND r.superseded_by IS NULL AND (r.expires_at IS NULL OR r.expires_at > ?)",
            [scope.tenant, scope.principal, iso(self._clock())],
            limit,
        )
        if not ranked:
            return []
        rows = self.query(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE tenant = ? AND principal = ? "
            f"AND id IN ({', '.join('?' for _ in ranked)})",
            [scope.tenant, scope.principal, *(rid for rid, _ in ranked)],
        )
        by_id = {row["id"]: _row_to_record(row) for row in rows}
        return [(by_id[rid], score) for rid, score in ranked if rid in by_id]


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    value = zlib.crc32(name.encode()) << 32 | zlib.adler32(name.encode())
    return value - (1 << 64) if value >= 1 << 63 else value


def _scope_lock(scope: Principal) -> int:
    return _lock_key(f"scope:{len(scope.tenant)}:{scope.tenant}:{scope.principal}")


def _safe_url(url: str) -> str:
    """The URL with any password masked, for error messages."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
