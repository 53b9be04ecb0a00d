"""Outgrowing the file: move a store's memory to PostgreSQL (or another file), serve from it.

1. Serve a user for a session on the SQLite default (the offline bundle, shadow mode) and end
   it, so the file holds the transcript, an extracted record, the profile and the audit.
2. ``copy_store`` copies all of it into the destination in one transaction (``retold memory
   copy --db memory.db --to postgresql://... --all-tenants`` does the same from a shell).
   The destination must hold no memory yet: a copy never merges two stores.
3. ``HybridRetriever.prepare`` builds each principal's name index (and, with the ``local``
   bundle, the vectors of records that had none) ahead of traffic (``retold memory index``).
4. A new session on the destination uses what the first store learnt: the ambient profile,
   and the stored fact the turn's gap finds (shadow mode decides and logs; it does not
   inject the fact).

Pass ``--to postgresql://user@host/db?retold_schema=retold`` to move to PostgreSQL (the
``postgres`` extra); by default the destination is a second SQLite file.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import anyio
import structlog

from retold import AuditLog, Principal, SQLiteStore, Store, copy_store, open_store
from retold.adapters import MemoryChat, OfflineResponder
from retold.policy.reference import get_bundle

ALICE = Principal(tenant="acme", principal="alice")


def _chat(store: Store) -> MemoryChat:
    bundle = get_bundle("offline-reference")
    return MemoryChat.from_bundle(
        store=store, bundle=bundle, responder=OfflineResponder(), config=bundle.config(shadow=True)
    )


async def main(db: Path, to: str) -> dict[str, object]:
    """Serve on ``db``, copy it to ``to`` (a file path or a ``postgresql://`` URL), serve
    there; returns what the destination holds and found."""
    with SQLiteStore(db) as source:
        async with _chat(source) as chat:
            await chat.turn(ALICE, "s1", "Please always answer me concisely.")
            await chat.turn(ALICE, "s1", "My sister Ines lives in Porto.")
            await chat.end_session(ALICE, "s1")  # extraction + activation
        with open_store(to) as destination:
            copied = await anyio.to_thread.run_sync(copy_store, source, destination)
            print(f"copied to {to}: {copied.counts}")
            chat = _chat(destination)
            assert chat.retriever is not None
            read, embedded = await chat.retriever.prepare(ALICE)
            print(f"indexed ahead of traffic: {read} records read, {embedded} embedded")
            async with chat:
                reply = await chat.turn(ALICE, "s2", "Where does my sister live?")
            profile = await anyio.to_thread.run_sync(chat.profile.for_session, ALICE, "s2")
            assert reply.decision is not None
            found = reply.decision.admitted_ids
            texts = {r.id: r.text for r in destination.list_records(ALICE)}
            print(f"the new session's profile:\n{profile.text}")
            print(f"the turn's admitted memory (shadow: logged, not injected): {found}")
            return {
                "copied_records": copied.counts["records"],
                "profile_kept": "concisely" in profile.text,
                "fact_found": any("Porto" in texts.get(i, "") for i in found),
                "decisions": len(AuditLog(destination).decision_rows()),
            }


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    parser = argparse.ArgumentParser(description="Move a store's memory and serve from it.")
    parser.add_argument("--db", type=Path, default=Path(tempfile.mkdtemp()) / "memory.db")
    parser.add_argument(
        "--to",
        default=str(Path(tempfile.mkdtemp()) / "moved.db"),
        help="a SQLite file path or a postgresql:// URL (default: a new file)",
    )
    args = parser.parse_args()
    anyio.run(lambda: main(args.db, args.to))
