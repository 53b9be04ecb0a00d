"""Vector storage and the IVF index: scope, model keying, bounded reads, deletion, determinism."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

import retold._vectors as vectors
from retold import Principal, RecordDraft, SQLiteStore, UsageError
from retold._vectors import dense_search, vector_counts, write_vectors

SCOPE = Principal(tenant="acme", principal="alice")


def clustered(n: int, dims: int = 16, seed: int = 3) -> list[list[float]]:
    """``n`` vectors around four well-separated directions."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        v = [rng.gauss(0, 0.05) for _ in range(dims)]
        v[(i % 4) * 3] += 1.0
        out.append(v)
    return out


def filled(path: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[SQLiteStore, list[str]]:
    monkeypatch.setattr(vectors, "DEFAULT_PROBE", 8)  # train from 16 vectors on
    store = SQLiteStore(path)
    ids = [store.add(SCOPE, RecordDraft(text=f"note {i}")).id for i in range(n)]
    vecs = clustered(n)
    for at in range(0, n, 10):  # batches, as ensure_vectors writes them
        write_vectors(store, SCOPE, "m1", ids[at : at + 10], vecs[at : at + 10])
    return store, ids


def test_index_bounds_the_vectors_a_query_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past twice the probe size a scope is split into cells; a query reads only its nearest."""
    store, ids = filled(tmp_path / "v.db", 64, monkeypatch)
    cells = store.query("SELECT cell, size FROM vector_cells ORDER BY cell")
    trained = store.query("SELECT trained_count FROM vector_indexes")[0]["trained_count"]
    assert trained == 40  # built at 32+ (2 x 16), rebuilt at twice that: not yet at 64
    assert len(cells) == round(math.sqrt(trained)) and sum(c["size"] for c in cells) == 64
    read = _vector_reads(store, monkeypatch)
    store._shared.pop(vectors._CACHE_KEY, None)  # as another process would: nothing cached
    target = clustered(64)[5]
    got = dense_search(store, SCOPE, "m1", target, 3, probe=8)
    assert got[0][0] == ids[5] and got[0][1] > 0.99
    assert read and read[-1] < 64  # not every vector of the scope
    assert all(ids.index(rid) % 4 == 5 % 4 for rid, _ in got)


def test_index_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same vectors written the same way give the same cells, byte for byte."""
    a, _ = filled(tmp_path / "a.db", 40, monkeypatch)
    b, _ = filled(tmp_path / "b.db", 40, monkeypatch)
    sql = "SELECT cell, centroid, size FROM vector_cells ORDER BY cell"
    assert a.query(sql) == b.query(sql) and a.query(sql)


def test_vectors_are_keyed_by_model_and_scope(tmp_path: Path) -> None:
    """Another model's or principal's vectors are never searched; dimensions are checked."""
    store = SQLiteStore(tmp_path / "m.db")
    bob = Principal(tenant="acme", principal="bob")
    mine = store.add(SCOPE, RecordDraft(text="mine")).id
    his = store.add(bob, RecordDraft(text="his")).id
    write_vectors(store, SCOPE, "m1", [mine], [[1.0, 0.0]])
    write_vectors(store, bob, "m1", [his], [[1.0, 0.0]])
    write_vectors(store, SCOPE, "m2", [mine], [[0.0, 1.0, 0.0]])
    assert [r for r, _ in dense_search(store, SCOPE, "m1", [1.0, 0.0], 5)] == [mine]
    assert vector_counts(store, SCOPE) == {"m1": 1, "m2": 1}
    with pytest.raises(UsageError, match="dimension"):
        write_vectors(store, SCOPE, "m1", [mine], [[1.0, 0.0, 0.0]])
    assert vector_counts(store, SCOPE) == {"m1": 1, "m2": 1}  # nothing half-written


def test_deleting_a_record_removes_its_vectors_in_the_same_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deletion purges every model's vector of the record, and search no longer finds it."""
    store, ids = filled(tmp_path / "d.db", 32, monkeypatch)
    write_vectors(store, SCOPE, "m2", [ids[5]], [[1.0, 0.0]])
    SQLiteStore(tmp_path / "d.db").delete(SCOPE, ids[5])  # another connection
    assert store.query("SELECT 1 FROM vectors WHERE record_id = ?", [ids[5]]) == []
    got = dense_search(store, SCOPE, "m1", clustered(32)[5], 40, probe=64)
    assert ids[5] not in {r for r, _ in got} and len(got) == 31


def _vector_reads(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    read: list[int] = []
    real = store.query_tuples

    def spy(sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        rows = real(sql, params)
        if "FROM vectors" in sql:
            read.append(len(rows))
        return rows

    monkeypatch.setattr(store, "query_tuples", spy)
    return read


@pytest.mark.parametrize("n", [12, 64])  # untrained (read whole) and trained (cells)
def test_cached_cells_follow_writes_and_deletions_of_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """A repeated search reads no vector rows; a vector written or a record deleted through
    another store object (another process's connection) is seen by the next search, and a
    deleted record's vector leaves this process's cache."""
    store, ids = filled(tmp_path / "c.db", n, monkeypatch)
    target = clustered(n)[5]
    first = dense_search(store, SCOPE, "m1", target, 5, probe=8)
    read = _vector_reads(store, monkeypatch)
    assert dense_search(store, SCOPE, "m1", target, 5, probe=8) == first and read == []

    other = SQLiteStore(tmp_path / "c.db")
    new = other.add(SCOPE, RecordDraft(text="new note")).id
    write_vectors(other, SCOPE, "m1", [new], [target])
    got = dense_search(store, SCOPE, "m1", target, 5, probe=8)
    assert new in {r for r, _ in got} and read  # its cell was read again
    read.clear()
    assert dense_search(store, SCOPE, "m1", target, 5, probe=8) == got and read == []

    other.delete(SCOPE, ids[5])
    got = dense_search(store, SCOPE, "m1", target, 5, probe=8)
    assert ids[5] not in {r for r, _ in got} and new in {r for r, _ in got}
    cached = {rid for _, block in vectors._cache(store).blocks.values() for rid in block.ids}
    assert ids[5] not in cached and new in cached
    # Replacing a vector moves it to its new cell for every reader.
    write_vectors(other, SCOPE, "m1", [new], [clustered(n)[6]])
    moved = dense_search(store, SCOPE, "m1", clustered(n)[6], 3, probe=8)
    assert moved == dense_search(other, SCOPE, "m1", clustered(n)[6], 3, probe=8)
    assert new in {r for r, _ in moved}


def test_cell_cache_stays_within_its_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``CELL_CACHE_BYTES`` the least recently used cells are dropped, and searches
    give the same results either way."""
    store, _ = filled(tmp_path / "b.db", 64, monkeypatch)
    queries = clustered(64, seed=9)[:8]
    roomy = [dense_search(store, SCOPE, "m1", q, 4, probe=8) for q in queries]
    blocks = [block for _, block in vectors._cache(store).blocks.values()]
    monkeypatch.setattr(vectors, "CELL_CACHE_BYTES", 2000)
    store._shared.pop(vectors._CACHE_KEY, None)
    tight = [dense_search(store, SCOPE, "m1", q, 4, probe=8) for q in queries]
    cache = vectors._cache(store)
    assert tight == roomy and 0 < cache.nbytes <= 2000 < sum(b.nbytes for b in blocks)


@pytest.mark.parametrize("n", [12, 64])
def test_blocks_kept_by_writes_equal_what_a_read_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """The cells a process's own writes (and rebuilds) leave in its cache are exactly what a
    cold read of those cells gives; a write inside a transaction that rolls back leaves none."""
    store, ids = filled(tmp_path / "w.db", n, monkeypatch)
    for q in clustered(n, seed=5)[:6]:  # cache some cells by reading them
        dense_search(store, SCOPE, "m1", q, 4, probe=8)
    more = [store.add(SCOPE, RecordDraft(text=f"more {i}")).id for i in range(6)]
    vecs = clustered(n + 6, seed=11)
    # New vectors, a replaced one, and one id twice in a batch (the last one is stored).
    write_vectors(store, SCOPE, "m1", [*more[:3], ids[2], more[0]], vecs[:5])
    write_vectors(store, SCOPE, "m1", more[3:], vecs[5:8])
    cache = vectors._cache(store)
    warm = {key: (version, block) for key, (version, block) in cache.blocks.items()}
    assert warm
    cold = SQLiteStore(tmp_path / "w.db")
    state = vectors._index(cold, SCOPE, "m1")
    assert state is not None
    checked = 0
    for (_, _, model, cell), (version, block) in warm.items():
        trained = state.centroids is not None
        now = state.generation if cell is None else int(state.versions[cell])
        if (cell is None) == trained or version != now:
            continue  # stale: never used, dropped when this process next reads the state
        checked += 1
        read = vectors._blocks(cold, SCOPE, model, [(cell, now)], len(vecs[0]))
        assert read is not None and read[0].ids.tolist() == block.ids.tolist()
        assert read[0].codes.tobytes() == block.codes.tobytes()
        assert read[0].scales.tobytes() == block.scales.tobytes()
    assert checked
    with pytest.raises(RuntimeError), store.write():
        write_vectors(store, SCOPE, "m1", [more[1]], [clustered(n)[7]])
        raise RuntimeError("rolled back")
    got = dense_search(store, SCOPE, "m1", clustered(n)[7], 40, probe=64)
    assert dense_search(cold, SCOPE, "m1", clustered(n)[7], 40, probe=64) == got


def test_dense_search_orders_a_wide_tie_by_id(tmp_path: Path) -> None:
    """A query every vector is equally far from ties them all at the cut: the top
    ``limit`` are the smallest ids, in id order, whatever order they were written in
    (batches written after a search extend the cached block, as a live store does)."""
    store = SQLiteStore(tmp_path / "tie.db")
    ids = [store.add(SCOPE, RecordDraft(text=f"note {i}")).id for i in range(60)]
    shuffled = random.Random(5).sample(ids, len(ids))
    query = [0.0, 1.0, 0.0, 0.0]
    for at in range(0, len(shuffled), 10):
        batch = shuffled[at : at + 10]
        write_vectors(store, SCOPE, "m1", batch, [[1.0, 0.0, 0.0, 0.0]] * len(batch))
        got = dense_search(store, SCOPE, "m1", query, 5)
        assert [rid for rid, _ in got] == sorted(shuffled[: at + 10])[:5]
    assert {score for _, score in got} == {0.0}
