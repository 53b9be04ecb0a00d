"""The budgeted read of the injection-budget RFC: a ranked prefix within the token budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from retold import (
    BudgetedReader,
    Principal,
    RecordDraft,
    SQLiteStore,
    UsageError,
    token_counter,
)

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def add(store: SQLiteStore, scope: Principal, text: str, day: int, **kw: object) -> str:
    draft = RecordDraft.model_validate({"text": text, "event_time": T0 + timedelta(days=day), **kw})
    return store.add(scope, draft).id


@pytest.fixture
def reader(store: SQLiteStore) -> BudgetedReader:
    return BudgetedReader(store, token_counter("chars"))


async def test_recency_prefix_within_budget_in_the_advertised_unit(
    store: SQLiteStore, alice: Principal, reader: BudgetedReader
) -> None:
    """Recency returns newest first, stopping before the first entry that would overflow."""
    a = add(store, alice, "a" * 10, 1)
    b = add(store, alice, "b" * 10, 2)
    c = add(store, alice, "c" * 10, 3)
    out = await reader.list(alice, token_budget=25)
    assert [r.id for r in out.records] == [c, b]
    assert out.tokens_used == 20 and out.unit == "chars" and out.rank == "recency"
    everything = await reader.list(alice)
    assert [r.id for r in everything.records] == [c, b, a]


async def test_single_entry_over_budget_is_omitted_not_truncated(
    store: SQLiteStore, alice: Principal, reader: BudgetedReader
) -> None:
    """An entry alone over the budget is omitted whole; the rest of the prefix follows."""
    small = add(store, alice, "short", 1)
    big = add(store, alice, "x" * 500, 2)
    out = await reader.list(alice, token_budget=100)
    assert [r.id for r in out.records] == [small]
    assert out.omitted_over_budget == (big,)
    assert all(len(r.text) < 100 for r in out.records)


async def test_limit_and_budget_whichever_is_fewer(
    store: SQLiteStore, alice: Principal, reader: BudgetedReader
) -> None:
    """With both limit and token_budget, the one yielding fewer entries wins."""
    for day in range(5):
        add(store, alice, "0123456789", day)
    assert len((await reader.list(alice, token_budget=1000, limit=2)).records) == 2
    assert len((await reader.list(alice, token_budget=30, limit=4)).records) == 3
    assert (await reader.list(alice, token_budget=0)).records == ()


async def test_relevance_without_query_is_a_usage_error(
    alice: Principal, reader: BudgetedReader
) -> None:
    """rank='relevance' without a query is refused with a clear UsageError."""
    with pytest.raises(UsageError, match="needs query"):
        await reader.list(alice, rank="relevance")
    with pytest.raises(UsageError, match="needs query"):
        await reader.list(alice, rank="relevance", query="   ")
    with pytest.raises(UsageError):
        await reader.list(alice, rank="popularity")  # type: ignore[arg-type]


async def test_relevance_order_differs_from_recency(
    store: SQLiteStore, alice: Principal, reader: BudgetedReader
) -> None:
    """Relevance ranks the query's match first where recency puts the newest first."""
    match = add(store, alice, "the refund policy allows thirty days", 1)
    add(store, alice, "lunch was good", 2)
    add(store, alice, "weather is nice", 3)
    recency = await reader.list(alice, token_budget=1000)
    relevance = await reader.list(alice, token_budget=1000, rank="relevance", query="refund policy")
    assert recency.records[0].id != match
    assert relevance.records[0].id == match and relevance.rank == "relevance"


async def test_tag_filter_cross_tenant_and_redaction_hold(
    store: SQLiteStore, alice: Principal, reader: BudgetedReader
) -> None:
    """Tag filters apply; another tenant reads nothing; stored secrets come back redacted."""
    tagged = add(store, alice, "work item with token ghp_" + "A" * 36, 1, tags=["work"])
    add(store, alice, "home item", 2, tags=["home"])
    out = await reader.list(alice, token_budget=1000, tag="work")
    assert [r.id for r in out.records] == [tagged]
    assert "ghp_" not in out.records[0].text and "[REDACTED:" in out.records[0].text
    stranger = Principal(tenant="evil", principal="alice")
    assert (await reader.list(stranger, token_budget=1000)).records == ()
    assert (
        await reader.list(stranger, token_budget=1000, rank="relevance", query="work item")
    ).records == ()


async def test_expired_and_superseded_are_not_listed(
    store: SQLiteStore, alice: Principal, reader: BudgetedReader
) -> None:
    """The budgeted read lists live records only."""
    old = add(store, alice, "address: 1 Old Road", 1)
    new = add(store, alice, "address: 2 New Road", 2, supersedes=old)
    add(store, alice, "gone soon", 3, expires_at=store.clock() - timedelta(seconds=1))
    out = await reader.list(alice, token_budget=1000)
    assert [r.id for r in out.records] == [new]
