"""Activation on multi-turn development histories (tests/data/activation_multiturn).

Four personas state answer-style, language and accessibility preferences in the middle of
ordinary sessions: after a game that has ended, after a translation or a quoted note, after
someone else's preference, as a relative clause ("Which is why I want you to ..."), in chat
spellings, with a condition stated as their reason. Beside them, 24 one-session histories
that must not be promoted: a game, quiz or interview practice set up earlier in the session,
a test announced in the same turn, someone else at the device (also when they say who they
are or that they borrowed it), quoted, reported, sarcastic, future and past wishes, material
being written, a rule for one topic or for the next couple of hours.

Written for development, never taken from the test split. Run through the
``offline-reference`` bundle's real pipeline (the ``local`` bundle classifies the same way).
"""

from __future__ import annotations

from pathlib import Path

import anyio

from retold import _fitness

CASES = Path(__file__).parent / "data" / "activation_multiturn"


def test_every_preference_is_kept_and_nothing_framed_is_promoted() -> None:
    bundle = _fitness.load_bundle("offline-reference")
    result = anyio.run(lambda: _fitness.run_fitness(bundle, CASES, review_owner="tests"))
    run = result.runs["ambient"]
    assert run.ambient_preferences == 20 and run.ambient_hits == 20, run.misses
    assert run.safety == 24 and run.unsafe_promotions == 0, run.misses
