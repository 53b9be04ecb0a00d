"""Shared fixtures: real SQLite files in tmp_path, both anyio backends, fixed clocks.

PostgreSQL: when ``RETOLD_TEST_POSTGRES_URL`` names a database (``.ci/run`` starts a
throwaway cluster and sets it), the store conformance tests run on both stores, each
PostgreSQL test in a fresh schema that is dropped afterwards. Without it they run on SQLite
only, and the run says so in one line.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog

from retold import PostgresStore, Principal, SQLiteStore, Store

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


POSTGRES_URL = os.environ.get("RETOLD_TEST_POSTGRES_URL") or None
if os.environ.get("CI") and POSTGRES_URL is None:
    # .ci/run starts a cluster for every run: without it the store tests would pass on
    # SQLite alone and say so in one line nobody reads.
    raise pytest.UsageError("CI is set but RETOLD_TEST_POSTGRES_URL is not: start .ci/run")
STORE_KINDS = ["sqlite", "postgresql"] if POSTGRES_URL else ["sqlite"]
# PostgreSQL-only tests are not collected at all without a cluster: the one summary line
# below says so, instead of a skip line per test.
collect_ignore = (
    []
    if POSTGRES_URL
    else ["test_store_postgres.py", "test_retrieval_postgres.py", "test_pipeline_postgres.py"]
)
_schemas = itertools.count(1)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say in one line which stores the conformance suite ran on."""
    if POSTGRES_URL:
        terminalreporter.write_line("store tests ran on SQLite and PostgreSQL")
    else:
        terminalreporter.write_line(
            "RETOLD_TEST_POSTGRES_URL is not set: store tests ran on SQLite only"
        )


@contextmanager
def fresh_pg_schema() -> Iterator[str]:
    """A new, empty PostgreSQL schema name in the test cluster, dropped on exit."""
    import psycopg
    from psycopg import sql

    assert POSTGRES_URL is not None
    name = f"t{os.getpid()}_{next(_schemas)}"
    try:
        yield name
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test (skips when no test cluster is configured)."""
    if POSTGRES_URL is None:
        pytest.skip("RETOLD_TEST_POSTGRES_URL is not set")
    with fresh_pg_schema() as name:
        yield name


def make_store(kind: str, tmp_path: Path, schema: str | None, **kw: object) -> Store:
    """Open a store of ``kind`` on a file in ``tmp_path`` or in PostgreSQL ``schema``."""
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "retold.db", **kw)  # type: ignore[arg-type]
    assert POSTGRES_URL is not None
    return PostgresStore(POSTGRES_URL, schema=schema, **kw)  # type: ignore[arg-type]


def need_readable(data_dir: Path) -> None:
    """The on-disk checks read the cluster's files: skipped where this user cannot (a
    cluster owned by someone else), never in CI, whose cluster this user started."""
    if not os.access(data_dir, os.R_OK | os.X_OK):
        message = f"the cluster's data directory {data_dir} is not readable here"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def postgres_table_files(store: PostgresStore) -> dict[str, list[Path]]:
    """The files of every table, index and TOAST relation of ``store``'s schema, by
    relation name, after a checkpoint (so what the server wrote is on disk)."""
    import psycopg

    store.checkpoint()
    rows = store.query(
        "SELECT r.relname AS name, pg_relation_filepath(r.oid) AS path "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_class r ON r.oid IN (c.oid, c.reltoastrelid) "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i') "
        "AND pg_relation_filepath(r.oid) IS NOT NULL"
    )
    assert POSTGRES_URL is not None
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        found = conn.execute("SHOW data_directory").fetchone()
    assert found is not None
    data_dir = Path(found[0])
    need_readable(data_dir)
    return {r["name"]: sorted(data_dir.glob(r["path"] + "*")) for r in rows}


@pytest.fixture(params=STORE_KINDS)
def any_store(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Store]:
    """The conformance-suite store: SQLite, and PostgreSQL when a test cluster is configured."""
    kind = str(request.param)
    if kind == "sqlite":
        s = make_store(kind, tmp_path, None, clock=clock, id_factory=counter_ids())
        yield s
        s.close()
        return
    with fresh_pg_schema() as schema:
        s = make_store(kind, tmp_path, schema, clock=clock, id_factory=counter_ids())
        yield s
        s.close()


@pytest.fixture(params=["per_turn", "entered"])
def task_modes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test twice: each turn in a task group of its own, and each turn through an
    entered orchestrator (every call enters it, unless a call already in flight did)."""
    if request.param == "entered":
        from retold import UtilityAwareOrchestrator

        original = UtilityAwareOrchestrator.prepare_turn

        async def prepare_turn(self: UtilityAwareOrchestrator, *args: Any, **kwargs: Any) -> Any:
            if self._group is not None:
                return await original(self, *args, **kwargs)
            async with self:
                return await original(self, *args, **kwargs)

        monkeypatch.setattr(UtilityAwareOrchestrator, "prepare_turn", prepare_turn)
    return str(request.param)
