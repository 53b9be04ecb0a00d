"""A cross-encoder rerank endpoint over HTTP, implementing ``retold.Reranker``.

Two wire formats are spoken:

* ``cohere``: ``POST {base_url}/rerank`` with ``{"model", "query", "documents"}``, answered by
  ``{"results": [{"index", "relevance_score"}, ...]}``; Cohere, Jina, Voyage, vLLM and
  llama.cpp's ``--reranking`` server use it;
* ``tei``: ``POST {base_url}/rerank`` with ``{"query", "texts"}``, answered by
  ``[{"index", "score"}, ...]``; Hugging Face text-embeddings-inference uses it.

Every text must come back with exactly one finite score; anything else raises, so the
retriever never reorders on a partial answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx

from retold._errors import UsageError

from ._base import RetryPolicy, _HTTPClientOwner, _HTTPSession, _malformed

__all__ = ["HTTPReranker"]

RerankFormat = Literal["cohere", "tei"]


class HTTPReranker(_HTTPClientOwner):
    """Scores (query, text) pairs with a hosted cross-encoder.

    Args:
        model: the rerank model id (sent in the ``cohere`` format; part of ``model_id``).
        base_url: endpoint root; requests go to ``{base_url}/rerank``.
        wire_format: ``cohere`` (default) or ``tei``.
        api_key: sent as ``Authorization: Bearer``; optional for local servers.
        http_client: an ``httpx.AsyncClient`` to borrow (never closed by the reranker).
        connect_timeout / read_timeout: seconds.
        retry: retry policy for 429/5xx (never past the caller's deadline).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        wire_format: RerankFormat = "cohere",
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not model:
            raise UsageError("model must be a non-empty model id")
        if wire_format not in ("cohere", "tei"):
            raise UsageError(f"wire_format must be 'cohere' or 'tei', not {wire_format!r}")
        self.model = model
        self.wire_format: RerankFormat = wire_format
        self._http = _HTTPSession(
            provider=f"rerank-{wire_format}",
            base_url=base_url,
            api_key=api_key,
            http_client=http_client,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retry=retry or RetryPolicy(),
        )

    @property
    def model_id(self) -> str:
        return f"{self.wire_format}:{self.model}"

    def _repr_fields(self) -> str:
        return f", wire_format={self.wire_format!r}"

    def _headers(self) -> dict[str, str]:
        if self._http.api_key is None:
            return {}
        return {"authorization": f"Bearer {self._http.api_key.get_secret_value()}"}

    async def rerank(
        self, query: str, texts: Sequence[str], *, deadline: float | None = None
    ) -> list[float]:
        """One score per text, in the order given (higher is more relevant)."""
        if not texts:
            return []
        payload: Mapping[str, Any]
        if self.wire_format == "cohere":
            payload = {"model": self.model, "query": query, "documents": list(texts)}
        else:
            payload = {"query": query, "texts": list(texts), "raw_scores": False}
        status, body = await self._http.post_json(
            "/rerank", payload, headers=self._headers(), deadline=deadline
        )
        return self._scores(status, body, len(texts))

    def _scores(self, status: int, body: Any, n: int) -> list[float]:
        def bad(what: str) -> Exception:
            return _malformed(self._http.provider, status, body, what, self._http.scrub)

        items = body.get("results") if isinstance(body, dict) else body
        if not isinstance(items, list):
            raise bad("no list of results")
        key = "relevance_score" if self.wire_format == "cohere" else "score"
        scores: dict[int, float] = {}
        for item in items:
            if not isinstance(item, dict):
                raise bad("a result is not an object")
            index, score = item.get("index"), item.get(key)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
                raise bad(f"result index {index!r} is not one of the {n} texts")
            if index in scores:
                raise bad(f"text {index} was scored twice")
            if (
                not isinstance(score, int | float)
                or isinstance(score, bool)
                or not math.isfinite(score)
            ):
                raise bad(f"result {index} has no finite {key}")
            scores[index] = float(score)
        if len(scores) != n:
            raise bad(f"{n - len(scores)} of {n} texts came back without a score")
        return [scores[i] for i in range(n)]
