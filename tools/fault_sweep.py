"""Fault sweep for issue 15, run by hand (too slow for the suite): prints one JSON object.

    .venv/bin/python tools/fault_sweep.py --kills 12 [--faults 30] [--json]

Four figures, each against the shipped offline bundle and real SQLite files:

* ``kills``: SIGKILLs of a process running chat turns (tests/kill_worker.py), each right
  after its 1st/2nd/3rd acknowledged turn; then partial turns (a user turn without exactly
  one decision and its reply), orphan decisions and acknowledged turns lost are counted.
* ``faults``: exceptions injected at every write step of a chat turn (user row, decision row,
  search rows, reply row, before commit), round-robin; then partial turns are counted.
* ``secrets``: every planted secret family, pasted into chat turns as is and upper-cased,
  then the session is extracted; the database files (main, WAL, SHM) are searched for each
  secret, case-insensitively.
* ``promotions``: every adversarial activation case of tests/test_activation_safety.py run
  against the offline classifier; automatic promotions are counted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sweep_kills(tmp: Path, kills: int) -> dict[str, Any]:
    from tests.test_kill import run_kills

    return run_kills(tmp / "kills.db", kills)


def sweep_faults(tmp: Path, faults: int) -> dict[str, Any]:
    import anyio

    from retold import RecordDraft, SQLiteStore
    from retold.adapters import MemoryChat, OfflineResponder
    from retold.policy.reference import get_bundle
    from tests.kill_worker import SCOPE, SESSIONS, TURNS
    from tests.test_kill import _check

    steps = ["turn_user", "turn_decision", "search_log", "turn_assistant", "turn_committing"]
    armed: dict[str, str | None] = {"step": None}

    def fault(name: str) -> None:
        if armed["step"] == name:
            armed["step"] = None
            raise RuntimeError(f"injected at {name}")

    path = tmp / "faults.db"
    store = SQLiteStore(path, on_write_step=fault)
    store.add(SCOPE, RecordDraft(text="I like hiking in the Alps."))
    bundle = get_bundle("offline-reference")
    chat = MemoryChat.from_bundle(
        store=store, bundle=bundle, responder=OfflineResponder(), config=bundle.config(shadow=True)
    )
    injected = raised = 0
    acked: set[tuple[str, int]] = set()

    async def run() -> None:
        nonlocal injected, raised
        for i in range(faults * 2):
            if i % 2 == 0:
                armed["step"] = steps[(i // 2) % len(steps)]
                injected += 1
            session = SESSIONS[i % len(SESSIONS)]
            try:
                reply = await chat.turn(SCOPE, session, TURNS[i % len(TURNS)])
                acked.add((session, reply.turn_index))
            except Exception:
                raised += 1
            armed["step"] = None

    anyio.run(run)
    store.close()
    return {"faults_injected": injected, "turns_failed": raised, **_check(path, acked)}


def sweep_secrets(tmp: Path) -> dict[str, Any]:
    import anyio

    from retold import RecordDraft, SQLiteStore
    from retold.adapters import MemoryChat, OfflineResponder
    from retold.policy.reference import get_bundle
    from tests.kill_worker import SCOPE
    from tests.test_redaction import PLANTED

    path = tmp / "secrets.db"
    store = SQLiteStore(path)
    store.add(SCOPE, RecordDraft(text="My database runs on Postgres at work."))
    bundle = get_bundle("offline-reference")
    chat = MemoryChat.from_bundle(
        store=store, bundle=bundle, responder=OfflineResponder(), config=bundle.config(shadow=True)
    )
    planted = [secret for _text, secret in PLANTED.values()]

    async def run() -> None:
        for text, _secret in PLANTED.values():
            await chat.turn(SCOPE, "s1", f"What did I tell you about my keys? {text}")
            await chat.turn(SCOPE, "s1", f"Remember my setup: {text.upper()}")
            await chat.turn(SCOPE, "s1", f"Search my notes for {json.dumps({'note': text})}")
        await chat.end_session(SCOPE, "s1")

    anyio.run(run)
    store.close()
    blob = b"".join(
        p.read_bytes() for p in (Path(str(path) + s) for s in ("", "-wal", "-shm")) if p.exists()
    ).lower()
    found = sorted(s for s in planted if s.lower().encode() in blob)
    return {"families": len(PLANTED), "planted_secrets": len(planted), "found": found}


def sweep_promotions(tmp: Path) -> dict[str, Any]:
    from retold import ActivationPolicy, OfflineActivationClassifier, SQLiteStore
    from tests.test_activation_safety import CASES, _scope

    store = SQLiteStore(tmp / "promotions.db")
    policy = ActivationPolicy(store, OfflineActivationClassifier())
    promoted = []
    for case in CASES:
        scope = _scope(case)
        out = policy.evaluate_sync(scope, case.setup(store, scope))
        if out.promoted:
            promoted.append(case.name)
    return {"attempted": len(CASES), "promoted": promoted}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--faults", type=int, default=30)
    args = parser.parse_args()
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        report = {
            "kills": sweep_kills(tmp, args.kills),
            "faults": sweep_faults(tmp, args.faults),
            "secrets": sweep_secrets(tmp),
            "promotions": sweep_promotions(tmp),
        }
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
