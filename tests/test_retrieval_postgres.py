"""The retrieval and budgeted-read suites again, on PostgresStore.

The store-facing tests are imported and run with ``store`` bound to a PostgresStore in a
fresh schema, so one RetrievalConfig is checked to behave the same on both stores.
Collected only when ``RETOLD_TEST_POSTGRES_URL`` names a test cluster (see conftest).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from retold import HybridRetriever, PostgresStore, Principal

from .conftest import POSTGRES_URL, FixedClock, counter_ids, fresh_pg_schema
from .test_budgeted_read import (
    reader,
    test_expired_and_superseded_are_not_listed,
    test_limit_and_budget_whichever_is_fewer,
    test_recency_prefix_within_budget_in_the_advertised_unit,
    test_relevance_order_differs_from_recency,
    test_relevance_without_query_is_a_usage_error,
    test_single_entry_over_budget_is_omitted_not_truncated,
    test_tag_filter_cross_tenant_and_redaction_hold,
)
from .test_retrieval import (
    LEXICAL,
    add,
    test_backfill_fills_with_newest_when_few_found,
    test_common_words_leave_the_lexical_match_when_a_rarer_word_remains,
    test_conflicts_are_packed_as_an_annotated_pair,
    test_dedup_folds_identical_and_near_identical_keeping_provenance,
    test_dense_stage_and_model_change_is_detected_not_mixed,
    test_dense_vectors_are_embedded_once_per_record,
    test_entity_stage_matches_names,
    test_fusion_rrf_and_weighted_reward_multi_path,
    test_is_a_retriever_and_scope_is_enforced,
    test_records_are_built_only_for_the_returned_top_k,
    test_reranker_reorders_the_head,
    test_session_neighbours_are_added_with_decayed_scores,
    test_session_neighbours_never_bring_back_ambient_records,
    test_superseded_and_expired_are_excluded_by_default,
    test_tenant_scoping_changes_what_is_packed,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(POSTGRES_URL is None, reason="RETOLD_TEST_POSTGRES_URL is not set"),
]

__all__ = [
    "reader",
    "test_backfill_fills_with_newest_when_few_found",
    "test_common_words_leave_the_lexical_match_when_a_rarer_word_remains",
    "test_conflicts_are_packed_as_an_annotated_pair",
    "test_dedup_folds_identical_and_near_identical_keeping_provenance",
    "test_dense_stage_and_model_change_is_detected_not_mixed",
    "test_dense_vectors_are_embedded_once_per_record",
    "test_entity_stage_matches_names",
    "test_expired_and_superseded_are_not_listed",
    "test_fusion_rrf_and_weighted_reward_multi_path",
    "test_is_a_retriever_and_scope_is_enforced",
    "test_limit_and_budget_whichever_is_fewer",
    "test_recency_prefix_within_budget_in_the_advertised_unit",
    "test_records_are_built_only_for_the_returned_top_k",
    "test_relevance_order_differs_from_recency",
    "test_relevance_without_query_is_a_usage_error",
    "test_reranker_reorders_the_head",
    "test_session_neighbours_are_added_with_decayed_scores",
    "test_session_neighbours_never_bring_back_ambient_records",
    "test_single_entry_over_budget_is_omitted_not_truncated",
    "test_superseded_and_expired_are_excluded_by_default",
    "test_tag_filter_cross_tenant_and_redaction_hold",
    "test_tenant_scoping_changes_what_is_packed",
]


@pytest.fixture
def store(clock: FixedClock) -> Iterator[PostgresStore]:
    """A PostgresStore in a fresh schema, with the suite's fixed clock and ids."""
    assert POSTGRES_URL is not None
    with fresh_pg_schema() as schema:
        s = PostgresStore(POSTGRES_URL, schema=schema, clock=clock, id_factory=counter_ids())
        yield s
        s.close()


def test_same_config_ranks_alike_on_both_stores(tmp_path: Path, clock: FixedClock) -> None:
    """One corpus and one RetrievalConfig (lexical, then hybrid) rank the same records in the
    same order on SQLite and PostgreSQL."""
    import anyio

    from retold import RecordDraft, RetrievalConfig, SQLiteStore

    from .test_retrieval import HashEmbedder

    alice = Principal(tenant="acme", principal="alice")
    corpus = [
        "Caroline went to the LGBTQ support group on Tuesday",
        "Melanie painted a sunrise over the lake last summer",
        "Caroline is researching adoption agencies",
        "Melanie ran a charity race for mental health",
        "The support group gave Caroline courage to transition",
        "Melanie's kids love the beach and the pottery class",
        "Pottery class again: Melanie made a bowl for the kids",
    ]
    question = "What did Caroline do at the support group?"
    assert POSTGRES_URL is not None
    with fresh_pg_schema() as schema:
        lite = SQLiteStore(tmp_path / "a.db", clock=clock, id_factory=counter_ids())
        pg = PostgresStore(POSTGRES_URL, schema=schema, clock=clock, id_factory=counter_ids())
        for config, embedder in (
            (RetrievalConfig(dense=False), None),
            (RetrievalConfig(), HashEmbedder()),
        ):
            ranked = []
            for s in (lite, pg):
                if not s.list_records(alice):
                    for text in corpus:
                        s.add(alice, RecordDraft(text=text))
                retriever = HybridRetriever(s, config=config, embedder=embedder)
                result = anyio.run(lambda r=retriever: r.search(alice, question, limit=5))
                ranked.append([(c.record.id, sorted(c.paths)) for c in result.candidates])
            assert ranked[0] == ranked[1]
            assert len(ranked[0]) >= 3  # the Caroline records lead on both
            assert {rid for rid, _ in ranked[0][:3]} == {"r000001", "r000003", "r000005"}
        lite.close()
        pg.close()


def test_concurrent_indexers_embed_and_index_each_record_once() -> None:
    """Four processes' worth of stores search one new scope at once: every record gets one
    vector and its entity names, and no indexer fails on another's uncommitted rows."""
    import threading

    import anyio

    from retold import RecordDraft, RetrievalConfig

    from .test_retrieval import HashEmbedder

    alice = Principal(tenant="acme", principal="alice")
    assert POSTGRES_URL is not None
    with fresh_pg_schema() as schema:
        stores = [PostgresStore(POSTGRES_URL, schema=schema) for _ in range(4)]
        for i in range(40):
            stores[0].add(alice, RecordDraft(text=f"Trip {i} to Lisbon with Margarethe"))
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def search(store: PostgresStore) -> None:
            retriever = HybridRetriever(store, config=RetrievalConfig(), embedder=HashEmbedder())
            start.wait()
            try:
                anyio.run(lambda: retriever.search(alice, "Lisbon trip"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=search, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        counts = stores[0].query("SELECT record_id, COUNT(*) AS n FROM vectors GROUP BY record_id")
        assert len(counts) == 40 and {c["n"] for c in counts} == {1}
        named = stores[0].query("SELECT COUNT(DISTINCT record_id) AS n FROM retrieval_entities")
        assert named == [{"n": 40}]
        for s in stores:
            s.close()


async def test_a_shared_store_counts_common_words_in_the_principals_own_rows(
    store: PostgresStore, alice: Principal, bob: Principal
) -> None:
    """On PostgreSQL too, whether a word is common is counted in the principal's own rows
    when others hold most of the store: bob writing "weekend" and "pottery" a hundred times
    leaves both selective words of alice's, so both still rank her notes; counted over the
    whole table (a store mostly hers) both would be common."""
    plans = [add(store, alice, "weekend hike with Ada"), add(store, alice, "weekend market")]
    other = add(store, alice, "pottery class on Tuesday")
    for i in range(100):
        add(store, bob, f"bob's weekend pottery {i}")
    cfg = LEXICAL.model_copy(update={"entity": False, "lexical_common_postings": 3})
    retriever = HybridRetriever(store, config=cfg)
    assert retriever._common_terms(["weekend", "pottery"], alice) == frozenset()
    assert retriever._common_terms(["weekend", "pottery"], None) == {"weekend", "pottery"}
    got = await retriever.search(alice, "weekend pottery", limit=10)
    assert {c.record.id for c in got.candidates} == {*plans, other}
    # A word with no lexeme (punctuation only) is never common.
    assert retriever._common_terms(["--"], None) == frozenset()


async def test_an_all_common_query_scores_its_matches_among_the_newest_rows(
    store: PostgresStore, alice: Principal
) -> None:
    """On PostgreSQL a query made only of common words scores the newest matches among the
    scope's newest NEWEST_WINDOW x lexical_common_postings rows (read on the scope's rowid
    index, so its cost does not grow with the scope): an older match outside that window
    is not scored, even when the window holds fewer matches than the cap."""
    from retold._store_postgres import NEWEST_WINDOW

    old = [add(store, alice, f"weekend note {i}") for i in range(5)]
    for i in range(3 * NEWEST_WINDOW):
        add(store, alice, f"garden chores {i}")
    new = add(store, alice, "weekend plans")
    cfg = LEXICAL.model_copy(update={"entity": False, "lexical_common_postings": 3})
    retriever = HybridRetriever(store, config=cfg)
    assert retriever._common_terms(["weekend"], None) == {"weekend"}
    got = await retriever.search(alice, "weekend", limit=10)
    assert [c.record.id for c in got.candidates] == [new]
    # With a cap that keeps the word selective, every match is scored.
    wide = cfg.model_copy(update={"lexical_common_postings": 100})
    got = await HybridRetriever(store, config=wide).search(alice, "weekend", limit=10)
    assert {c.record.id for c in got.candidates} == {new, *old}
