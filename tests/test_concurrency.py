"""Several processes writing one fresh file at once: no 'database is locked', nothing lost."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from retold import Principal, RecordDraft, SQLiteStore

WRITERS = 6
PER_WRITER = 40


def _writer(path: str, n: int, start: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    start.wait()
    store = SQLiteStore(path)  # every process races to create the schema too
    scope = Principal(tenant="acme", principal=f"p{n % 2}")
    for i in range(PER_WRITER):
        store.add(scope, RecordDraft(text=f"writer {n} fact {i}", idempotency_key=f"{n}:{i}"))
        store.append_event(scope, "test.tick", actor=f"w{n}")
    store.close()


def test_concurrent_process_writers_lose_nothing(tmp_path: Path) -> None:
    """Six processes creating and writing one fresh database all succeed with every row kept."""
    path = str(tmp_path / "shared.db")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, n, start)) for n in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=90)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    store = SQLiteStore(path)
    total = sum(
        len(store.list_records(Principal(tenant="acme", principal=f"p{k}"))) for k in (0, 1)
    )
    assert total == WRITERS * PER_WRITER
    assert store.query("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    store.close()
