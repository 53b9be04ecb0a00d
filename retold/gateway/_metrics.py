"""The gateway's Prometheus metrics, on a registry of their own (never the global one)."""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from retold._audit import DecisionWriter

__all__ = ["CONTENT_TYPE_LATEST", "CountingModel", "GatewayMetrics", "TurnUsage"]

_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_CALL_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15)


@dataclass(slots=True)
class TurnUsage:
    """What one turn cost upstream: every model call made for it (the draft, the policies'
    calls, the regeneration, tool rounds), and the tokens the upstream reported for those
    that answered (a call that failed reports none)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_openai(self) -> dict[str, int]:
        """OpenAI's ``usage`` object."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


# The turn being served; set per request, inherited by the tasks it starts.
_turn_usage: contextvars.ContextVar[TurnUsage | None] = contextvars.ContextVar(
    "retold_gateway_turn_usage", default=None
)


class GatewayMetrics:
    """Counters and histograms an operator scrapes at ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "retold_gateway_requests",
            "HTTP requests answered, by route and status code.",
            ["route", "status"],
            registry=r,
        )
        self.turn_seconds = Histogram(
            "retold_gateway_turn_seconds",
            "Wall time of one chat turn through Retold, by disposition.",
            ["disposition"],
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.turn_model_calls = Histogram(
            "retold_gateway_turn_model_calls",
            "Upstream model calls made for one chat turn (drafts, policies, regeneration, tools).",
            buckets=_CALL_BUCKETS,
            registry=r,
        )
        self.model_calls = Counter(
            "retold_gateway_model_calls",
            "Upstream model calls, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.upstream_tokens = Counter(
            "retold_gateway_upstream_tokens",
            "Tokens the upstream reported for the calls it answered, by kind (prompt or "
            "completion); session ends (extraction) included.",
            ["kind"],
            registry=r,
        )
        self.rate_limited = Counter(
            "retold_gateway_rate_limited", "Requests refused by the per-key rate limit.", registry=r
        )
        self.sessions_ended = Counter(
            "retold_gateway_sessions_ended",
            "Sessions ended (extraction and activation run), by trigger and outcome.",
            ["trigger", "outcome"],
            registry=r,
        )

        self.structured_output = Gauge(
            "retold_gateway_upstream_structured_output_mode",
            "1 for the structured-output mode the upstream accepted (json_schema, json_object, "
            "prompt); absent until a structured call succeeded.",
            ["mode"],
            registry=r,
        )

    def watch_decisions(self, writer: DecisionWriter) -> None:
        """Expose the store's turn-decision writer, read at each scrape: decisions written
        and failed (each turn's audit row; a failure is a turn with no record), and those
        handed over and not written yet."""
        self.registry.register(_DecisionWriterCollector(writer))

    def observe_structured_output(self, mode: str | None) -> None:
        """Record the structured-output mode the upstream accepted (None: not known yet)."""
        if mode is None:
            return
        for known in ("json_schema", "json_object", "prompt"):
            self.structured_output.labels(mode=known).set(1 if known == mode else 0)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)

    @staticmethod
    def start_turn() -> tuple[TurnUsage, contextvars.Token[TurnUsage | None]]:
        """Begin counting this turn's model calls and tokens (in the current context)."""
        usage = TurnUsage()
        return usage, _turn_usage.set(usage)

    @staticmethod
    def end_turn(token: contextvars.Token[TurnUsage | None]) -> None:
        _turn_usage.reset(token)


class CountingModel:
    """A chat model wrapper counting calls and reported tokens for the metrics and the
    turn's ``usage``; everything else passes through."""

    def __init__(self, inner: Any, metrics: GatewayMetrics) -> None:
        self._inner = inner
        self._metrics = metrics
        self.model = getattr(inner, "model", "upstream")
        self.provider: str = getattr(inner, "provider", "")
        self.base_url: str | None = getattr(inner, "base_url", None)
        self.supports_tools = getattr(inner, "supports_tools", True)
        self.max_temperature: float = getattr(inner, "max_temperature", 2.0)

    @property
    def inner(self) -> Any:
        """The wrapped adapter."""
        return self._inner

    async def complete(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        turn = _turn_usage.get()
        if turn is not None:
            turn.calls += 1
        try:
            result = await self._inner.complete(messages, **kwargs)
        except Exception:
            self._metrics.model_calls.labels(outcome="error").inc()
            raise
        self._metrics.model_calls.labels(outcome="ok").inc()
        usage = getattr(result, "usage", None)
        prompt = int(getattr(usage, "input_tokens", 0) or 0)
        completion = int(getattr(usage, "output_tokens", 0) or 0)
        self._metrics.upstream_tokens.labels(kind="prompt").inc(prompt)
        self._metrics.upstream_tokens.labels(kind="completion").inc(completion)
        if turn is not None:
            turn.prompt_tokens += prompt
            turn.completion_tokens += completion
        return result

    async def aclose(self) -> None:
        await self._inner.aclose()


class _DecisionWriterCollector(Collector):
    def __init__(self, writer: DecisionWriter) -> None:
        self._writer = writer

    def collect(self) -> list[Metric]:
        w = self._writer
        written = CounterMetricFamily(
            "retold_gateway_decisions_written", "Turn decisions written to the audit log."
        )
        written.add_metric([], w.written)
        failed = CounterMetricFamily(
            "retold_gateway_decisions_failed",
            "Turn decisions that could not be written (logged as turn_decision_write_failed).",
        )
        failed.add_metric([], w.failed)
        pending = GaugeMetricFamily(
            "retold_gateway_decisions_pending",
            "Turn decisions handed to the writer and not written yet.",
            value=w.pending(),
        )
        return [written, failed, pending]
