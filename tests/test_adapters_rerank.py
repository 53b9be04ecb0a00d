"""The HTTP rerank client against the loopback server, and inside HybridRetriever."""

from __future__ import annotations

from typing import Any

import pytest

from retold import AdapterHTTPError, Principal, RecordDraft, SQLiteStore, UsageError
from retold._retrieval import HybridRetriever, RetrievalConfig
from retold._typing import Reranker
from retold.adapters import HTTPReranker, MalformedResponseError, RetryPolicy
from retold.testing import LoopbackServer, Reply, loopback_fixture

KEY = "loopback-" + "rerank-k3y-41c0"
loopback = loopback_fixture(api_key=KEY)


def _route(loopback: LoopbackServer) -> Any:
    return loopback.route("/v1/rerank")


@pytest.mark.parametrize(
    ("fmt", "reply", "sent_key"),
    [
        (
            "cohere",
            {
                "results": [
                    {"index": 1, "relevance_score": 0.9},
                    {"index": 0, "relevance_score": 0.1},
                ]
            },
            "documents",
        ),
        ("tei", [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}], "texts"),
    ],
    ids=["cohere", "tei"],
)
@pytest.mark.anyio
async def test_scores_come_back_in_text_order(
    loopback: LoopbackServer, fmt: Any, reply: Any, sent_key: str
) -> None:
    """Both wire formats map scores back to the order of the texts sent."""
    _route(loopback).push(Reply.json(reply))
    async with HTTPReranker(
        "rr", base_url=loopback.openai_base_url, wire_format=fmt, api_key=KEY
    ) as r:
        assert isinstance(r, Reranker)
        assert await r.rerank("q", ["a", "b"]) == [0.1, 0.9]
    sent = _route(loopback).requests[0]
    assert sent.json[sent_key] == ["a", "b"] and sent.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    "reply",
    [
        {"results": [{"index": 0, "relevance_score": 0.5}]},
        {"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}]},
        {"results": [{"index": 5, "relevance_score": 0.5}, {"index": 1, "relevance_score": 0.4}]},
        {
            "results": [
                {"index": 0, "relevance_score": "high"},
                {"index": 1, "relevance_score": 0.4},
            ]
        },
        {"data": []},
    ],
    ids=["missing", "duplicate", "out-of-range", "not-a-number", "wrong-shape"],
)
@pytest.mark.anyio
async def test_partial_or_malformed_answers_raise(loopback: LoopbackServer, reply: Any) -> None:
    """An answer that does not score every text exactly once raises, never returns partial scores."""
    _route(loopback).push(Reply.json(reply))
    async with HTTPReranker("rr", base_url=loopback.openai_base_url, api_key=KEY) as r:
        with pytest.raises(MalformedResponseError):
            await r.rerank("q", ["a", "b"])


@pytest.mark.anyio
async def test_errors_carry_status_and_hide_the_key(loopback: LoopbackServer) -> None:
    """A 500 that echoes the key is an AdapterHTTPError with the key scrubbed."""
    _route(loopback).push(Reply.json({"error": f"bad key {KEY}"}, status=500))
    once = RetryPolicy(max_attempts=1)
    async with HTTPReranker("rr", base_url=loopback.openai_base_url, api_key=KEY, retry=once) as r:
        with pytest.raises(AdapterHTTPError) as err:
            await r.rerank("q", ["a"])
    assert err.value.status_code == 500 and KEY not in str(err.value) and KEY not in repr(r)


def test_bad_configuration_is_a_usage_error() -> None:
    """An unknown wire format or an empty model is refused at construction."""
    with pytest.raises(UsageError):
        HTTPReranker("rr", base_url="http://127.0.0.1:1", wire_format="jina")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        HTTPReranker("", base_url="http://127.0.0.1:1")


@pytest.mark.anyio
async def test_retriever_reorders_with_the_http_reranker(
    loopback: LoopbackServer, store: SQLiteStore, alice: Principal
) -> None:
    """HybridRetriever's rerank stage uses the endpoint's scores to reorder its head."""
    first = store.add(alice, RecordDraft(text="tea ceremony in Kyoto"))
    second = store.add(alice, RecordDraft(text="tea plantation in Darjeeling"))

    def reverse(request: Any) -> Reply:
        docs = request.json["documents"]
        return Reply.json(
            {"results": [{"index": i, "relevance_score": float(i)} for i in range(len(docs))]}
        )

    _route(loopback).respond_with(reverse)
    cfg = RetrievalConfig(dense=False, rerank=True, session_window=0)
    async with HTTPReranker("rr", base_url=loopback.openai_base_url, api_key=KEY) as r:
        got = await HybridRetriever(store, config=cfg, reranker=r).retrieve(alice, "tea", limit=2)
        sent = _route(loopback).requests[0].json["documents"]
    assert [c.record.id for c in got] == [
        {first.text: first.id, second.text: second.id}[t] for t in reversed(sent)
    ]
    assert all("rerank" in c.paths for c in got)
