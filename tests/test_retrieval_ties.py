"""Ranking never depends on the ids a store draws for its records.

A stage that cannot tell records apart (every record naming the one name asked about; texts
that score the same) gives them one shared rank in fusion, and equal fused scores order
newest first by event time, then by write order. Before, both fell back to the record id:
a store drawing random ids (the default) ranked the same conversation differently each
time it was written, and a benchmark with sequential ids measured a luckier order than
production gets.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest

from retold import Principal, RecordDraft, Store
from retold._retrieval import HybridRetriever, RetrievalConfig, _shared_ranks
from tests.conftest import STORE_KINDS, FixedClock, fresh_pg_schema, make_store

pytestmark = pytest.mark.anyio

SCOPE = Principal(tenant="t", principal="chat")

# Five turns that BM25 scores alike for "Luis" (same length, one mention each) and that the
# entity stage ties (one name), then turns that are about something else.
TEXTS = [
    "Luis bought a cheap bike yesterday",
    "Luis sold his blue car today",
    "Luis painted the old fence green",
    "Luis cooked a big paella again",
    "Luis fixed the broken kitchen tap",
    "The weather was lovely in the park",
    "We watched a film about whales",
]


def test_equal_scores_share_the_mean_of_their_places() -> None:
    ranked = [("a", 3.0), ("b", 2.0), ("c", 2.0), ("d", 2.0), ("e", 1.0), ("f", 1.0)]
    assert _shared_ranks(ranked) == [
        ("a", 3.0, 1.0),
        ("b", 2.0, 3.0),
        ("c", 2.0, 3.0),
        ("d", 2.0, 3.0),
        ("e", 1.0, 5.5),
        ("f", 1.0, 5.5),
    ]
    assert _shared_ranks([("x", 1.0), ("y", 0.5)]) == [("x", 1.0, 1.0), ("y", 0.5, 2.0)]
    assert _shared_ranks([]) == []


def ids(first: int, step: int) -> Callable[[], str]:
    """Ids counting up (step 1) or down (step -1) as records are written."""
    counter = itertools.count(first, step)
    return lambda: f"r{next(counter):06d}"


@contextmanager
def opened(kind: str, path: Path, clock: FixedClock, draw: Callable[[], str]) -> Iterator[Store]:
    with fresh_pg_schema() if kind == "postgresql" else nullcontext() as schema:
        path.mkdir()
        store = make_store(kind, path, schema, clock=clock, id_factory=draw)
        try:
            yield store
        finally:
            store.close()


async def ranked_texts(
    store: Store, query: str, config: RetrievalConfig, texts: Sequence[str] = TEXTS
) -> list[str]:
    """Write ``texts`` in order, then search them."""
    for text in texts:
        store.add(SCOPE, RecordDraft(text=text))
    result = await HybridRetriever(store, config=config).search(SCOPE, query, limit=10)
    return [c.record.text for c in result.candidates]


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize(
    "config",
    [RetrievalConfig(), RetrievalConfig(event_time_tie_break=False)],
    ids=["event-time-ties", "write-order-ties"],
)
async def test_the_same_conversation_ranks_the_same_whatever_its_ids(
    kind: str, config: RetrievalConfig, tmp_path: Path, clock: FixedClock
) -> None:
    """Written once with ids counting up and once counting down (one clock: every record
    has the same time), the ranking is the same, the tied turns newest written first."""
    with opened(kind, tmp_path / "up", clock, ids(1, 1)) as up:
        rising = await ranked_texts(up, "What has Luis been up to?", config)
    with opened(kind, tmp_path / "down", clock, ids(999_999, -1)) as down:
        falling = await ranked_texts(down, "What has Luis been up to?", config)
    assert rising == falling
    assert rising[:5] == TEXTS[4::-1]


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("common", [False, True], ids=["selective", "all-common"])
async def test_the_lexical_limit_keeps_the_newest_of_equal_scores(
    kind: str, common: bool, tmp_path: Path, clock: FixedClock
) -> None:
    """BM25 scores the five Luis turns alike; a lexical stage that keeps two keeps the two
    written last, whether the store's ids count up or down, and also when every query word
    is common (the bounded read of the newest postings)."""
    config = RetrievalConfig(
        lexical_limit=2,
        entity=False,
        relation_path=False,
        session_window=0,
        lexical_common_postings=4 if common else 2048,
    )
    kept = []
    for name, draw in (("up", ids(1, 1)), ("down", ids(999_999, -1))):
        with opened(kind, tmp_path / name, clock, draw) as store:
            kept.append(await ranked_texts(store, "Luis", config))
    assert kept[0] == kept[1] == [TEXTS[4], TEXTS[3]]


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("query", ["Luis", "Luis and Ana"], ids=["one-name", "two-names"])
async def test_the_entity_limit_keeps_the_newest_of_equal_scores(
    kind: str, query: str, tmp_path: Path, clock: FixedClock
) -> None:
    """The entity stage ties every record naming the same names; one that keeps two keeps
    the two written last, whether the store's ids count up or down: for one name (read in
    the index's order) and for several (summed, then cut)."""
    config = RetrievalConfig(
        entity_limit=2, entity_max_share=1.0, lexical=False, relation_path=False, session_window=0
    )
    texts = TEXTS if query == "Luis" else [t.replace("Luis", "Luis and Ana") for t in TEXTS]
    kept = []
    for name, draw in (("up", ids(1, 1)), ("down", ids(999_999, -1))):
        with opened(kind, tmp_path / name, clock, draw) as store:
            kept.append(await ranked_texts(store, query, config, texts))
    assert kept[0] == kept[1] == [texts[4], texts[3]]


class ByLength:
    """Test reranker: longer texts score higher; ``flat`` scores every text alike."""

    def __init__(self, flat: bool = False) -> None:
        self.flat = flat

    @property
    def model_id(self) -> str:
        return "test-length"

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        return [0.0 if self.flat else float(len(t)) for t in texts]


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_reranker_orders_records_that_fusion_tied(
    kind: str, tmp_path: Path, clock: FixedClock
) -> None:
    """The five Luis turns tie after fusion. The reranker's order is the result's, not
    handed back to the tie-break; a reranker that scores them alike keeps fusion's order."""
    config = RetrievalConfig(rerank=True, rerank_top_n=5, session_window=0)
    query = "What has Luis been up to?"
    with opened(kind, tmp_path / "s", clock, ids(1, 1)) as store:
        for text in TEXTS:
            store.add(SCOPE, RecordDraft(text=text))
        fused = HybridRetriever(store, config=config.model_copy(update={"rerank": False}))
        plain = [c.record.text for c in (await fused.search(SCOPE, query, limit=5)).candidates]
        for reranker, expected in (
            (ByLength(), sorted(TEXTS[:5], key=len, reverse=True)),
            (ByLength(flat=True), plain),
        ):
            retriever = HybridRetriever(store, config=config, reranker=reranker)
            got = (await retriever.search(SCOPE, query, limit=5)).candidates
            assert [c.record.text for c in got] == expected
            assert all("rerank" in c.paths for c in got)
            assert [c.score for c in got] == sorted((c.score for c in got), reverse=True)
