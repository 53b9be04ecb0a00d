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

Scoring reads the int8 codes straight into one matrix-vector product per cell (numpy's own
loop, not a BLAS call whose threads would contend for the cores at this size) and scales
each row's single result.

**The cell cache.** Reading a probe's ~2,000 rows out of SQLite is most of a query's dense
cost, so each store object (so each process) keeps the cells it has read as ready matrices
(ids, int8 codes, scales), least recently used dropped past ``CELL_CACHE_BYTES``. Every
change to a scope's vectors moves the scope's ``generation`` in ``vector_indexes`` in the
same transaction, and stamps each changed cell's ``version`` with it: a write or a
replacement (:func:`write_vectors`), a rebuild (all cells, and ``trained_generation`` for
the centroids), and a deletion through the purge trigger, whichever process deletes. A query
reads the generation (one indexed row); when it moved, it reads the cells' sizes and
versions (one statement, the centroids too after a rebuild) and drops the cached cells whose
version changed; then it uses a cached cell only when its version is the one just read. A
cell read from the store is cached under the version read before it, so its content is
never older than its label. A process's own writes keep its cache current: after a write
commits, each changed cell whose cached block was exactly its content before the write (its
version was the one the write read) is replaced by the block the write leaves, and a rebuild
leaves every new cell's block; other processes' writes only make this one re-read the cells
they changed. A chat turn's new records change one or two cells, so the rest stay cached;
nothing waits on the cache (its lock is held for dictionary work only), and every read
still goes through the store's bounded reads.

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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import numpy as np
import structlog

from ._errors import UsageError
from ._records import Principal
from ._retrieval_sql import retrieval_sql
from ._store import Store
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
    # Versions for the in-process cell cache (see the module doc): every change to a
    # scope's vectors moves its ``generation``; a cell's ``version`` is the generation of
    # its last change, and ``trained_generation`` the generation of the last rebuild. The
    # deletion trigger moves them too, whichever process deletes.
    """
    ALTER TABLE vector_cells ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE vector_indexes ADD COLUMN trained_generation INTEGER NOT NULL DEFAULT 0;
    DROP TRIGGER vectors_purge_deleted;
    CREATE TRIGGER vectors_purge_deleted AFTER UPDATE OF lifecycle ON records
    WHEN NEW.lifecycle = 'deleted'
    BEGIN
        UPDATE vector_indexes
            SET vector_count = vector_count - 1, generation = generation + 1
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND model_id IN (
                SELECT model_id FROM vectors
                WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id
            );
        UPDATE vector_cells
            SET version = (
                SELECT i.generation FROM vector_indexes i
                WHERE i.tenant = vector_cells.tenant AND i.principal = vector_cells.principal
                AND i.model_id = vector_cells.model_id
            )
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND EXISTS (
                SELECT 1 FROM vectors v
                WHERE v.tenant = NEW.tenant AND v.principal = NEW.principal
                AND v.record_id = NEW.id AND v.model_id = vector_cells.model_id
                AND v.cell = vector_cells.cell
            );
        DELETE FROM vectors
            WHERE tenant = NEW.tenant AND principal = NEW.principal AND record_id = NEW.id;
    END;
    """,
)


_READY: weakref.WeakSet[Store] = weakref.WeakSet()


def ensure_vector_schema(store: Store) -> None:
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


def _normalise(matrix: Any) -> Any:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


@dataclass(frozen=True)
class _IndexState:
    """What a query needs of a scope's index, as of one ``generation``.

    ``centroids`` is None while the scope is untrained (one implicit cell, read whole).
    ``sizes`` are the counts at the last build plus the vectors added since (deletions are
    not subtracted): they only decide how many cells a query reads. ``versions[c]`` is the
    generation of cell ``c``'s last change.
    """

    generation: int
    trained_generation: int
    centroids: Any | None
    sizes: Any
    versions: Any


@dataclass(frozen=True)
class _Block:
    """One cell's vectors as read: ids in key order (a numpy str array, so a search orders
    its ties without a Python object per vector), int8 codes (n x dims), row scales."""

    ids: Any
    codes: Any
    scales: Any

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes + self.ids.nbytes)


class _StoreCache:
    """Index states and cell blocks of one store object (so of one process), LRU-bounded.

    A cell block is used only while its version equals the cell's version read from the
    store for this query, and a state only while the scope's generation is unchanged: every
    change to a scope's vectors (a write, a rebuild, a deletion by the purge trigger, in any
    process) moves the generation and the changed cells' versions, so a cached block is
    never older than what the store holds. Blocks of changed cells are dropped as soon as a
    query sees the new generation, so a deleted record's vector does not outlive the
    deletion in memory past the scope's next search.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.states: dict[tuple[str, str, str], _IndexState] = {}
        self.blocks: OrderedDict[tuple[str, str, str, int | None], tuple[int, _Block]] = (
            OrderedDict()
        )
        self.nbytes = 0

    def get(self, key: tuple[str, str, str, int | None], version: int) -> _Block | None:
        with self.lock:
            hit = self.blocks.get(key)
            if hit is None or hit[0] != version:
                return None
            self.blocks.move_to_end(key)
            return hit[1]

    def put(self, key: tuple[str, str, str, int | None], version: int, block: _Block) -> None:
        with self.lock:
            old = self.blocks.get(key)
            if old is not None and old[0] > version:
                return  # a later version is cached already (versions only grow)
            old = self.blocks.pop(key, None)
            if old is not None:
                self.nbytes -= old[1].nbytes
            if block.nbytes > CELL_CACHE_BYTES:
                return
            self.blocks[key] = (version, block)
            self.nbytes += block.nbytes
            while self.nbytes > CELL_CACHE_BYTES:
                _, (_, evicted) = self.blocks.popitem(last=False)
                self.nbytes -= evicted.nbytes

    def set_state(self, key: tuple[str, str, str], state: _IndexState) -> None:
        """Record ``state`` and drop the scope's blocks it shows to be stale.

        A state older than the one recorded (a slower reader's) changes nothing, and a
        block newer than the state (left by this process's own later write) is kept.
        """
        with self.lock:
            known = self.states.get(key)
            if known is not None and known.generation > state.generation:
                return
            self.states[key] = state
            for bkey in [k for k in self.blocks if k[:3] == key]:
                version = self.blocks[bkey][0]
                cell = bkey[3]
                if cell is None:
                    stale = state.centroids is not None or version < state.generation
                else:
                    stale = (
                        state.centroids is None
                        or cell >= len(state.versions)
                        or version < int(state.versions[cell])
                    )
                if stale:
                    self.nbytes -= self.blocks.pop(bkey)[1].nbytes


#: Bytes of cell blocks (codes, scales and ids) one store object keeps in memory, least
#: recently used dropped first. 100,000 vectors of 384 dimensions take about 45 MB.
CELL_CACHE_BYTES = 128 * 1024 * 1024
_CACHE_KEY = "retold.vectors.cache"


def forget_scope(store: Store, scope: Principal) -> None:
    """Drop this process's cached index states and cell blocks of ``scope``, every model.

    :func:`retold.erase_principal` calls it once its transaction has committed, so the
    erased principal's vectors leave this process's memory at once; another process drops
    its copies on the scope's next search there (the erasure moved the generation).
    """
    cache = _cache(store)
    with cache.lock:
        for key in [k for k in cache.states if k[:2] == (scope.tenant, scope.principal)]:
            del cache.states[key]
        for bkey in [k for k in cache.blocks if k[:2] == (scope.tenant, scope.principal)]:
            cache.nbytes -= cache.blocks.pop(bkey)[1].nbytes


def _cache(store: Store) -> _StoreCache:
    """The store object's cache: one per store (:meth:`Store.shared`), gone when it closes."""
    return store.shared(_CACHE_KEY, _StoreCache)


def _index(store: Store, scope: Principal, model: str) -> _IndexState | None:
    """The scope's index state, or None when the scope has no vectors of ``model``.

    One indexed read of the generation per call; the cells' sizes and versions are read
    again only when it moved, and the centroids only after a rebuild (in the same statement
    as the generation, so the state is of one snapshot).
    """
    key = (scope.tenant, scope.principal, model)
    rows = store.query_tuples(
        "SELECT generation, trained_count FROM vector_indexes "
        "WHERE tenant = ? AND principal = ? AND model_id = ?",
        [scope.tenant, scope.principal, model],
    )
    if not rows:
        return None
    cache = _cache(store)
    with cache.lock:
        known = cache.states.get(key)
    if known is not None and known.generation == int(rows[0][0]):
        return known
    if int(rows[0][1]) == 0:
        state = _IndexState(int(rows[0][0]), 0, None, np.zeros(0, np.int64), np.zeros(0, np.int64))
        cache.set_state(key, state)
        return state
    trained = known.trained_generation if known is not None and known.centroids is not None else -1
    cells = store.query_tuples(
        "SELECT i.generation, i.trained_generation, c.size, c.version, "
        "CASE WHEN i.trained_generation = ? THEN NULL ELSE c.centroid END "
        "FROM vector_indexes i JOIN vector_cells c ON c.tenant = i.tenant "
        "AND c.principal = i.principal AND c.model_id = i.model_id "
        "WHERE i.tenant = ? AND i.principal = ? AND i.model_id = ? ORDER BY c.cell",
        [trained, scope.tenant, scope.principal, model],
    )
    if not cells:
        return None
    generation, trained_generation = int(cells[0][0]), int(cells[0][1])
    if cells[0][4] is None:
        assert known is not None
        centroids = known.centroids
    else:
        centroids = np.frombuffer(b"".join(c[4] for c in cells), dtype=np.float32).reshape(
            len(cells), -1
        )
    state = _IndexState(
        generation,
        trained_generation,
        centroids,
        np.asarray([int(c[2]) for c in cells], dtype=np.int64),
        np.asarray([int(c[3]) for c in cells], dtype=np.int64),
    )
    cache.set_state(key, state)
    return state


def vector_counts(store: Store, scope: Principal) -> dict[str, int]:
    """How many vectors each embedder model has in ``scope``."""
    ensure_vector_schema(store)
    rows = store.query(
        "SELECT model_id, COUNT(*) AS n FROM vectors WHERE tenant = ? AND principal = ? "
        "GROUP BY model_id ORDER BY model_id",
        [scope.tenant, scope.principal],
    )
    return {r["model_id"]: int(r["n"]) for r in rows}


def write_vectors(
    store: Store,
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
    # Blocks this write leaves exactly known, for the cache once the write has committed
    # (not when it joins an outer transaction, which may still roll back).
    warm: list[tuple[int | None, int, _Block]] = []
    through = not _in_write(store)
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
        live = retrieval_sql(store).live_ids(w, scope, record_ids)
        cells = _nearest_cells(store, scope, model, matrix)
        added: dict[int, int] = {}
        # The cells of the vectors replaced here change too (their versions move below).
        touched: set[int] = set()
        for at in range(0, len(record_ids), 900):
            chunk = list(record_ids[at : at + 900])
            touched.update(
                int(r["cell"])
                for r in w.query(
                    "SELECT cell FROM vectors WHERE tenant = ? AND principal = ? "
                    f"AND model_id = ? AND record_id IN ({', '.join('?' for _ in chunk)})",
                    [scope.tenant, scope.principal, model, *chunk],
                )
            )
        removed = 0
        # record id -> (cell, encoded vector) as stored by this write (the last one wins).
        stored: dict[str, tuple[int, bytes]] = {}
        for i, rid in enumerate(record_ids):
            removed += w.execute(
                "DELETE FROM vectors WHERE tenant = ? AND principal = ? AND record_id = ? "
                "AND model_id = ?",
                [scope.tenant, scope.principal, rid, model],
            ).rowcount
            stored.pop(rid, None)
            if rid in live:
                code = _encode(matrix[i])
                w.execute(
                    "INSERT INTO vectors (tenant, principal, model_id, cell, record_id, vector) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [scope.tenant, scope.principal, model, int(cells[i]), rid, code],
                )
                stored[rid] = (int(cells[i]), code)
                added[int(cells[i])] = added.get(int(cells[i]), 0) + 1
        for cell, n in sorted(added.items()):
            w.execute(
                "UPDATE vector_cells SET size = size + ? "
                "WHERE tenant = ? AND principal = ? AND model_id = ? AND cell = ?",
                [n, scope.tenant, scope.principal, model, cell],
            )
        touched.update(added)
        if touched and row and through:
            warm = _written_blocks(
                store, w, scope, model, row[0], touched, set(record_ids), stored, dims
            )
        if touched:
            # Readers' cached states and the changed cells' blocks are stale: move the
            # generation, and stamp the changed cells with it.
            w.execute(
                "UPDATE vector_indexes SET generation = generation + 1 "
                "WHERE tenant = ? AND principal = ? AND model_id = ?",
                [scope.tenant, scope.principal, model],
            )
            marks = ", ".join("?" for _ in touched)
            w.execute(
                "UPDATE vector_cells SET version = (SELECT i.generation FROM vector_indexes i "
                "WHERE i.tenant = ? AND i.principal = ? AND i.model_id = ?) "
                f"WHERE tenant = ? AND principal = ? AND model_id = ? AND cell IN ({marks})",
                [*([scope.tenant, scope.principal, model] * 2), *sorted(touched)],
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
        count = _index_counter(w, scope, model, "vector_count")
        trained = int(row[0]["trained_count"]) if row else 0
        if added and count >= 2 * max(trained, DEFAULT_PROBE):
            built = _train(w, scope, model)
            warm = built if through else []
    cache = _cache(store)
    for where, version, block in warm:
        cache.put((scope.tenant, scope.principal, model, where), version, block)


def _in_write(store: Store) -> bool:
    """Whether this thread is inside a write transaction of ``store`` (a write would join it)."""
    local = getattr(store, "_local", None)
    return getattr(local, "writer", None) is not None or getattr(local, "conn", None) is not None


def _block(ids: Sequence[str], blobs: Sequence[bytes], dims: int) -> _Block | None:
    """A block of ``(id, encoded vector)`` rows, in id order (None: a vector of another width)."""
    order = sorted(range(len(ids)), key=ids.__getitem__)
    joined = b"".join(blobs[i] for i in order)
    if len(joined) != len(ids) * (4 + dims):
        return None
    raw = np.frombuffer(joined, dtype=np.uint8).reshape(len(ids), 4 + dims)
    return _Block(
        ids=np.array([ids[i] for i in order], dtype=str),
        codes=np.ascontiguousarray(raw[:, 4:]).view(np.int8),
        scales=raw[:, :4].copy().view(np.float32).ravel(),
    )


def _written_blocks(
    store: Store,
    w: Any,
    scope: Principal,
    model: str,
    index: dict[str, Any],
    touched: set[int],
    replaced: set[str],
    stored: dict[str, tuple[int, bytes]],
    dims: int,
) -> list[tuple[int | None, int, _Block]]:
    """The touched cells' blocks after this write, for the cells whose cached block is
    exactly their content before it (inside ``w``, before the versions move).

    A cached block is that content when its version is the cell's version read here: a
    block is cached only under a version read before its rows, every change moves the
    version, and this transaction excludes other writers of the scope. The new blocks take
    the version this write stamps (the generation + 1).
    """
    cache = _cache(store)
    key = (scope.tenant, scope.principal, model)
    generation = int(index["generation"])
    if int(index["trained_count"]) == 0:
        before: dict[int | None, int] = {None: generation}
    else:
        marks = ", ".join("?" for _ in touched)
        before = {
            int(r["cell"]): int(r["version"])
            for r in w.query(
                "SELECT cell, version FROM vector_cells WHERE tenant = ? AND principal = ? "
                f"AND model_id = ? AND cell IN ({marks})",
                [*key, *sorted(touched)],
            )
        }
    out: list[tuple[int | None, int, _Block]] = []
    for cell, version in sorted(before.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        old = cache.get((*key, cell), version)
        if old is None:
            continue
        kept = np.isin(old.ids, sorted(replaced), invert=True)
        new = sorted(rid for rid, (c, _) in stored.items() if cell is None or c == cell)
        fresh = _block(new, [stored[rid][1] for rid in new], dims)
        if fresh is None or old.codes.shape[1] != dims:
            continue
        ids = np.concatenate([old.ids[kept], fresh.ids])
        order = np.argsort(ids, kind="stable")
        codes = np.concatenate([old.codes[kept], fresh.codes])[order]
        scales = np.concatenate([old.scales[kept], fresh.scales])[order]
        block = _Block(ids=ids[order], codes=codes, scales=scales)
        out.append((cell, generation + 1, block))
    return out


def _nearest_cells(store: Store, scope: Principal, model: str, matrix: Any) -> Any:
    index = _index(store, scope, model)
    if index is None or index.centroids is None or index.centroids.shape[1] != matrix.shape[1]:
        return np.zeros(len(matrix), dtype=np.int64)
    return np.argmax(matrix @ index.centroids.T, axis=1)


def _index_counter(
    w: Any, scope: Principal, model: str, column: Literal["vector_count", "generation"]
) -> int:
    """One counter of the scope's ``vector_indexes`` row, read inside the write ``w``."""
    rows = w.query(
        f"SELECT {column} FROM vector_indexes WHERE tenant = ? AND principal = ? AND model_id = ?",
        [scope.tenant, scope.principal, model],
    )
    return int(rows[0][column])


def _train(w: Any, scope: Principal, model: str) -> list[tuple[int | None, int, _Block]]:
    """Rebuild the scope's cells by spherical k-means and reassign every vector (in ``w``).

    Vectors are read in byte order, so the cells depend on the vectors alone, not on ids.
    Returns every new cell's block with its version, for the cache once ``w`` commits.
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
    w.execute(
        "UPDATE vector_indexes SET trained_count = ?, generation = generation + 1, "
        "trained_generation = generation + 1 "
        "WHERE tenant = ? AND principal = ? AND model_id = ?",
        [n, scope.tenant, scope.principal, model],
    )
    generation = _index_counter(w, scope, model, "generation")
    sizes = np.bincount(assign, minlength=k).tolist()
    for cell in range(k):
        w.execute(
            "INSERT INTO vector_cells (tenant, principal, model_id, cell, centroid, size, "
            "version) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                scope.tenant,
                scope.principal,
                model,
                cell,
                centroids[cell].tobytes(),
                sizes[cell],
                generation,
            ],
        )
    log.info("vector_index_built", model=model, vectors=n, cells=k)
    members: list[list[int]] = [[] for _ in range(k)]
    for i, cell in enumerate(assign.tolist()):
        members[cell].append(i)
    blocks: list[tuple[int | None, int, _Block]] = []
    for cell in range(k):
        block = _block(
            [rows[i]["record_id"] for i in members[cell]],
            [rows[i]["vector"] for i in members[cell]],
            dims,
        )
        if block is not None:
            blocks.append((cell, generation, block))
    return blocks


async def ensure_vectors(store: Store, scope: Principal, embedder: Embedder) -> tuple[str, ...]:
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


def pending_vectors(store: Store, scope: Principal, model: str) -> tuple[bool, tuple[str, ...]]:
    """(whether records of ``scope`` wait for a ``model`` vector, the scope's other models).

    One indexed read when none waits: the search path calls it on every query.
    """
    ensure_vector_schema(store)
    rows, others = _pending_and_others(store, scope, model, limit=1)
    return bool(rows), others


def _pending_and_others(
    store: Store, scope: Principal, model: str, *, limit: int = _BATCH
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


def _blocks(
    store: Store,
    scope: Principal,
    model: str,
    wanted: Sequence[tuple[int | None, int]],
    dims: int,
) -> list[_Block] | None:
    """The blocks of the ``(cell, version)`` pairs, from the cache or in one read of the rest.

    None when a stored vector's width is not ``dims``. A block read here is cached under
    the version the caller read before this read: its content is at least that new, and
    once the store's version moves on the cached block is no longer used.
    """
    cache = _cache(store)
    key = (scope.tenant, scope.principal, model)
    found: dict[int | None, _Block] = {}
    missing: list[tuple[int | None, int]] = []
    for cell, version in wanted:
        block = cache.get((*key, cell), version)
        if block is None:
            missing.append((cell, version))
        else:
            found[cell] = block
    if missing:
        sql = (
            "SELECT cell, record_id, vector FROM vectors "
            "WHERE tenant = ? AND principal = ? AND model_id = ?"
        )
        params: list[Any] = [*key]
        if missing[0][0] is not None:
            sql += f" AND cell IN ({', '.join('?' for _ in missing)})"
            params += [cell for cell, _ in missing]
        rows = store.query_tuples(sql + " ORDER BY cell, record_id", params)
        grouped: dict[int, tuple[list[str], list[bytes]]] = {}
        for cell_of, rid, blob in rows:
            entry = grouped.get(cell_of)
            if entry is None:
                entry = grouped[cell_of] = ([], [])
            entry[0].append(rid)
            entry[1].append(blob)
        for cell, version in missing:
            if cell is None:
                ids = [rid for c in sorted(grouped) for rid in grouped[c][0]]
                blobs = [blob for c in sorted(grouped) for blob in grouped[c][1]]
            else:
                ids, blobs = grouped.get(cell, ([], []))
            block = _block(ids, blobs, dims)
            if block is None:
                return None
            cache.put((*key, cell), version, block)
            found[cell] = block
    return [found[cell] for cell, _ in wanted]


def dense_search(
    store: Store,
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
    if index is None:
        return []
    # (cell, version) to read; cell None: the untrained scope's vectors, all of them.
    wanted: list[tuple[int | None, int]]
    if index.centroids is None:
        wanted = [(None, index.generation)]
    else:
        if index.centroids.shape[1] != len(q):
            return []
        order = np.argsort(-np.einsum("ij,j->i", index.centroids, q), kind="stable")
        reach = int(np.searchsorted(np.cumsum(index.sizes[order]), probe)) + 1
        wanted = [(c, int(index.versions[c])) for c in sorted(int(c) for c in order[:reach])]
    blocks = _blocks(store, scope, model, wanted, len(q))
    if blocks is None:
        return []  # vectors of another width: not comparable
    blocks = [b for b in blocks if len(b.ids)]
    if not blocks:
        return []
    # einsum, not ``@``: a matrix-vector product this small is slower through a
    # multi-threaded BLAS (its threads contend for the cores) than in numpy's own loop.
    sims = np.concatenate(
        [
            np.einsum("ij,j->i", b.codes, q, dtype=np.float32, casting="unsafe") * b.scales
            for b in blocks
        ]
    )
    n = len(sims)
    top = min(limit, n)
    # Candidates at or above the limit-th score, then an exact sort with the id tie-break.
    part = np.argpartition(-sims, top - 1)[:top] if top < n else np.arange(n)
    cut = float(sims[part].min())
    keep = np.nonzero(sims >= cut)[0]
    # Exact order among the kept, ties by id, in numpy: a degenerate query (every vector
    # equally far) ties thousands of rows at the cut.
    ids = np.concatenate([b.ids for b in blocks])[keep]
    scores = sims[keep]
    ranked = np.lexsort((ids, -scores))[:limit]
    return list(zip(ids[ranked].tolist(), scores[ranked].tolist(), strict=True))
