"""A per-key token bucket: ``rate`` requests per second on average, bursts up to ``burst``."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

__all__ = ["TokenBuckets"]


class TokenBuckets:
    """One token bucket per key id.

    Args:
        rate: tokens added per second.
        burst: bucket capacity (and its initial fill).
        clock: monotonic seconds (injected in tests).
    """

    def __init__(self, *, rate: float, burst: int, clock: Callable[[], float]) -> None:
        if not (rate > 0 and math.isfinite(rate)) or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0.0 when allowed, else the seconds until one is free."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
