"""Small protocols that connect Retold's stages; each docstring says what an implementation must do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ._records import Candidate, Principal

__all__ = ["Embedder", "Reranker", "Retriever"]


@runtime_checkable
class Retriever(Protocol):
    """Proposes candidate records for one query.

    A conforming retriever filters on ``scope`` and on lifecycle (active, not superseded,
    not expired, not deleted) in the database before any record text is scored, never
    returns another principal's record whatever ``query`` or ``context`` say, returns at
    most ``limit`` candidates best first, and is deterministic for identical store contents
    and arguments (:class:`~retold.HybridRetriever` orders equal scores newest first,
    not by record id). ``context`` is the raw user
    turn, passed for features and audit; ``query`` (a gap query) drives the search.
    """

    async def retrieve(
        self,
        scope: Principal,
        query: str,
        *,
        context: str | None = None,
        limit: int = 8,
    ) -> Sequence[Candidate]: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors with one fixed model.

    ``model_id`` names the model and its version; vectors from different model ids must
    never be compared. ``embed`` returns one vector of ``dimensions`` floats per text, in
    order, and raises (rather than returning partial output) on failure.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, text) pairs for reordering; higher is more relevant.

    Returns one score per text, in order; must not drop, add or reorder texts.
    """

    @property
    def model_id(self) -> str: ...

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]: ...
