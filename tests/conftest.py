"""Shared fixtures: real SQLite files in tmp_path, both anyio backends, fixed clocks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog

from retold import Principal, SQLiteStore

# The test session is the host: keep library log lines out of the output, but leave every
# level enabled so structlog.testing.capture_logs sees them.
structlog.configure(logger_factory=structlog.ReturnLoggerFactory())


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every anyio test on asyncio and on trio."""
    return str(request.param)


class FixedClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


def counter_ids(prefix: str = "r") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter):06d}"


@pytest.fixture
def store(tmp_path: Path, clock: FixedClock) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "retold.db", clock=clock, id_factory=counter_ids())
    yield s
    s.close()


@pytest.fixture
def alice() -> Principal:
    return Principal(tenant="acme", principal="alice")


@pytest.fixture
def bob() -> Principal:
    return Principal(tenant="acme", principal="bob")
