"""Deadlines on the turn path: the instant after which a stage's (or the turn's) work stops.

The orchestrator makes a :class:`Deadline` per stage, and one for the turn's latency budget,
and installs it with :func:`bounded_by`. Everything below reads it from the context: the
stores interrupt SQL and clamp lock waits to it, and Python work between statements
(scoring, fusion, indexing steps) calls :func:`check_deadline`.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ._errors import DeadlineExceeded

__all__ = ["Deadline", "bounded_by", "check_deadline", "current_deadline"]


class Deadline:
    """An instant on ``time.monotonic()`` after which SQL on the turn path is interrupted.

    The orchestrator makes one per stage (and one for the turn's latency budget, whose
    instant is known only when the draft completes, so it can be tightened later) and
    installs it with :func:`bounded_by`. While it is installed, every read of a
    :class:`~retold._store.SQLiteStore` in that context (worker threads included: anyio copies the context
    into them) runs under a SQLite progress handler that aborts the statement once the
    deadline has passed, and every lock wait (the store's own lock, SQLite's busy timeout)
    is clamped to the time left. A statement cut short raises :class:`DeadlineExceeded`.

    Args:
        at: the instant, in ``time.monotonic()`` seconds (``math.inf``: not yet known).
        kind: what the deadline is (``"budget"`` or ``"timeout"``); reported with the error.
        parent: an enclosing deadline that also applies (the turn's budget for a stage).
    """

    __slots__ = ("_expired", "at", "kind", "parent")

    def __init__(
        self, at: float = math.inf, *, kind: str = "timeout", parent: Deadline | None = None
    ) -> None:
        self.at = at
        self.kind = kind
        self.parent = parent
        self._expired = False

    @classmethod
    def after(
        cls, seconds: float, *, kind: str = "timeout", parent: Deadline | None = None
    ) -> Deadline:
        """A deadline ``seconds`` from now (``math.inf``: none of its own)."""
        return cls(time.monotonic() + seconds, kind=kind, parent=parent)

    def tighten(self, at: float) -> None:
        """Move the instant earlier (never later)."""
        self.at = min(self.at, at)

    def expire(self) -> None:
        """Pass the deadline now (the turn was cancelled or its stage gave up)."""
        self._expired = True

    def binding(self) -> Deadline | None:
        """The deadline of this chain that has passed (None while none has)."""
        now = time.monotonic()
        node: Deadline | None = self
        while node is not None:
            if node._expired or now >= node.at:
                return node
            node = node.parent
        return None

    def passed(self) -> bool:
        """True once this deadline or an enclosing one has passed (the progress handler)."""
        return self.binding() is not None

    def remaining(self) -> float:
        """Seconds left before the earliest deadline of the chain (<= 0 when passed)."""
        now = time.monotonic()
        left = math.inf
        node: Deadline | None = self
        while node is not None:
            if node._expired:
                return 0.0
            left = min(left, node.at - now)
            node = node.parent
        return left

    def exceeded(self, what: str) -> DeadlineExceeded:
        """The error to raise for ``what`` cut short by this deadline chain."""
        hit = self.binding() or self
        return DeadlineExceeded(hit.kind, f"{what} was interrupted at its {hit.kind} deadline")


_ACTIVE_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "retold_deadline", default=None
)


@contextmanager
def bounded_by(deadline: Deadline | None) -> Iterator[None]:
    """Bound every store read and lock wait in this context (and its threads) by ``deadline``."""
    token = _ACTIVE_DEADLINE.set(deadline)
    try:
        yield
    finally:
        _ACTIVE_DEADLINE.reset(token)


def current_deadline() -> Deadline | None:
    """The deadline installed by :func:`bounded_by` in this context, if any."""
    return _ACTIVE_DEADLINE.get()


def check_deadline(what: str) -> None:
    """Raise :class:`DeadlineExceeded` if this context's deadline has passed.

    For Python work between statements (scoring, fusion) that no progress handler sees.
    """
    deadline = _ACTIVE_DEADLINE.get()
    if deadline is not None and deadline.passed():
        raise deadline.exceeded(what)
