"""Chat turns survive SIGKILL: every user turn has its decision and reply, nothing
acknowledged is lost, and resumed sessions continue without reusing an index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retold import SQLiteStore

from .kill_worker import SCOPE, SESSIONS

ROOT = Path(__file__).resolve().parent.parent


def _check(path: Path, acked: set[tuple[str, int]]) -> dict[str, int]:
    """Count what a killed store holds; the assertions below say what must hold."""
    store = SQLiteStore(path)
    try:
        assert store.check_integrity() == []
        decisions = store.query(
            "SELECT session_id, turn_index, COUNT(*) AS n FROM turn_decisions "
            "GROUP BY session_id, turn_index"
        )
        decided = {(r["session_id"], r["turn_index"]): r["n"] for r in decisions}
        partial = 0
        present: set[tuple[str, int]] = set()
        for session in SESSIONS:
            turns = store.turns(SCOPE, session)
            indices = [t.turn_index for t in turns]
            assert indices == list(range(len(indices))), f"{session} has a gap or reuse"
            for t in turns:
                if t.role.value != "user":
                    continue
                key = (session, t.turn_index)
                present.add(key)
                has_reply = t.turn_index + 1 in indices
                if decided.get(key) != 1 or not has_reply:
                    partial += 1
        orphans = [k for k in decided if k not in present]
        return {
            "user_turns": len(present),
            "partial_turns": partial,
            "orphan_decisions": len(orphans),
            "acked_lost": len(acked - present),
        }
    finally:
        store.close()


def run_kills(path: Path, kills: int, *, turns_per_run: int = 40) -> dict[str, int]:
    """SIGKILL a chat worker ``kills`` times, right after its k-th acknowledged turn
    (k = 1, 2, 3, ... so the kill lands at different points of the next turn)."""
    acked: set[tuple[str, int]] = set()
    for k in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kill_worker", str(path), str(turns_per_run)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        assert proc.stdout is not None
        want = 1 + k % 3
        seen = 0
        for line in proc.stdout:
            _, session, index = line.split()
            acked.add((session, int(index)))
            seen += 1
            if seen >= want:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
    return {"kills": kills, "acked": len(acked), **_check(path, acked)}


@pytest.mark.timeout(240)
def test_sigkill_mid_turn_leaves_no_partial_turn(tmp_path: Path) -> None:
    """Three SIGKILLs of a process running chat turns: every user turn in the transcript
    has exactly one decision and its reply, and no acknowledged turn is lost."""
    figures = run_kills(tmp_path / "kill.db", kills=3)
    assert figures["acked"] >= 6 and figures["user_turns"] >= figures["acked"]
    assert figures["partial_turns"] == 0 and figures["orphan_decisions"] == 0
    assert figures["acked_lost"] == 0
