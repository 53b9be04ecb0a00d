"""A deterministic local responder, for running Retold with no model at all.

It is not a language model: it answers with a fixed template so that the demo, the
examples and the fitness suite can exercise the memory path offline, and it says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retold._profile import PROFILE_HEADER

__all__ = ["OfflineResponder"]

_MEMORY_HEADER = "Memory admitted for this turn"


class OfflineResponder:
    """Deterministic local responder (no model): a fixed template answer.

    The draft is ``Answer to: <turn>``; with an ambient profile it notes how many standing
    instructions it saw; when admitted memory is present the final answer is the draft
    plus the admitted records' lines. It measures the memory path, not answer quality.
    """

    name = "offline-template-responder"
    model = name

    def __call__(self, messages: Sequence[Any]) -> str:
        system = messages[0].content if messages and messages[0].role == "system" else ""
        turn = messages[-1].content if messages else ""
        answer = f"Answer to: {turn}"
        if PROFILE_HEADER in system:
            block = system[system.index(PROFILE_HEADER) :].split("\n\n", 1)[0]
            count = sum(1 for line in block.splitlines() if line.startswith("- "))
            answer += f" [following {count} standing instruction(s)]"
        at = system.find(_MEMORY_HEADER)
        if at >= 0:
            answer += "\nUsing what you told me:\n" + system[at:].split("\n", 1)[-1]
        return answer
