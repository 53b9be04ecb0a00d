"""Dense search below retrieval: vectors in the store's SQLite file, an IVF index over them.

Vectors live in the ``vectors`` table of the same SQLite file as the records, keyed by
``(tenant, principal, model_id, record_id)``: a search reads only vectors of its own scope
and of the query's embedder model, and vectors of another model are reported as stale and
never mixed. Deleting a record (``lifecycle = 'deleted'``) removes its vectors in the same
transaction, through the ``vectors_purge_deleted`` trigger, whichever process deletes it.

**The index.** Each (scope, model) is partitioned into cells by spherical k-means (an IVF,
"inverted file", index). The table's primary key starts with the cell, so one cell is one
contiguous range of the B-tree. A query scores the cell centroids, then reads the best
cells, best first, until it has read ``probe`` vectors, and scores only those. The vectors
read per query are therefore bounded by ``probe`` plus one cell, whatever the scope's size:
no query reads all vectors once a scope has more than ``2 * probe``. Below that size a
scope is one cell, read whole (at most ``2 * probe`` vectors, i.e. the search is exact).

The index is (re)built by :func:`ensure_vectors` when the scope's vector count reaches
twice the count it was last built for, with ``round(sqrt(n))`` cells; new vectors between
rebuilds join their nearest cell. Training is deterministic: it starts from evenly spaced
vectors in record order and runs a fixed number of iterations, so the same inputs give the
same cells.

Scoring reads the int8 codes straight into one matrix-vector product (numpy's own loop,
not a BLAS call whose threads would contend for the cores at this size) and scales each
row's single result, so the Python-side cost is the row read.

Why not sqlite-vec: its ``vec0`` table scans every vector of a partition per query (an
exhaustive KNN in C). Measured on the development machine, through ``sqlean.py`` (this
Python's ``sqlite3`` cannot load extensions): 120 ms for 20,000 float[384] vectors and
850 ms for 100,000 bit[384] vectors at k=1000, far above the 20 ms p95 the retrieval
benchmark allows at 100,000 records; it would also need a SQLite driver able to load
extensions, which many Python builds (pyenv's default among them) are not.
"""

from __future__ import annotations

import functools
import math
import threading
import weakref
from collections.abc import Sequence
from typing import Any, cast

import anyio
import numpy as np
import structlog

from ._errors import UsageError
from ._records import Principal
from ._retrieval_sql import retrieval_sql
from ._store import SQLiteStore
from ._typing import Embedder

__all__ = [
    "DEFAULT_PROBE",
    "dense_search",
    "ensure_vector_schema",
    "ensure_vectors",
    "pending_vectors",
    "vector_counts",
    "write_vectors",
]

log = structlog.get_logger(__name__)

DEFAULT_PROBE = 2048
_BATCH = 256
_TRAIN_ITERATIONS = 8
_TRAIN_SAMPLE = 16384
_MAX_CELLS = 1024

_VECTOR_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE vectors (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        model_id TEXT NOT NULL,
        cell INTEGER NOT NULL,
        record_id TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (tenant, principal, model_id, cell, record_id)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX vectors_record ON vectors (tenant, principal, record_id, model_id);
    CREATE TABLE vector_cells (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        model_id TEXT NOT NULL,
        cell INTEGER NOT NULL,
        centroid BLOB NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (tenant, principal, model_id, cell)
    );
    CREATE TABLE vector_indexes (
        tenant TEXT NOT NULL,
        principal TEXT NOT NULL,
        model_id TEXT NOT NULL,
        dimensions INTEGER NOT NULL,
        trained_count INTEGER NOT NULL,
        generation INTEGER NOT NULL,
        last_rowid INTEGER NOT NULL DEFAULT 0,
        vector_count INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant, principal, model_id)
    );
    CREATE TRIGGER vectors_purge_deleted AFTER UPDATE OF lifecycle ON records
    WHEN NEW.lifecycle = 'deleted'
    BEGIN
        UPDATE vector_indexes SET vector_count = vector_count - 1
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND model_id IN (
                SELECT model_id FROM vectors
                WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id
            );
        DELETE FROM vectors
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
    END;
    """,
)


_READY: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


def ensure_vector_schema(store: SQLiteStore) -> None:
    """Create (or migrate) the vector tables and their deletion trigger; idempotent.

    Checked once per store object, so the search path does not open a transaction for it.
    """
    if store in _READY:
        return
    store.ensure_schema("vectors", _VECTOR_MIGRATIONS)
    _READY.add(store)


def _encode(vector: Any) -> bytes:
    """A unit vector as a float32 scale then int8 components (about a quarter of float32).

    Small rows stay inside their B-tree page (no overflow chain), which is what makes a
    probe's read fast; the quantisation error (< 0.4% of the largest component) barely
    moves a cosine ranking.
    """
    top = float(np.abs(vector).max()) or 1.0
    scale = np.float32(top / 127.0)
    codes = np.clip(np.rint(vector / scale), -127, 127).astype(np.int8)
    return bytes(scale.tobytes()) + bytes(codes.tobytes())


def _decode(blobs: Sequence[bytes], dims: int) -> Any:
    """Stacked :func:`_encode` blobs back to a float32 (n x dims) matrix."""
    raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), 4 + dims)
    scales = raw[:, :4].copy().view(np.float32)
    return raw[:, 4:].view(np.int8).astype(np.float32) * scales


def _similarities(blobs: Sequence[bytes], q: Any) -> Any | None:
    """Dot products of the :func:`_encode` blobs with ``q``, without decoding the matrix.

    The int8 codes go straight into the product and each row's scale multiplies its one
    result: a quarter of the memory traffic of decoding to float32 first.
    """
    dims = len(q)
    joined = b"".join(blobs)
    if len(joined) != len(blobs) * (4 + dims):
        return None  # vectors of another width: not comparable
    raw = np.frombuffer(joined, dtype=np.uint8).reshape(len(blobs), 4 + dims)
    scales = raw[:, :4].copy().view(np.float32).ravel()
    # einsum, not ``@``: a matrix-vector product this small is slower through a
    # multi-threaded BLAS (its threads contend for the cores) than in numpy's own loop.
    codes = raw[:, 4:].view(np.int8)
    return np.einsum("ij,j->i", codes, q, dtype=np.float32, casting="unsafe") * scales


def _normalise(matrix: Any) -> Any:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


# Centroids and cell sizes per store and (scope, model), reloaded when the generation changes.
_CENTROIDS: weakref.WeakKeyDictionary[SQLiteStore, dict[tuple[str, str, str], tuple[int, Any]]] = (
    weakref.WeakKeyDictionary()
)
_CENTROIDS_LOCK = threading.Lock()


def _index_row(store: SQLiteStore, scope: Principal, model: str) -> dict[str, Any] | None:
    rows = store.query(
        "SELECT dimensions, trained_count, generation FROM vector_indexes "
        "WHERE tenant = ? AND principal = ? AND model_id = ?",
        [scope.tenant, scope.principal, model],
    )
    return rows[0] if rows else None


def _index(store: SQLiteStore, scope: Principal, model: str) -> tuple[Any, Any] | None:
    """(centroids matrix, cell sizes) of the scope's index, or None when untrained.

    Sizes are the counts at the last build plus the vectors added since (deletions are not
    subtracted): they only decide how many cells a query reads.
    """
    row = _index_row(store, scope, model)
    if row is None or row["trained_count"] == 0:
        return None
    key = (scope.tenant, scope.principal, model)
    generation = int(row["generation"])
    with _CENTROIDS_LOCK:
        cached = _CENTROIDS.get(store, {}).get(key)
    if cached is not None and cached[0] == generation:
        return cast("tuple[Any, Any]", cached[1])
    cells = store.query(
        "SELECT cell, centroid, size FROM vector_cells "
        "WHERE tenant = ? AND principal = ? AND model_id = ? ORDER BY cell",
        [scope.tenant, scope.principal, model],
    )
    if not cells:
        return None
    matrix = np.frombuffer(b"".join(c["centroid"] for c in cells), dtype=np.float32).reshape(
        len(cells), -1
    )
    sizes = np.asarray([int(c["size"]) for c in cells], dtype=np.int64)
    with _CENTROIDS_LOCK:
        _CENTROIDS.setdefault(store, {})[key] = (generation, (matrix, sizes))
    return matrix, sizes


def vector_counts(store: SQLiteStore, scope: Principal) -> dict[str, int]:
    """How many vectors each embedder model has in ``scope``."""
    ensure_vector_schema(store)
    rows = store.query(
        "SELECT model_id, COUNT(*) AS n FROM vectors WHERE tenant = ? AND principal = ? "
        "GROUP BY model_id ORDER BY model_id",
        [scope.tenant, scope.principal],
    )
    return {r["model_id"]: int(r["n"]) for r in rows}


def write_vectors(
    store: SQLiteStore,
    scope: Principal,
    model: str,
    record_ids: Sequence[str],
    vectors: Sequence[Sequence[float]] | Any,
    *,
    dimensions: int | None = None,
    mark: int | None = None,
) -> None:
    """Store (or replace) the vectors of ``record_ids`` for ``model``, then index them.

    Each vector joins its nearest cell of the current index; when the scope's count reaches
    twice the count the index was built for, the index is rebuilt (see the module doc).
    Vectors of records that are deleted by the time of the write are not stored.

    ``mark`` (used by :func:`ensure_vectors`) advances the scope's embedding watermark.

    Raises:
        UsageError: a vector's dimensions differ from the model's stored dimensions.
    """
    ensure_vector_schema(store)
    if record_ids:
        matrix = _normalise(np.asarray(vectors, dtype=np.float32).reshape(len(record_ids), -1))
        dims = int(matrix.shape[1])
    elif dimensions is not None:
        matrix, dims = np.zeros((0, dimensions), dtype=np.float32), dimensions
    else:
        return
    with store.write() as w:
        lock = f"vectors:{len(scope.tenant)}:{scope.tenant}:{scope.principal}:{model}"
        retrieval_sql(store).serialize(w, lock)
        row = w.query(
            "SELECT dimensions, trained_count, generation FROM vector_indexes "
            "WHERE tenant = ? AND principal = ? AND model_id = ?",
            [scope.tenant, scope.principal, model],
        )
        if row and int(row[0]["dimensions"]) != dims:
            raise UsageError(
                f"embedder {model!r} gave {dims}-dimension vectors; its stored vectors have "
                f"{row[0]['dimensions']}"
            )
        if not row:
            w.execute(
                "INSERT INTO vector_indexes (tenant, principal, model_id, dimensions, "
                "trained_count, generation) VALUES (?, ?, ?, ?, 0, 0)",
                [scope.tenant, scope.principal, model, dims],
            )
        live = (
            set()
            if not record_ids
            else {
                r["id"]
                for r in w.query(
                    f"SELECT id FROM records WHERE tenant = ? AND principal = ? AND lifecycle != "
                    f"'deleted' AND id IN ({', '.join('?' for _ in record_ids)})"
                    # PostgreSQL: keep them alive until this write commits (see _retrieval_sql).
                    + retrieval_sql(store).for_share,
                    [scope.tenant, scope.principal, *record_ids],
                )
            }
        )
        cells = _nearest_cells(store, scope, model, matrix)
        added: dict[int, int] = {}
        removed = 0
        for i, rid in enumerate(record_ids):
            removed += w.execute(
                "DELETE FROM vectors WHERE tenant = ? AND principal = ? AND record_id = ? "
                "AND model_id = ?",
                [scope.tenant, scope.principal, rid, model],
            ).rowcount
            if rid in live:
                w.execute(
                    "INSERT INTO vectors (tenant, principal, model_id, cell, record_id, vector) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [scope.tenant, scope.principal, model, int(cells[i]), rid, _encode(matrix[i])],
                )
                added[int(cells[i])] = added.get(int(cells[i]), 0) + 1
        for cell, n in sorted(added.items()):
            w.execute(
                "UPDATE vector_cells SET size = size + ? "
                "WHERE tenant = ? AND principal = ? AND model_id = ? AND cell = ?",
                [n, scope.tenant, scope.principal, model, cell],
            )
        if added and row and int(row[0]["trained_count"]):
            # The cached sizes are stale: bump the generation so readers reload them.
            w.execute(
                "UPDATE vector_indexes SET generation = generation + 1 "
                "WHERE tenant = ? AND principal = ? AND model_id = ?",
                [scope.tenant, scope.principal, model],
            )
        if mark is not None:
            w.execute(
                "UPDATE vector_indexes SET last_rowid = "
                "CASE WHEN last_rowid > ? THEN last_rowid ELSE ? END "
                "WHERE tenant = ? AND principal = ? AND model_id = ?",
                [mark, mark, scope.tenant, scope.principal, model],
            )
        w.execute(
            "UPDATE vector_indexes SET vector_count = vector_count + ? "
            "WHERE tenant = ? AND principal = ? AND model_id = ?",
            [sum(added.values()) - removed, scope.tenant, scope.principal, model],
        )
        count = int(
            w.query(
                "SELECT vector_count FROM vector_indexes "
                "WHERE tenant = ? AND principal = ? AND model_id = ?",
                [scope.tenant, scope.principal, model],
            )[0]["vector_count"]
        )
        if not added:
            return
        trained = int(row[0]["trained_count"]) if row else 0
        if count >= 2 * max(trained, DEFAULT_PROBE):
            _train(w, scope, model)


def _nearest_cells(store: SQLiteStore, scope: Principal, model: str, matrix: Any) -> Any:
    index = _index(store, scope, model)
    if index is None or index[0].shape[1] != matrix.shape[1]:
        return np.zeros(len(matrix), dtype=np.int64)
    return np.argmax(matrix @ index[0].T, axis=1)


def _train(w: Any, scope: Principal, model: str) -> None:
    """Rebuild the scope's cells by spherical k-means and reassign every vector (in ``w``).

    Vectors are read in byte order, so the cells depend on the vectors alone, not on ids.
    """
    rows = w.query(
        "SELECT record_id, vector FROM vectors WHERE tenant = ? AND principal = ? "
        "AND model_id = ? ORDER BY vector, record_id",
        [scope.tenant, scope.principal, model],
    )
    n = len(rows)
    dims = len(rows[0]["vector"]) - 4
    data = _decode([r["vector"] for r in rows], dims)
    k = max(1, min(_MAX_CELLS, round(math.sqrt(n))))
    step = max(1, n // _TRAIN_SAMPLE)
    sample = data[::step]
    centroids = sample[np.linspace(0, len(sample) - 1, k).astype(np.int64)].copy()
    for _ in range(_TRAIN_ITERATIONS):
        assign = np.argmax(sample @ centroids.T, axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, sample)
        empty = np.bincount(assign, minlength=k) == 0
        sums[empty] = centroids[empty]
        centroids = _normalise(sums)
    assign = np.argmax(data @ centroids.T, axis=1)
    w.execute(
        "DELETE FROM vectors WHERE tenant = ? AND principal = ? AND model_id = ?",
        [scope.tenant, scope.principal, model],
    )
    for r, cell in zip(rows, assign.tolist(), strict=True):
        w.execute(
            "INSERT INTO vectors (tenant, principal, model_id, cell, record_id, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [scope.tenant, scope.principal, model, cell, r["record_id"], r["vector"]],
        )
    w.execute(
        "DELETE FROM vector_cells WHERE tenant = ? AND principal = ? AND model_id = ?",
        [scope.tenant, scope.principal, model],
    )
    sizes = np.bincount(assign, minlength=k).tolist()
    for cell in range(k):
        w.execute(
            "INSERT INTO vector_cells (tenant, principal, model_id, cell, centroid, size) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [scope.tenant, scope.principal, model, cell, centroids[cell].tobytes(), sizes[cell]],
        )
    w.execute(
        "UPDATE vector_indexes SET trained_count = ?, generation = generation + 1 "
        "WHERE tenant = ? AND principal = ? AND model_id = ?",
        [n, scope.tenant, scope.principal, model],
    )
    log.info("vector_index_built", model=model, vectors=n, cells=k)


async def ensure_vectors(
    store: SQLiteStore, scope: Principal, embedder: Embedder
) -> tuple[str, ...]:
    """Embed the records of ``scope`` written since the last call, for ``embedder.model_id``.

    A per-(scope, model) watermark on the records' rowid makes the no-op case one indexed
    read, so the search path can call this every query. Records of every lifecycle but
    ``deleted`` are embedded (the search applies the live filter), so a record activated
    later needs no second pass. No transaction is held while the embedder runs: a batch is
    read, embedded, then written with the new watermark in one short transaction. Returns
    the other model ids that have vectors in ``scope`` (a model change), after logging
    ``embedding_model_changed`` for them.

    Raises:
        UsageError: the embedder returned the wrong number of vectors or dimensions.
    """
    ensure_vector_schema(store)
    model = embedder.model_id
    # The common case (nothing new) is one thread hop: the pending rows and the other
    # models are read together.
    rows, others = await anyio.to_thread.run_sync(_pending_and_others, store, scope, model)
    while rows:
        todo = [row for row in rows if row["lifecycle"] != "deleted"]
        vectors: Sequence[Sequence[float]] = []
        if todo:
            texts = [row["text"] for row in todo]
            vectors = await embedder.embed(texts)
            if len(vectors) != len(texts) or any(len(v) != embedder.dimensions for v in vectors):
                raise UsageError(
                    f"embedder {model!r} returned {len(vectors)} vectors for {len(texts)} "
                    f"texts (expected one of {embedder.dimensions} floats each)"
                )
        ids = [row["id"] for row in todo]
        write = functools.partial(
            write_vectors, dimensions=embedder.dimensions, mark=int(rows[-1]["rowid"])
        )
        await anyio.to_thread.run_sync(write, store, scope, model, ids, vectors)
        rows, others = await anyio.to_thread.run_sync(_pending_and_others, store, scope, model)
    stale = others
    if stale:
        log.warning("embedding_model_changed", current=model, stale=list(stale))
    return stale


def pending_vectors(
    store: SQLiteStore, scope: Principal, model: str
) -> tuple[bool, tuple[str, ...]]:
    """(whether records of ``scope`` wait for a ``model`` vector, the scope's other models).

    One indexed read when none waits: the search path calls it on every query.
    """
    ensure_vector_schema(store)
    rows, others = _pending_and_others(store, scope, model, limit=1)
    return bool(rows), others


def _pending_and_others(
    store: SQLiteStore, scope: Principal, model: str, *, limit: int = _BATCH
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """(the next batch of records to embed for ``model``, the scope's other model ids)."""
    indexes = store.query_tuples(
        "SELECT model_id, last_rowid FROM vector_indexes WHERE tenant = ? AND principal = ? "
        "ORDER BY model_id",
        [scope.tenant, scope.principal],
    )
    mark = next((int(r[1]) for r in indexes if r[0] == model), 0)
    others = tuple(str(r[0]) for r in indexes if r[0] != model)
    return retrieval_sql(store).records_after(store, scope, mark, limit), others


def dense_search(
    store: SQLiteStore,
    scope: Principal,
    model: str,
    query_vector: Sequence[float],
    limit: int,
    *,
    probe: int = DEFAULT_PROBE,
) -> list[tuple[str, float]]:
    """Cosine top-``limit`` ``(record_id, similarity)`` among ``scope``'s vectors of ``model``.

    Reads the best cells until ``probe`` vectors are read (see the module doc); ties are
    broken by record id. Lifecycle is not filtered here: the caller's row fetch applies
    the live filter, so over-fetch when dead records may hold vectors.
    """
    q = np.asarray(query_vector, dtype=np.float32)
    norm = float(np.linalg.norm(q)) or 1.0
    q = q / norm
    index = _index(store, scope, model)
    base = (
        "SELECT record_id, vector FROM vectors WHERE tenant = ? AND principal = ? AND model_id = ?"
    )
    params: list[Any] = [scope.tenant, scope.principal, model]
    if index is None:
        rows = store.query_tuples(base, params)
    else:
        centroids, sizes = index
        if centroids.shape[1] != len(q):
            return []
        order = np.argsort(-np.einsum("ij,j->i", centroids, q), kind="stable")
        reach = int(np.searchsorted(np.cumsum(sizes[order]), probe)) + 1
        chosen = sorted(int(c) for c in order[:reach])
        marks = ", ".join("?" for _ in chosen)
        rows = store.query_tuples(f"{base} AND cell IN ({marks})", [*params, *chosen])
    if not rows:
        return []
    ids = [r[0] for r in rows]
    sims = _similarities([r[1] for r in rows], q)
    if sims is None:
        return []
    top = min(limit, len(rows))
    # Candidates at or above the limit-th score, then an exact sort with the id tie-break.
    part = np.argpartition(-sims, top - 1)[:top] if top < len(rows) else np.arange(len(rows))
    cut = float(sims[part].min())
    keep = np.nonzero(sims >= cut)[0].tolist()
    scores = sims.tolist()
    ranked = sorted(keep, key=lambda i: (-scores[i], ids[i]))[:limit]
    return [(ids[i], scores[i]) for i in ranked]
