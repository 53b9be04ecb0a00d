"""Provider adapters over httpx (installed as ``retold.adapters``).

One module per wire protocol, all behind one provider-neutral call::

    async with OpenAIChatAdapter("llama3.1:8b", base_url="http://localhost:11434/v1") as model:
        reply = await model.complete([ChatMessage.user("hi")], deadline=anyio.current_time() + 10)

:func:`from_env` builds the adapter the CLI, demo and examples use from ``RETOLD_PROVIDER``,
``RETOLD_BASE_URL``, ``RETOLD_MODEL`` and ``RETOLD_API_KEY``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

from retold._errors import UsageError

from ._base import (
    ChatAdapter,
    ChatMessage,
    Completion,
    MalformedResponseError,
    RetryPolicy,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
    parse_retry_after,
)
from .anthropic import AnthropicChatAdapter
from .chat import MEMORY_SEARCH_TOOL, CallbackModel, ChatReply, MemoryChat, MemorySearchArgs
from .local import OfflineResponder
from .openai import OpenAIChatAdapter
from .openai_embeddings import OpenAIEmbedder
from .rerank import HTTPReranker

__all__ = [
    "MEMORY_SEARCH_TOOL",
    "PROVIDERS",
    "AnthropicChatAdapter",
    "CallbackModel",
    "ChatAdapter",
    "ChatMessage",
    "ChatReply",
    "Completion",
    "HTTPReranker",
    "MalformedResponseError",
    "MemoryChat",
    "MemorySearchArgs",
    "OfflineResponder",
    "OpenAIChatAdapter",
    "OpenAIEmbedder",
    "RetryPolicy",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Usage",
    "from_env",
    "parse_retry_after",
]

PROVIDERS: tuple[str, ...] = ("anthropic", "openai")
"""Accepted values of ``RETOLD_PROVIDER`` (``openai`` means any OpenAI-compatible server)."""


def from_env(
    env: Mapping[str, str] | None = None,
    *,
    http_client: httpx.AsyncClient | None = None,
) -> ChatAdapter | None:
    """Build the chat adapter the environment describes, or ``None`` if it describes none.

    Reads ``RETOLD_PROVIDER`` (``openai`` (default) or ``anthropic``), ``RETOLD_BASE_URL``,
    ``RETOLD_MODEL`` and ``RETOLD_API_KEY``. Nothing is configured (``None``) when neither
    ``RETOLD_MODEL`` nor ``RETOLD_BASE_URL`` is set.

    Args:
        env: the variables to read; defaults to ``os.environ``.
        http_client: an ``httpx.AsyncClient`` for the adapter to borrow.

    Raises:
        UsageError: the variables are set but incomplete or invalid.
    """
    source = os.environ if env is None else env

    def get(name: str) -> str | None:
        value = source.get(name, "").strip()
        return value or None

    provider = (get("RETOLD_PROVIDER") or "openai").lower()
    base_url, model, api_key = get("RETOLD_BASE_URL"), get("RETOLD_MODEL"), get("RETOLD_API_KEY")
    if provider in ("openai-compatible", "openai_compatible"):
        provider = "openai"
    if provider not in PROVIDERS:
        raise UsageError(
            f"RETOLD_PROVIDER={provider!r} is not supported; use 'openai' (any "
            "OpenAI-compatible server) or 'anthropic'"
        )
    if model is None and base_url is None:
        return None
    if model is None:
        raise UsageError("RETOLD_BASE_URL is set but RETOLD_MODEL is not; set the model id too")
    if provider == "anthropic":
        if api_key is None and base_url is None:
            raise UsageError("RETOLD_PROVIDER=anthropic needs RETOLD_API_KEY")
        if base_url is None:
            return AnthropicChatAdapter(model, api_key=api_key, http_client=http_client)
        return AnthropicChatAdapter(
            model, api_key=api_key, base_url=base_url, http_client=http_client
        )
    if base_url is None:
        return OpenAIChatAdapter(model, api_key=api_key, http_client=http_client)
    return OpenAIChatAdapter(model, api_key=api_key, base_url=base_url, http_client=http_client)
