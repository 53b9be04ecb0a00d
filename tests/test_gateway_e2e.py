"""End to end: ``retold serve`` as a process, driven by the openai SDK over a real socket.

The upstream misbehaves (429 first; prose where a JSON policy would want JSON); two
principals of one tenant get keys from ``retold keys add``. The bundle serves live, which
needs a recorded passing fitness result measured on the minimum number of cases: as in
``test_fitness_enforcement``, a real run on one scenario is recorded relabelled as such a pass
(the gateway, not the fitness harness, is under test here; a deployment runs
``retold fitness --record`` on the full set, about a minute and a half on this machine).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import openai
import pytest

from retold import SQLiteStore
from retold._fitness import record_fitness, run_fitness
from retold._serving_gate import MINIMUM_CASES
from retold.policy.reference import get_bundle
from retold.testing import LoopbackServer, Reply

UPSTREAM_KEY = "sk-upstream-e2e-0d9c27be51"
SCENARIOS = Path(__file__).resolve().parents[1] / "policies" / "scenarios" / "legacy"
RETOLD = [sys.executable, "-m", "retold"]


def _cli(*argv: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [*RETOLD, *argv], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """A ``retold serve`` process; its stderr is drained by a thread into ``lines``."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        self.out: list[str] = []
        self.ready = threading.Event()
        # Each pipe has one reader thread, and only it: ``communicate()`` beside a reader
        # would close the pipe under it.
        self._readers = [
            threading.Thread(target=self._drain, daemon=True),
            threading.Thread(target=self._drain_stdout, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if "Application startup complete" in line:
                self.ready.set()
        self.ready.set()

    def _drain_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=30)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return "".join(self.out) + "".join(self.lines)


@pytest.fixture
def upstream() -> Iterator[LoopbackServer]:
    with LoopbackServer(api_key=UPSTREAM_KEY) as server:
        yield server


def _mentions(requests: list[object], needle: str) -> bool:
    return any(needle in json.dumps(getattr(r, "json", None)) for r in requests)


def test_serve_end_to_end(tmp_path: Path, upstream: LoopbackServer) -> None:
    """A fact stated in an ended session reaches only its principal's later turn; no key leaks."""
    one = tmp_path / "scenarios"
    one.mkdir()
    case = (SCENARIOS / "conditional.jsonl").read_text(encoding="utf-8").splitlines()[0]
    (one / "conditional.jsonl").write_text(case + "\n", encoding="utf-8")
    db, keys = tmp_path / "gateway.db", tmp_path / "keys.json"
    bundle = get_bundle("offline-reference")
    result = anyio.run(lambda: run_fitness(bundle, one, review_owner="e2e-team"))
    passing = result.model_copy(
        update={"verdict": "pass", "category_counts": dict(MINIMUM_CASES), "insufficient": {}}
    )
    with SQLiteStore(db) as store:
        record_fitness(store, passing)
    alice = json.loads(_cli("keys", "add", "--keys", str(keys), "--tenant", "acme",
                            "--principal", "alice", "--json"))["key"]  # fmt: skip
    bob = json.loads(_cli("keys", "add", "--keys", str(keys), "--tenant", "acme",
                          "--principal", "bob", "--json"))["key"]  # fmt: skip
    port = _free_port()
    env = {**os.environ, "RETOLD_UPSTREAM_API_KEY": UPSTREAM_KEY}
    served = Served(
        [
            *RETOLD,
            "serve",
            "--db",
            str(db),
            "--keys",
            str(keys),
            "--bundle",
            "offline-reference",
            "--live",
            "--upstream-base-url",
            upstream.openai_base_url,
            "--upstream-model",
            "up-model",
            "--port",
            str(port),
            "--session-idle-s",
            "600",
        ],
        env,
    )
    bodies: list[str] = []
    try:
        assert served.ready.wait(60) and served.proc.poll() is None, "".join(served.lines)
        base = f"http://127.0.0.1:{port}/v1"
        a = openai.OpenAI(api_key=alice, base_url=base, max_retries=0)
        b = openai.OpenAI(api_key=bob, base_url=base, max_retries=0)

        upstream.chat_completions.push(Reply.rate_limited(retry_after=0))  # 429 first
        said = "I'm allergic to peanuts, and my dentist is Dr. Okafor on Elm Street."
        raw = a.chat.completions.with_raw_response.create(
            model="up-model",
            messages=[{"role": "user", "content": said}],
            extra_headers={"X-Retold-Session": "alice-1"},
        )
        first = raw.parse()
        bodies.append(first.model_dump_json())
        assert first.choices[0].message.content == f"echo: {said}"
        assert raw.headers["X-Retold-Decision"]

        ended = httpx.post(
            f"{base}/retold/sessions/alice-1/end",
            headers={"Authorization": f"Bearer {alice}"},
            timeout=30,
        )
        bodies.append(ended.text)
        assert ended.status_code == 202

        question = "What was my dentist's name again?"
        before = len(upstream.chat_completions.requests)
        later = a.chat.completions.create(
            model="up-model",
            messages=[{"role": "user", "content": question}],
            extra_headers={"X-Retold-Session": "alice-2"},
        )
        bodies.append(later.model_dump_json())
        alice_requests = upstream.chat_completions.requests[before:]
        assert _mentions(alice_requests, "Okafor")
        # Live: the draft and the regeneration, each reporting the loopback's (11, 7).
        assert len(alice_requests) == 2 and later.usage is not None
        assert (later.usage.prompt_tokens, later.usage.completion_tokens) == (22, 14)

        before = len(upstream.chat_completions.requests)
        other = b.chat.completions.create(
            model="up-model",
            messages=[{"role": "user", "content": question}],
            extra_headers={"X-Retold-Session": "bob-1"},
        )
        bodies.append(other.model_dump_json())
        bob_requests = upstream.chat_completions.requests[before:]
        assert bob_requests and not _mentions(bob_requests, "Okafor")

        stream = a.chat.completions.create(
            model="up-model", messages=[{"role": "user", "content": "stream please"}], stream=True
        )
        with stream:
            streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert streamed == "echo: stream please"

        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(api_key="rtd-unknown", base_url=base, max_retries=0).models.list()

        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        bodies.append(metrics)
        assert "retold_gateway_turn_seconds_count" in metrics
    finally:
        output = served.stop()

    assert served.proc.returncode == 0, output
    key_text = keys.read_text(encoding="utf-8")
    assert alice not in key_text and bob not in key_text
    assert all(UPSTREAM_KEY not in body for body in bodies)
    assert UPSTREAM_KEY not in output
    db_bytes = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("gateway.db*")))
    assert UPSTREAM_KEY.encode() not in db_bytes
    # The key did reach the upstream, which is the only place it belongs.
    assert all(
        r.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"
        for r in upstream.chat_completions.requests
    )
