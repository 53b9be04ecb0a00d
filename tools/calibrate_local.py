"""Calibrate the ``local`` bundle's admission thresholds on a DEVELOPMENT scenario set.

    .venv/bin/python tools/calibrate_local.py policies/scenarios/dev [--grid]

Each scenario's history is extracted into a fresh store with the bundle's extractor; every
live record is scored by cosine(probe, record) with the bundle's embedder, as the judge
does. The report gives, per label, the score distribution of the records the answer needs
(conditional cases) and of the best-scoring record (ordinary cases); ``--grid`` sweeps
``min_relevance`` x ``margin`` and prints the approximate injection and recall each pair
gives (every live record is treated as a candidate, so it is an approximation of the real
run; confirm with ``retold fitness``). Never point it at the held-out test split.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from retold._extraction import extract_session
from retold._fitness import load_scenarios
from retold._records import Principal, Record, Role, TranscriptTurn
from retold._store import SQLiteStore
from retold.policy.local import cosine, shared_embedder
from retold.policy.reference import get_bundle

SCOPE = Principal(tenant="cal", principal="p")


Row = tuple[str, str, list[tuple[float, bool, bool]], str]


async def _rows(directory: Path) -> list[Row]:
    bundle = get_bundle("local")
    emb = shared_embedder()
    out: list[Row] = []
    by_history: dict[str, list[Record]] = {}
    for sc in load_scenarios(directory):
        key = json.dumps([h.model_dump(mode="json") for h in sc.history], sort_keys=True)
        if key not in by_history:
            by_history[key] = await _extract(sc, bundle)
        now = sc.probe.time
        records = [r for r in by_history[key] if r.is_live(now)]
        need = {(e.session_id, e.turn) for e in (sc.expected.evidence or [])}
        stale = {(e.session_id, e.turn) for e in (sc.expected.stale_evidence or [])}
        vecs = await emb.embed([sc.probe.text, *(r.text for r in records)])
        scored = []
        for r, v in zip(records, vecs[1:], strict=True):
            refs = {(e.session_id, e.turn_index) for e in r.evidence}
            scored.append((cosine(vecs[0], v), bool(refs & need), bool(refs & stale)))
        out.append((sc.id, sc.label, sorted(scored, reverse=True), sc.probe.text))
    return out


async def _extract(sc: Any, bundle: Any) -> list[Record]:
    """The records the bundle's extractor writes for the scenario's history."""
    counter = itertools.count(1)
    store = SQLiteStore(":memory:", id_factory=lambda: f"r{next(counter):05d}")
    try:
        for session in sc.history:
            for i, turn in enumerate(session.turns):
                store.add_turn(
                    SCOPE,
                    TranscriptTurn(
                        session_id=session.session_id,
                        turn_index=i,
                        role=Role(turn.role),
                        speaker=turn.speaker if turn.role == "user" else None,
                        text=turn.text,
                        time=session.time + timedelta(seconds=30 * i),
                    ),
                )
            await extract_session(
                store, SCOPE, session.session_id, bundle.extractor(), user=sc.user
            )
        return store.list_records(SCOPE)
    finally:
        store.close()


def _simulate(rows: list[Row], tau: float, margin: float) -> tuple[float, float]:
    ordinary = injected = conditional = hits = 0
    for _, label, scored, _ in rows:
        top = scored[:8]
        best = top[0][0] if top else 0.0
        admitted = [s for s in top if s[0] >= tau and s[0] >= best - margin][:3]
        if label == "ordinary":
            ordinary += 1
            injected += bool(admitted)
        elif label == "conditional_fact":
            conditional += 1
            hits += any(a[1] for a in admitted) and not any(a[2] for a in admitted)
    return injected / max(ordinary, 1), hits / max(conditional, 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--dump", type=Path, help="write the scored rows here as JSON")
    args = parser.parse_args()
    if "test" in args.directory.parts:
        print("refusing to calibrate on a test split", file=sys.stderr)
        return 2
    rows = asyncio.run(_rows(args.directory))
    if args.dump:
        args.dump.write_text(json.dumps(rows), encoding="utf-8")
    for sid, label, scored, _ in rows:
        if label not in ("ordinary", "conditional_fact"):
            continue
        need = [round(s, 3) for s, n, _ in scored if n]
        other = [round(s, 3) for s, n, _ in scored if not n][:2]
        print(f"{sid:10} best-needed={max(need, default=None)} best-other={other}")
    if args.grid:
        for tau in (0.25, 0.3, 0.35, 0.4, 0.45, 0.5):
            for margin in (0.05, 0.1, 0.15, 0.2):
                inj, rec = _simulate(rows, tau, margin)
                print(f"tau={tau:.2f} margin={margin:.2f} injection={inj:.3f} recall={rec:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
