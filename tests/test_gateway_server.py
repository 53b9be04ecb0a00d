"""The gateway on a real socket under uvicorn: a turn in flight finishes across shutdown."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn

from retold import SQLiteStore
from retold._keys import KeyFile
from retold.gateway import DECISION_HEADER, GatewayConfig, build_gateway
from retold.testing import LoopbackServer, RecordedRequest, Reply, openai_chat


@pytest.fixture
def anyio_backend() -> str:
    """uvicorn runs on asyncio."""
    return "asyncio"


class _Server(uvicorn.Server):
    """uvicorn's server, announcing when its shutdown begins."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.shutting_down = anyio.Event()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.shutting_down.set()
        await super().shutdown(sockets)


@pytest.fixture
def upstream() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server


@pytest.mark.anyio
async def test_graceful_shutdown_finishes_the_turn_in_flight(
    tmp_path: Path, upstream: LoopbackServer
) -> None:
    """Shutdown requested while the upstream is still answering: the client still gets 200."""
    arrived = threading.Event()
    release = threading.Event()

    def slow(request: RecordedRequest) -> Reply:
        arrived.set()
        release.wait(30)
        return openai_chat("finished after shutdown began")(request)

    upstream.chat_completions.push(slow)
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.add("acme", "alice")
    store = SQLiteStore(tmp_path / "gateway.db")
    gateway = build_gateway(
        store=store,
        keys=keys,
        bundle="offline-reference",
        live=False,
        upstream_base_url=upstream.openai_base_url,
        upstream_model="up-model",
        config=GatewayConfig(upstream_model="up-model"),
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    server = _Server(
        uvicorn.Config(
            gateway.app, lifespan="on", log_level="warning", timeout_graceful_shutdown=20
        )
    )
    result: dict[str, httpx.Response] = {}

    async def call() -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            result["r"] = await client.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"messages": [{"role": "user", "content": "slow one"}]},
            )

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            tg.start_soon(call)
            await anyio.to_thread.run_sync(arrived.wait, 30)
            server.should_exit = True  # what SIGTERM does
            await server.shutting_down.wait()
            assert "r" not in result  # the turn is still in flight as shutdown begins
            release.set()
    response = result["r"]
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "finished after shutdown began"
    assert response.headers[DECISION_HEADER]
    store.close()
