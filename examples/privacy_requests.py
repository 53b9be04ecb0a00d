"""A user's privacy requests: "what do you keep about me?" and "forget me".

1. Serve two users for a session each (the offline bundle, shadow mode) and end the sessions,
   so their words are in the transcript, the extracted records, the profile and the audit.
2. Access: ``export_principal`` reads everything kept for one user in one transaction; the
   host hands the JSON over (``retold memory export --out FILE`` does the same from a shell,
   writing the file readable by its owner only).
3. Erasure: ``erase_principal`` removes every copy of that user's words in one transaction,
   the other user's stay; work still in flight for the user writes none of them afterwards.
   ``store.vacuum()`` then removes the erased text from the database file as well.
4. A second export shows what is left: content-free rows (deleted records without their
   text, transcript turns without their words, decision skeletons, the event log).
5. Retention, the operator's side: ``prune_transcript`` blanks the words of old sessions
   that memory does not rely on (``retold memory prune-transcript --older-than-days N``), and
   ``AuditLog.prune`` deletes old turn decisions with their searches, which keep each turn's
   text (``retold decisions prune``). Here the cutoff is "now", to show it on a fresh store:
   bruno's small talk goes, the session his record came from stays whole.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import structlog

from retold import (
    AuditLog,
    Principal,
    SQLiteStore,
    erase_principal,
    export_principal,
    prune_transcript,
)
from retold.adapters import MemoryChat, OfflineResponder
from retold.policy.reference import get_bundle

USERS = {
    Principal(tenant="acme", principal="alice"): [
        "Please always answer me concisely. My sister Ines lives in Porto.",
        "My dentist is Dr. Okonkwo, on Tuesdays.",
    ],
    Principal(tenant="acme", principal="bruno"): [
        "I'm training for the Lisbon half marathon in March.",
    ],
}
SMALL_TALK = "Can you suggest a name for a sourdough starter, something like Zanzibarian?"


async def main(db: Path, out: Path) -> dict[str, object]:
    """Serve, then answer alice's requests; returns what each step found."""
    bundle = get_bundle("offline-reference")
    with SQLiteStore(db) as store:
        chat = MemoryChat.from_bundle(
            store=store,
            bundle=bundle,
            responder=OfflineResponder(),
            config=bundle.config(shadow=True),
        )
        async with chat:
            for user, turns in USERS.items():
                for text in turns:
                    await chat.turn(user, "s1", text)
                await chat.end_session(user, "s1")  # extraction + activation
            bruno = Principal(tenant="acme", principal="bruno")
            await chat.turn(bruno, "s2", SMALL_TALK)  # nothing to extract from a question
            await chat.end_session(bruno, "s2")
        # Export, erasure and vacuum are blocking store calls: off the event loop.
        return await anyio.to_thread.run_sync(answer_requests, store, db, out)


def answer_requests(store: SQLiteStore, db: Path, out: Path) -> dict[str, object]:
    """Alice's access request, then her erasure request."""
    alice = Principal(tenant="acme", principal="alice")
    print("access request: everything kept about alice")
    before = export_principal(store, alice)
    out.touch(mode=0o600)
    out.write_text(before.to_json(), encoding="utf-8")
    print(
        f"  {len(before.records)} records, {len(before.transcript)} transcript turns, "
        f"{len(before.turn_decisions)} turn decisions, {len(before.events)} events -> {out}"
    )

    print("erasure request: forget alice")
    erasure = erase_principal(store, alice)
    store.vacuum()  # the erased text leaves the database file too
    print(f"  erased: {erasure.counts}")

    after = export_principal(store, alice)
    texts = sorted({r["text"] for r in after.records})
    said = sorted({t["text"] for t in after.transcript})
    print(
        f"  left: {len(after.records)} records (texts {texts}), {len(after.transcript)} "
        f"transcript turns (texts {said}), {len(after.turn_decisions)} decision skeletons"
    )
    bruno = Principal(tenant="acme", principal="bruno")
    print("retention: blank old sessions memory does not rely on (cutoff: now)")
    cutoff = datetime.now(UTC) + timedelta(seconds=1)
    pruned = prune_transcript(store, cutoff)
    AuditLog(store).prune(cutoff)
    store.vacuum()
    print(f"  {pruned.counts}")
    kept = export_principal(store, bruno).to_json()
    return {
        "exported_records": len(before.records),
        "words_before": "Okonkwo" in before.to_json(),
        "words_after": "Okonkwo" in after.to_json()
        or any(b"Okonkwo" in f.read_bytes() for f in db.parent.glob(db.name + "*")),
        "other_kept": "Lisbon" in kept,
        "small_talk_pruned": pruned.counts["sessions"] == 1 and "Zanzibarian" not in kept,
    }


if __name__ == "__main__":
    # The host's one logging line (README): Retold's warnings, on stderr; stdout stays ours.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    parser = argparse.ArgumentParser(description="Answer a user's access and erasure requests.")
    parser.add_argument("--db", type=Path, default=Path(tempfile.mkdtemp()) / "memory.db")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()) / "alice.json")
    args = parser.parse_args()
    anyio.run(lambda: main(args.db, args.out))
