"""Assemble a :class:`Gateway` from what ``retold serve`` is given."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import httpx

from retold._errors import UsageError
from retold._keys import KeyFile
from retold._store import Store
from retold.adapters import AnthropicChatAdapter, ChatAdapter, OpenAIChatAdapter, RetryPolicy
from retold.adapters.chat import MemoryChat

from ._app import Gateway, GatewayConfig
from ._metrics import CountingModel, GatewayMetrics

__all__ = ["UPSTREAM_KEY_ENV", "build_gateway"]

UPSTREAM_KEY_ENV = "RETOLD_UPSTREAM_API_KEY"
"""The environment variable ``retold serve`` reads the upstream API key from."""

Provider = Literal["openai", "anthropic"]


def build_gateway(
    *,
    store: Store,
    keys: KeyFile,
    bundle: str,
    live: bool,
    upstream_base_url: str,
    upstream_model: str,
    upstream_provider: Provider = "openai",
    upstream_api_key: str | None = None,
    upstream_timeout_s: float = 60.0,
    upstream_retry: RetryPolicy | None = None,
    policy_timeout_ms: int | None = None,
    latency_budget_ms: int | None = None,
    config: GatewayConfig | None = None,
    http_client: httpx.AsyncClient | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> Gateway:
    """The gateway serving ``bundle`` over ``store`` against the upstream model.

    Shadow mode unless ``live``; live mode needs a passing fitness result for the bundle
    recorded in ``store`` (``retold fitness --bundle NAME --db DB --record``).
    ``policy_timeout_ms`` replaces the bundle's gap and admission timeouts (a slow local
    model needs more than the default 2 s, or every policy call times out and the turn
    answers with the baseline draft). ``latency_budget_ms`` replaces the bundle's default
    latency budget; a request's ``X-Retold-Latency-Budget-Ms`` still wins over it.

    Raises:
        UsageError: an unknown bundle or provider, a bad URL, or (``UnfittedBundleError``)
            ``live`` without a passing recorded fitness result.
    """
    from retold.policy.reference import get_bundle

    b = get_bundle(bundle)
    adapter: ChatAdapter
    if upstream_provider == "openai":
        adapter = OpenAIChatAdapter(
            upstream_model,
            base_url=upstream_base_url,
            api_key=upstream_api_key,
            http_client=http_client,
            read_timeout=upstream_timeout_s,
            retry=upstream_retry,
        )
    elif upstream_provider == "anthropic":
        adapter = AnthropicChatAdapter(
            upstream_model,
            base_url=upstream_base_url,
            api_key=upstream_api_key,
            http_client=http_client,
            read_timeout=upstream_timeout_s,
            retry=upstream_retry,
        )
    else:
        raise UsageError(
            f"upstream provider must be 'openai' or 'anthropic', not {upstream_provider!r}"
        )
    cfg = config or GatewayConfig(upstream_model=upstream_model)
    metrics = GatewayMetrics()
    model = CountingModel(adapter, metrics)
    overrides: dict[str, int] = {}
    if policy_timeout_ms is not None:
        overrides = {"gap_timeout_ms": policy_timeout_ms, "admission_timeout_ms": policy_timeout_ms}
    if latency_budget_ms is not None:
        overrides["latency_budget_ms"] = latency_budget_ms
    chat = MemoryChat.from_bundle(
        store=store, bundle=b, model=model, config=b.config(shadow=not live, **overrides)
    )
    return Gateway(chat, keys, cfg, metrics=metrics, clock=clock, wall_clock=wall_clock)
