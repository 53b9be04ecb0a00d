"""Calibrate the ``local`` bundle's admission thresholds on a DEVELOPMENT scenario set.

    .venv/bin/python tools/calibrate_local.py policies/scenarios/dev [--cv]

Each scenario's history is extracted into a fresh store with the bundle's extractor; every
live record is then scored for the probe exactly as :class:`SemanticAdmissionJudge` scores
it (:func:`relevance_scores`: cosine less ``hub_weight`` times the record's hubness against
:data:`BACKGROUND_REQUESTS`, or the same for the records of its turn read together when that
is higher), and the judge's selection rule is applied (nothing for a turn
that does not reach memory, :func:`turn_reach`; the personal or impersonal floor, the
margin to the best, at most ``max_admitted``; the staleness and succession rules that
follow the selection are not modelled). A case is scored as the
fitness harness scores it: an ordinary probe with anything admitted is an injection; a
conditional probe is a hit when the admitted records cover every evidence turn, none is
stale-only and none is unrelated. Every live record is treated as a candidate, so this
approximates the real run (retrieval caps candidates at 8); confirm with ``retold fitness``.

The grid keeps the settings whose injection stays within ``--max-injection`` and reports
the best recall. ``--cv`` does it leave-one-persona-out: each persona is scored with the
settings chosen on the others, which estimates how the choice holds on people it was not
chosen on. Never point it at the held-out test split (it refuses paths with a ``test`` part).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog

from retold._extraction import extract_session
from retold._fitness import load_scenarios
from retold._records import Principal, Record, Role, TranscriptTurn
from retold._store import SQLiteStore
from retold.policy.lexical import turn_reach
from retold.policy.local import (
    BACKGROUND_REQUESTS,
    hubness,
    relevance_scores,
    same_turn_groups,
    shared_embedder,
)
from retold.policy.reference import get_bundle

SCOPE = Principal(tenant="cal", principal="p")
HUB_WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0)
FLOORS = tuple(round(0.1 + 0.025 * i, 3) for i in range(17))  # 0.1 .. 0.5
IMPERSONAL = tuple(round(0.3 + 0.05 * i, 3) for i in range(8))  # 0.3 .. 0.65
MARGINS = (0.02, 0.05, 0.1)
Refs = frozenset[tuple[str, int]]


@dataclass
class Case:
    id: str
    persona: str
    label: str
    personal: bool
    reach: bool
    cosines: list[float]
    hubness: list[float]
    # each record read together with the other records of its turn (None: the only one)
    joint_cosines: list[float | None]
    joint_hubness: list[float | None]
    refs: list[Refs]
    evidence: Refs
    stale: Refs
    related: Refs


async def _cases(directory: Path) -> list[Case]:
    bundle = get_bundle("local")
    emb = shared_embedder()
    background = await emb.embed(list(BACKGROUND_REQUESTS))
    out: list[Case] = []
    by_history: dict[str, list[Record]] = {}
    for sc in load_scenarios(directory):
        if sc.label not in ("ordinary", "conditional_fact"):
            continue
        key = repr([h.model_dump(mode="json") for h in sc.history])
        if key not in by_history:
            by_history[key] = await _extract(sc, bundle)
        records = [r for r in by_history[key] if r.is_live(sc.probe.time)]
        vecs = await emb.embed([sc.probe.text, *(r.text for r in records)])
        cosines = relevance_scores(vecs[0], vecs[1:], [], hub_weight=0.0)
        joint_cos: list[float | None] = [None] * len(records)
        joint_hub: list[float | None] = [None] * len(records)
        groups = same_turn_groups(records)
        if groups:
            joined = await emb.embed([" ".join(r.text for r in g) for g in groups])
            g_cos = relevance_scores(vecs[0], joined, [], hub_weight=0.0)
            g_hub = hubness(joined, background)
            at = {r.id: i for i, r in enumerate(records)}
            for group, c, h in zip(groups, g_cos, g_hub, strict=True):
                for r in group:
                    joint_cos[at[r.id]], joint_hub[at[r.id]] = c, h
        personal, reach = turn_reach(sc.probe.text, [r.text for r in records])
        e = sc.expected
        evidence = frozenset((x.session_id, x.turn) for x in e.evidence or [])
        out.append(
            Case(
                id=sc.id,
                persona=sc.persona or "",
                label=sc.label,
                personal=personal,
                reach=reach,
                cosines=cosines,
                hubness=hubness(vecs[1:], background),
                joint_cosines=joint_cos,
                joint_hubness=joint_hub,
                refs=[frozenset((x.session_id, x.turn_index) for x in r.evidence) for r in records],
                evidence=evidence,
                stale=frozenset((x.session_id, x.turn) for x in e.stale_evidence or []),
                related=evidence | frozenset((x.session_id, x.turn) for x in e.also_admissible),
            )
        )
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


Setting = tuple[float, float, float, float]  # hub_weight, floor, impersonal floor, margin


def _admitted(case: Case, setting: Setting, max_admitted: int = 3) -> list[int]:
    hub_weight, floor, impersonal, margin = setting
    scores = [c - hub_weight * h for c, h in zip(case.cosines, case.hubness, strict=True)]
    for i, (jc, jh) in enumerate(zip(case.joint_cosines, case.joint_hubness, strict=True)):
        if jc is not None and jh is not None:
            scores[i] = max(scores[i], jc - hub_weight * jh)
    if not scores or not case.reach:
        return []
    best = max(scores)
    need = floor if case.personal else impersonal
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [i for i in order if scores[i] >= need and scores[i] >= best - margin][:max_admitted]


def _hit(case: Case, admitted: list[int]) -> bool:
    refs = [case.refs[i] for i in admitted]
    covered = frozenset().union(*refs) if refs else frozenset()
    return (
        bool(admitted)
        and case.evidence <= covered
        and not any(r and r <= case.stale for r in refs)
        and all(r & case.related for r in refs)
    )


def score(cases: list[Case], setting: Setting) -> tuple[float, float]:
    """(ordinary injection rate, conditional recall) of ``setting`` on ``cases``."""
    ordinary = [c for c in cases if c.label == "ordinary"]
    conditional = [c for c in cases if c.label == "conditional_fact"]
    injected = sum(bool(_admitted(c, setting)) for c in ordinary)
    hits = sum(_hit(c, _admitted(c, setting)) for c in conditional)
    return injected / max(len(ordinary), 1), hits / max(len(conditional), 1)


def best_setting(cases: list[Case], max_injection: float) -> tuple[Setting, float, float]:
    """The setting with the best recall whose injection is at most ``max_injection``."""
    best: tuple[Setting, float, float] | None = None
    for setting in itertools.product(HUB_WEIGHTS, FLOORS, IMPERSONAL, MARGINS):
        if setting[2] < setting[1]:
            continue
        inj, rec = score(cases, setting)
        if inj <= max_injection and (best is None or rec > best[2]):
            best = (setting, inj, rec)
    assert best is not None  # the highest floors admit nothing
    return best


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--max-injection", type=float, default=0.03)
    parser.add_argument("--cv", action="store_true", help="leave one persona out")
    args = parser.parse_args()
    if "test" in args.directory.parts:
        print("refusing to calibrate on a test split", file=sys.stderr)
        return 2
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    cases = asyncio.run(_cases(args.directory))
    setting, inj, rec = best_setting(cases, args.max_injection)
    print(f"all: hub_weight, min_relevance, min_relevance_impersonal, margin = {setting}")
    print(f"     injection={inj:.3f} recall={rec:.3f}")
    if args.cv:
        for persona in sorted({c.persona for c in cases}):
            train = [c for c in cases if c.persona != persona]
            held = [c for c in cases if c.persona == persona]
            chosen, _, _ = best_setting(train, args.max_injection)
            inj, rec = score(held, chosen)
            print(f"held-out {persona}: {chosen} injection={inj:.3f} recall={rec:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
