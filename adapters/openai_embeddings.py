"""OpenAI-compatible ``POST {base_url}/embeddings``, implementing ``retold.Embedder``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from retold._errors import UsageError

from ._base import RetryPolicy, _HTTPClientOwner, _HTTPSession, _malformed
from .openai import DEFAULT_OPENAI_BASE_URL

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder(_HTTPClientOwner):
    """Embeddings over the OpenAI wire protocol (OpenAI, vLLM, Ollama ``/v1``, LM Studio, llama.cpp).

    Satisfies :class:`retold.Embedder`. Inputs are sent in batches of ``batch_size``; every
    returned vector is checked to have ``dimensions`` finite floats, and a short or
    mis-sized answer raises rather than returning partial output.

    Args:
        model: the embedding model id.
        dimensions: the vector length this model returns (or that ``send_dimensions`` requests).
        base_url: endpoint root including ``/v1``.
        api_key: sent as ``Authorization: Bearer``; optional for local servers.
        http_client: an ``httpx.AsyncClient`` to borrow (never closed by the embedder).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for the response (per attempt).
        retry: retry policy for 429/5xx.
        batch_size: texts per request.
        send_dimensions: also send ``dimensions`` in the request (models that can shorten
            their vectors, e.g. ``text-embedding-3-*``).
        model_id: the identity vectors are stored under; defaults to ``model``, with
            ``@<dimensions>`` appended when ``send_dimensions`` shortens them.
        extra_headers: further headers to send on every request.
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        dimensions: int,
        base_url: str = DEFAULT_OPENAI_BASE_URL,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        batch_size: int = 64,
        send_dimensions: bool = False,
        model_id: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        if not model:
            raise UsageError("model must be a non-empty model id")
        if dimensions < 1:
            raise UsageError(f"dimensions must be >= 1, got {dimensions}")
        if batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._send_dimensions = send_dimensions
        self._model_id = model_id or (f"{model}@{dimensions}" if send_dimensions else model)
        self._headers = dict(extra_headers or {})
        self._http = _HTTPSession(
            provider=self.provider,
            base_url=base_url,
            api_key=api_key,
            http_client=http_client,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retry=retry or RetryPolicy(),
        )

    @property
    def model_id(self) -> str:
        """The identity stored with each vector; vectors of different ids never compare."""
        return self._model_id

    @property
    def dimensions(self) -> int:
        """Length of every returned vector."""
        return self._dimensions

    def _repr_fields(self) -> str:
        return f", dimensions={self._dimensions}"

    def _request_headers(self) -> dict[str, str]:
        headers = dict(self._headers)
        if self._http.api_key is not None:
            headers["authorization"] = f"Bearer {self._http.api_key.get_secret_value()}"
        return headers

    async def embed(
        self,
        texts: Sequence[str],
        *,
        deadline: float | None = None,
    ) -> list[list[float]]:
        """One vector per text, in order.

        Args:
            texts: the inputs (may be empty).
            deadline: absolute ``anyio.current_time()`` by which all batches must finish;
                see :meth:`retold.adapters.ChatAdapter.complete`.

        Raises:
            AdapterHTTPError: the provider failed, timed out or the deadline passed.
            MalformedResponseError: the answer has the wrong count, order or vector length.
        """
        if isinstance(texts, str):
            raise UsageError("embed takes a sequence of texts, not one string")
        out: list[list[float]] = []
        if not texts:
            return out
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            payload: dict[str, Any] = {"model": self.model, "input": batch}
            if self._send_dimensions:
                payload["dimensions"] = self._dimensions
            status, body = await self._http.post_json(
                "/embeddings",
                payload,
                headers=self._request_headers(),
                deadline=deadline,
            )
            out.extend(self._parse(status, body, len(batch)))
        return out

    def _parse(self, status: int, body: Any, expected: int) -> list[list[float]]:
        def bad(what: str) -> Exception:
            return _malformed(self.provider, status, body, what, self._http.scrub)

        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise bad("data is missing")
        if len(data) != expected:
            raise bad(f"{len(data)} embeddings for {expected} inputs")
        vectors: list[list[float] | None] = [None] * expected
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise bad(f"data[{position}] is not an object")
            index = item.get("index", position)
            if (
                not isinstance(index, int)
                or not 0 <= index < expected
                or vectors[index] is not None
            ):
                raise bad(f"data[{position}].index is missing, out of range or repeated")
            raw = item.get("embedding")
            if not isinstance(raw, list) or len(raw) != self._dimensions:
                size = len(raw) if isinstance(raw, list) else "no"
                raise bad(f"data[{position}] has {size} floats, expected {self._dimensions}")
            vector: list[float] = []
            for value in raw:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise bad(f"data[{position}] holds a non-number")
                if not math.isfinite(value):
                    raise bad(f"data[{position}] holds a non-finite number")
                vector.append(float(value))
            vectors[index] = vector
        return [v for v in vectors if v is not None]
