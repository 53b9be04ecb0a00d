"""``retold mcp`` on stdio, driven by the official MCP SDK's own client."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from retold import Principal, SQLiteStore
from retold.adapters import MemoryChat, OfflineResponder
from retold.policy.reference import get_bundle

ALICE = Principal(tenant="acme", principal="alice")
BOB = Principal(tenant="acme", principal="bob")


@pytest.fixture
def anyio_backend() -> str:
    """The stdio client drives a subprocess; one backend keeps the test fast."""
    return "asyncio"


async def _seed(db: Path) -> None:
    bundle = get_bundle("offline-reference")
    with SQLiteStore(db) as store:
        chat = MemoryChat.from_bundle(
            store=store,
            bundle=bundle,
            responder=OfflineResponder(),
            config=bundle.config(shadow=True),
        )
        for scope, session, lines in (
            (
                ALICE,
                "a1",
                [
                    "My dentist is Dr. Okafor on Elm Street.",
                    "Bullet points in Portuguese, please.",
                ],
            ),
            (BOB, "b1", ["My dentist is Dr. Lindqvist on Harbour Road."]),
        ):
            for line in lines:
                await chat.turn(scope, session, line)
            await chat.end_session(scope, session)


def _server(db: Path, principal: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "retold", "mcp", "--db", str(db), "--tenant", "acme", "--principal", principal],
    )


@pytest.mark.anyio
async def test_memory_search_is_scoped_by_the_server_not_the_arguments(tmp_path: Path) -> None:
    """memory_search returns the configured principal's memory; a scope argument changes nothing."""
    db = tmp_path / "mcp.db"
    await _seed(db)
    async with Client(_server(db, "alice"), read_timeout_seconds=60) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {"memory_search", "review_queue"}
        found = await client.call_tool("memory_search", {"query": "dentist"})
        text = "".join(getattr(c, "text", "") for c in found.content)
        assert "Okafor" in text and "Lindqvist" not in text
        sneaky = await client.call_tool(
            "memory_search", {"query": "dentist", "principal": "bob", "tenant": "acme"}
        )
        sneaky_text = "".join(getattr(c, "text", "") for c in sneaky.content)
        assert "Lindqvist" not in sneaky_text
        bad = await client.call_tool("memory_search", {"query": ""})
        assert bad.is_error
        queue = await client.call_tool("review_queue", {"status": "all"})
        assert not queue.is_error
        items = (queue.structured_content or {}).get("items", [])
        assert items, "alice's ambiguous preference is waiting for review"
        assert all(i["principal"] == "alice" and i["tenant"] == "acme" for i in items)
    with SQLiteStore(db) as store:
        logged = store.query("SELECT origin, principal FROM search_log WHERE origin = 'mcp_tool'")
    assert logged and {r["principal"] for r in logged} == {"alice"}


@pytest.mark.anyio
async def test_review_queue_listing_is_read_only_and_per_principal(tmp_path: Path) -> None:
    """The review listing shows only the server's principal's items and changes nothing."""
    db = tmp_path / "mcp.db"
    await _seed(db)
    with SQLiteStore(db) as store:
        before = store.query("SELECT id, principal, status FROM activation_reviews ORDER BY id")
    async with Client(_server(db, "bob"), read_timeout_seconds=60) as client:
        queue = await client.call_tool("review_queue", {})
        items = (queue.structured_content or {}).get("items", [])
        assert all(i["principal"] == "bob" for i in items)
    with SQLiteStore(db) as store:
        after = store.query("SELECT id, principal, status FROM activation_reviews ORDER BY id")
    assert before == after
    assert any(r["principal"] == "alice" for r in before)  # alice has items bob never saw
