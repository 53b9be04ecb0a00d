"""The budgeted read of the injection-budget RFC: the longest prefix of a scope's live
records, ranked by recency or by relevance, within a token budget and a count.

Recency pages through the store newest first, so a small budget never reads the whole
scope; relevance delegates to the retriever (the one search surface). An entry that alone
exceeds the budget is omitted and named, never truncated; after the first entry that does
not fit, nothing more is taken (a prefix).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict

from ._errors import UsageError
from ._records import Principal, Record
from ._retrieval import HybridRetriever, RetrievalConfig, _columns, _live_filter
from ._retrieval_sql import retrieval_sql
from ._store import Store, _row_to_record
from ._tokens import TokenCounter

__all__ = ["BudgetedList", "BudgetedReader"]


class BudgetedList(BaseModel):
    """The result of a budgeted read.

    Attributes:
        records: a prefix of the ranked list (over-budget single entries removed first).
        tokens_used: cumulative tokens of the returned entries' text in ``unit``.
        token_budget: the budget asked for (None when unbounded).
        unit: the token-counter unit the budget is denominated in.
        rank: the ranking used.
        omitted_over_budget: ids of entries that alone exceed the budget.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    records: tuple[Record, ...]
    tokens_used: int
    token_budget: int | None
    unit: str
    rank: Literal["recency", "relevance"]
    omitted_over_budget: tuple[str, ...] = ()


class BudgetedReader:
    """``list(scope, token_budget=..., rank=..., query=..., limit=..., tag=...)``.

    Recency order reads the store newest first; relevance delegates to the retriever (the
    one search surface), so it ranks only live, redacted, single-scope records.

    Args:
        store: the store to read.
        counter: the token counter whose unit the budget is denominated in.
        retriever: the relevance search; a lexical :class:`HybridRetriever` by default.
    """

    def __init__(
        self,
        store: Store,
        counter: TokenCounter,
        *,
        retriever: HybridRetriever | None = None,
    ) -> None:
        self.store = store
        self.counter = counter
        self.retriever = retriever or HybridRetriever(store)

    @property
    def unit(self) -> str:
        return self.counter.unit

    async def list(
        self,
        scope: Principal,
        *,
        token_budget: int | None = None,
        rank: Literal["recency", "relevance"] = "recency",
        query: str | None = None,
        limit: int | None = None,
        tag: str | None = None,
    ) -> BudgetedList:
        """Return the longest prefix of the ranked entries within ``limit`` and ``token_budget``.

        Raises:
            UsageError: ``rank="relevance"`` without a query, an unknown rank, or a negative
                limit or budget.
        """
        if rank not in ("recency", "relevance"):
            raise UsageError(f"rank must be 'recency' or 'relevance', not {rank!r}")
        if rank == "relevance" and not (query and query.strip()):
            raise UsageError(
                "rank='relevance' needs query=<text>: relevance is ranked against a query; "
                "pass one, or use rank='recency'"
            )
        if limit is not None and limit < 0:
            raise UsageError(f"limit must be >= 0, not {limit}")
        if token_budget is not None and token_budget < 0:
            raise UsageError(f"token_budget must be >= 0, not {token_budget}")
        if rank == "recency":
            source: Iterable[Record] = _Pages(self, scope, tag)
        else:
            assert query is not None
            result = await self.retriever.search(scope, query, limit=max(limit or 0, 500))
            source = [c.record for c in result.candidates if tag is None or tag in c.record.tags]
        picked, used, omitted = await anyio.to_thread.run_sync(
            _take_prefix, source, self.counter, token_budget, limit
        )
        return BudgetedList(
            records=tuple(picked),
            tokens_used=used,
            token_budget=token_budget,
            unit=self.unit,
            rank=rank,
            omitted_over_budget=tuple(omitted),
        )

    def recent_page(
        self, scope: Principal, tag: str | None, offset: int, size: int
    ) -> builtins.list[Record]:
        """One page of live records in ``scope``, newest first (ties by id)."""
        where, params = _live_filter(RetrievalConfig(), scope, self.store.clock())
        sql = f"SELECT {_columns('r')} FROM records r WHERE {where}"
        if tag is not None:
            sql += " AND " + retrieval_sql(self.store).has_tag("r.tags")
            params.append(tag)
        sql += " ORDER BY COALESCE(r.event_time, r.created_at) DESC, r.id LIMIT ? OFFSET ?"
        return [_row_to_record(row) for row in self.store.query(sql, [*params, size, offset])]


class _Pages:
    """Lazily pages through the recency order so a small budget never reads the whole scope."""

    def __init__(self, reader: BudgetedReader, scope: Principal, tag: str | None) -> None:
        self.reader, self.scope, self.tag = reader, scope, tag

    def __iter__(self) -> Iterator[Record]:
        offset, size = 0, 100
        while True:
            page = self.reader.recent_page(self.scope, self.tag, offset, size)
            yield from page
            if len(page) < size:
                return
            offset += size


def _take_prefix(
    ranked: Iterable[Record], counter: TokenCounter, token_budget: int | None, limit: int | None
) -> tuple[list[Record], int, list[str]]:
    picked: list[Record] = []
    omitted: list[str] = []
    used = 0
    for record in ranked:
        if limit is not None and len(picked) >= limit:
            break
        cost = counter.count(record.text)
        if token_budget is not None and cost > token_budget:
            omitted.append(record.id)  # alone over budget: omitted, never truncated
            continue
        if token_budget is not None and used + cost > token_budget:
            break  # a prefix: nothing after the first entry that does not fit
        picked.append(record)
        used += cost
    return picked, used, omitted
