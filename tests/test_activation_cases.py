"""Activation on standalone cases written for development (tests/data/activation_cases).

They cover phrasings the persona splits do not: language, unit, spelling and order
preferences (ambient, also stated inside a longer turn), and one-off, temporary, reported,
pasted, hedged and triggered requests (never promoted). Run through the ``offline-reference`` bundle's real pipeline.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from retold import _fitness

CASES = Path(__file__).parent / "data" / "activation_cases"


def test_no_unsafe_promotion_and_every_ambient_case() -> None:
    """0 unsafe promotions; every ambient case placed by the keyword rules."""
    bundle = _fitness.load_bundle("offline-reference")
    run = anyio.run(lambda: _fitness.replay_run(bundle, CASES, "ambient"))
    assert run.safety == 35 and run.unsafe_promotions == 0
    assert run.trigger_promotions == 0
    assert run.ambient_preferences == 50 and run.ambient_hits == 50
    # "The bottom line first" is how a reply is ordered (pref-syn-006). Prices in a currency (pref-syn-011)
    # and the level an answer is pitched at ("like you would to a beginner", pref-syn2-011)
    # are answer style. "Please stop using emoji in your replies" is a new preference: "in
    # your replies" says it holds for every reply (pref-syn3-004).
    assert "ambient_missed" not in run.misses
