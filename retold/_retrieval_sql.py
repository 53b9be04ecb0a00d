"""The retrieval SQL that differs between stores: one small object per SQL dialect.

Retrieval (:mod:`retold._retrieval`) and the vector index (:mod:`retold._vectors`) write
portable SQL: ``?`` placeholders, ``INSERT ... ON CONFLICT``, and migrations in the DDL
subset that :func:`retold._store_postgres.adapt_ddl` spells for PostgreSQL (row triggers
included), so one copy of their schema serves both stores. What cannot be portable is asked
of the store's :class:`RetrievalSQL`, picked by :func:`retrieval_sql` from
``store.dialect``:

* :meth:`~RetrievalSQL.lexical`, the lexical stage: FTS5 ``bm25()`` on SQLite; on
  PostgreSQL, BM25 over the ``records.text_tsv`` column and its GIN index
  (:meth:`retold.PostgresStore.bm25`);
* :meth:`~RetrievalSQL.records_after`, the rows after a per-scope watermark (entity and
  embedding indexing): on PostgreSQL an identity value is handed out before its row
  commits, so the read waits for the scope's in-flight writes before a watermark may pass
  them;
* concurrency: the row lock (``FOR SHARE``) that makes "is this record still alive?" hold
  until the reading write commits, and :meth:`~RetrievalSQL.serialize` for writers of one
  index (SQLite runs one write at a time anyway; PostgreSQL needs an advisory lock);
* query spellings: keeping a column off the index choice (SQLite's unary ``+``), an index
  hint, ``group_concat``, tag membership in a JSON array.

A change to retrieval's SQL that stays portable needs nothing here; a new dialect-specific
need becomes one method on both classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._records import Principal
from ._store import BM25, scoped_match

__all__ = ["PostgresRetrievalSQL", "RetrievalSQL", "retrieval_sql"]


class RetrievalSQL:
    """The SQLite spelling (the default store): FTS5, unary ``+``, ``json_each``."""

    name = "sqlite"
    #: Appended to a read inside a write that must keep the rows it saw alive until commit.
    #: SQLite needs nothing: a write transaction (``BEGIN IMMEDIATE``) excludes other writers.
    for_share = ""
    #: Appended to a read inside a write that must hold the rows it saw against other
    #: writers until commit (SQLite: the write transaction already does).
    for_update = ""
    #: Written before a column (or table alias) to keep it off the planner's index choice:
    #: SQLite's unary ``+``. PostgreSQL's planner needs no such hint (and has no ``+text``).
    no_index = "+"

    def index_hint(self, index: str) -> str:
        """A clause after a table name that makes the planner use ``index``."""
        return f" INDEXED BY {index}"

    def group_concat(self, expr: str) -> str:
        """An aggregate joining ``expr`` with single spaces."""
        return f"group_concat({expr}, ' ')"

    def has_tag(self, column: str) -> str:
        """A condition: the JSON array in ``column`` holds the string bound to its ``?``."""
        return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value = ?)"

    def serialize(self, w: Any, name: str) -> None:
        """Make writes that call this with ``name`` run one at a time (until ``w`` ends).

        SQLite needs nothing: its write transactions already run one at a time.
        """

    def live_ids(self, w: Any, scope: Principal, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that are ``scope``'s records not deleted, read inside the write
        ``w`` (and, on PostgreSQL, kept alive until it commits: a record deleted after this
        read would otherwise get derived rows its purge trigger has already removed).

        The scope is matched past the id index (:attr:`no_index`): on the scope index
        SQLite's planner read every record of the principal (30-70 ms at 100,000
        records, from three ids on).
        """
        live: set[str] = set()
        hint = self.no_index
        # Chunks stay under SQLite's bound-parameter limit on every build.
        for at in range(0, len(ids), 900):
            chunk = list(ids[at : at + 900])
            live.update(
                r["id"]
                for r in w.query(
                    f"SELECT id FROM records WHERE {hint}tenant = ? AND {hint}principal = ? "
                    f"AND lifecycle != 'deleted' AND id IN ({', '.join('?' for _ in chunk)})"
                    + self.for_share,
                    [scope.tenant, scope.principal, *chunk],
                )
            )
        return live

    def records_after(
        self, store: Any, scope: Principal, rowid: int, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """``rowid, id, text, lifecycle`` of ``scope``'s records after ``rowid``, in order."""
        # The scope's rowid index seeks to the first row after the mark: neither the
        # principal's older history nor other principals' newer rows are read.
        sql = (
            "SELECT rowid, id, text, lifecycle FROM records"
            + self.index_hint("records_scope_rowid")
            + " WHERE tenant = ? AND principal = ? AND rowid > ? ORDER BY rowid"
        )
        params: list[Any] = [scope.tenant, scope.principal, rowid]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows: list[dict[str, Any]] = store.query(sql, params)
        return rows

    def store_rows(self, store: Any) -> int:
        """How many records rows the store holds (its largest rowid: one seek)."""
        rows = store.query_tuples("SELECT coalesce(max(rowid), 0) FROM records", [])
        return int(rows[0][0])

    def common_terms(
        self, store: Any, scope: Principal | None, terms: Sequence[str], cap: int
    ) -> frozenset[str]:
        """The terms found in more than ``cap`` records of the lexical index: ``scope``'s
        own when given (a shared store), else every principal's.

        Each term's FTS5 postings are read in rowid order and the read stops one past the
        cap, so a term costs at most ``cap`` postings (ids only, no scoring).
        """
        if not terms:
            return frozenset()
        # One statement for every term (a scalar subquery each): one read, not one per term.
        count = "(SELECT count(*) FROM (SELECT rowid FROM records_fts WHERE records_fts MATCH ? LIMIT ?))"
        rows = store.query_tuples(
            "SELECT " + ", ".join(count for _ in terms),
            [x for term in terms for x in (_text_match([term], scope), cap + 1)],
        )
        return frozenset(t for t, n in zip(terms, rows[0], strict=True) if int(n) > cap)

    def lexical(
        self,
        store: Any,
        scope: Principal,
        terms: Sequence[str],
        where: str,
        params: Sequence[Any],
        limit: int,
        *,
        newest: int | None = None,
        scoped: bool = False,
    ) -> list[tuple[str, float]]:
        """``(record id, BM25 score)`` of records matching any of ``terms``, best first.

        ``where``/``params`` filter alias ``r`` (records) and must include the scope. Equal
        scores go newest written first (never by id, so the ``limit`` keeps the same records
        whatever ids the store drew). Scores are FTS5's ``bm25()`` negated (higher is better).
        ``newest``: score only the newest that many matches in scope (FTS5 walks postings
        newest first and stops there), for a query made only of common words.
        ``scoped``: AND the scope's own token in the index (a store shared with other
        principals): FTS5 then reads only this scope's postings of the words, however
        common they are across the store. Otherwise the all-common walk is bounded by the
        scope's first and last rows (two seeks on the scope's rowid index).
        """
        if not terms:
            return []
        match = _text_match(terms, scope if scoped else None)
        if newest is None:
            rows = store.query_tuples(
                f"SELECT r.id, -{BM25} AS score "
                "FROM records_fts JOIN records r ON r.rowid = records_fts.rowid "
                f"WHERE records_fts MATCH ? AND {where} ORDER BY score DESC, r.rowid DESC LIMIT ?",
                [match, *params, limit],
            )
        else:
            span, span_params = "", []
            if not scoped:
                bound = (
                    "(SELECT {}(rowid) FROM records INDEXED BY records_scope_rowid "
                    "WHERE tenant = ? AND principal = ?)"
                )
                span = f"AND records_fts.rowid BETWEEN {bound.format('min')} AND {bound.format('max')} "
                span_params = [scope.tenant, scope.principal] * 2
            rows = store.query_tuples(
                f"SELECT id, score FROM (SELECT r.id AS id, r.rowid AS seq, -{BM25} AS score "
                "FROM records_fts JOIN records r ON r.rowid = records_fts.rowid "
                f"WHERE records_fts MATCH ? {span}AND {where} ORDER BY records_fts.rowid DESC "
                "LIMIT ?) ORDER BY score DESC, seq DESC LIMIT ?",
                [match, *span_params, *params, newest, limit],
            )
        return [(str(rid), float(score)) for rid, score in rows]


class PostgresRetrievalSQL(RetrievalSQL):
    """The PostgreSQL spelling: ``tsvector`` BM25, ``string_agg``, ``jsonb``, row locks."""

    name = "postgresql"
    # READ COMMITTED: without the lock, a record deleted (and purged by its trigger) after
    # the check but before this write commits would get entity names or a vector back.
    for_share = " FOR SHARE"
    for_update = " FOR UPDATE"
    no_index = ""

    def index_hint(self, index: str) -> str:
        return ""

    def group_concat(self, expr: str) -> str:
        return f"string_agg({expr}, ' ')"

    def has_tag(self, column: str) -> str:
        return (
            f"EXISTS (SELECT 1 FROM jsonb_array_elements_text(({column})::jsonb) AS t(value) "
            "WHERE t.value = ?)"
        )

    def serialize(self, w: Any, name: str) -> None:
        # READ COMMITTED: without it, two processes embedding the same new records would
        # both miss the other's uncommitted rows and collide on the unique keys.
        w.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", [name])

    def records_after(
        self, store: Any, scope: Principal, rowid: int, limit: int | None = None
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = store.records_after(scope, rowid, limit=limit)
        return rows

    def common_terms(
        self, store: Any, scope: Principal | None, terms: Sequence[str], cap: int
    ) -> frozenset[str]:
        # Counted on the tsvector's GIN posting lists (PostgresStore.common_terms).
        found: frozenset[str] = store.common_terms(scope, terms, cap)
        return found

    def lexical(
        self,
        store: Any,
        scope: Principal,
        terms: Sequence[str],
        where: str,
        params: Sequence[Any],
        limit: int,
        *,
        newest: int | None = None,
        scoped: bool = False,
    ) -> list[tuple[str, float]]:
        # Always filtered by scope in SQL (``where``), so ``scoped`` changes nothing here.
        if not terms:
            return []
        rows: list[tuple[str, float]] = store.bm25(
            scope, " ".join(terms), where, params, limit, newest=newest
        )
        return rows


def _match(terms: Sequence[str]) -> str:
    # Quoted terms: user text can never inject FTS5 syntax.
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _text_match(terms: Sequence[str], scope: Principal | None) -> str:
    """An FTS5 match of any of ``terms`` in the text column, limited to ``scope``'s rows
    (its token ANDed) when one is given."""
    words = _match(terms)
    return scoped_match(scope, words) if scope is not None else f"text : ({words})"


_SQLITE = RetrievalSQL()
_POSTGRES = PostgresRetrievalSQL()


def retrieval_sql(store: Any) -> RetrievalSQL:
    """The :class:`RetrievalSQL` of ``store``'s dialect (``store.dialect``)."""
    return _POSTGRES if getattr(store, "dialect", "sqlite") == "postgresql" else _SQLITE
