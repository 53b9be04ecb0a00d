"""A process that runs chat turns until it is killed (driven by the SIGKILL tests and the
fault sweep in tools/fault_sweep.py).

Usage: ``python -m tests.kill_worker DB TURNS``. It runs ``TURNS`` chat turns through the
shipped offline bundle (shadow mode, so no fitness record is needed), round-robin over three
sessions that it resumes where the transcript left off, and prints ``ack SESSION INDEX``
(flushed) after each turn returns: those are the acknowledged writes.
"""

from __future__ import annotations

import logging
import sys

import anyio
import structlog

from retold import Principal, RecordDraft, SQLiteStore
from retold.adapters import MemoryChat, OfflineResponder
from retold.policy.reference import get_bundle

SCOPE = Principal(tenant="acme", principal="alice")
SESSIONS = ("s0", "s1", "s2")
TURNS = (
    "Where did I say I like hiking?",
    "My password is CorrectHorse42, remember my setup.",
    "What do you remember about my trip to Lisbon?",
    "Please summarise what I told you about my sister.",
)


async def main(path: str, turns: int) -> None:
    store = SQLiteStore(path)
    if not store.list_records(SCOPE, limit=1):
        store.add(SCOPE, RecordDraft(text="I like hiking in the Alps.", idempotency_key="seed"))
    bundle = get_bundle("offline-reference")
    chat = MemoryChat.from_bundle(
        store=store,
        bundle=bundle,
        responder=OfflineResponder(),
        config=bundle.config(shadow=True),
    )
    for i in range(turns):
        session = SESSIONS[i % len(SESSIONS)]
        reply = await chat.turn(SCOPE, session, TURNS[i % len(TURNS)])
        print(f"ack {session} {reply.turn_index}", flush=True)


if __name__ == "__main__":
    # stdout carries the acks only (structlog's default logger prints to stdout).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    anyio.run(main, sys.argv[1], int(sys.argv[2]))
