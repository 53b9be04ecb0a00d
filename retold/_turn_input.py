"""Validation of a turn's inputs at the API boundary, before anything is read or written.

``MemoryChat.turn`` and ``UtilityAwareOrchestrator.prepare_turn`` call these first, so bad
input (a wrong type, a lone surrogate, an oversized or empty turn, a secret-shaped session
id) is a :class:`~retold.InvalidInputError` naming the field and the limit, and nothing of
the turn is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import InvalidInputError
from ._records import Principal, ProfileBlock, scope_id

__all__ = ["MAX_CONTEXT_CHARS", "MAX_TURN_CHARS", "check_prepare_turn", "check_text"]

#: Longest user turn, in characters (the transcript's limit).
MAX_TURN_CHARS = 200_000
#: Longest public context (system prompt plus documents), in characters.
MAX_CONTEXT_CHARS = 1_000_000


def check_text(field: str, value: object, *, limit: int, allow_empty: bool = False) -> str:
    """``value`` as valid text: a ``str`` of at most ``limit`` characters, encodable as
    UTF-8 (no lone surrogate), and not blank unless ``allow_empty``.

    Raises:
        InvalidInputError: naming ``field`` and the rule it broke.
    """
    if not isinstance(value, str):
        raise InvalidInputError(field, f"must be a str, not {type(value).__name__}")
    if len(value) > limit:
        raise InvalidInputError(
            field, f"is {len(value):,} characters; the limit is {limit:,} characters"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            field, f"is not valid Unicode text (lone surrogate at index {exc.start})"
        ) from None
    if not allow_empty and not value.strip():
        raise InvalidInputError(field, "must not be empty")
    return value


def _is_turn_options(value: object) -> bool:
    # By name and shape: this module sits below the orchestrator that defines TurnOptions.
    return type(value).__name__ == "TurnOptions" and hasattr(value, "latency_budget_ms")


def check_scope(value: object) -> Principal:
    """``value`` as the trusted :class:`~retold.Principal` of a call."""
    if not isinstance(value, Principal):
        raise InvalidInputError("scope", f"must be a Principal, not {type(value).__name__}")
    return value


def check_prepare_turn(
    *,
    scope: object,
    session_id: object,
    turn_index: object,
    turn: object,
    public_context: object,
    profile: object,
    generate_draft: object,
    generate_final: object,
    retriever: object,
    inventory: object,
    options: object,
) -> str:
    """Check ``prepare_turn``'s arguments; returns the canonical session id.

    Raises:
        InvalidInputError: the first bad argument, by name.
    """
    check_scope(scope)
    session = scope_id("session_id", session_id)
    if isinstance(turn_index, bool) or not isinstance(turn_index, int) or turn_index < 0:
        raise InvalidInputError("turn_index", "must be an int >= 0")
    check_text("turn", turn, limit=MAX_TURN_CHARS, allow_empty=True)
    if public_context is not None:
        check_text("public_context", public_context, limit=MAX_CONTEXT_CHARS, allow_empty=True)
    if not isinstance(profile, ProfileBlock):
        raise InvalidInputError("profile", f"must be a ProfileBlock, not {type(profile).__name__}")
    for name, fn in (("generate_draft", generate_draft), ("generate_final", generate_final)):
        if not callable(fn):
            raise InvalidInputError(name, f"must be callable, not {type(fn).__name__}")
    if retriever is not None and not callable(getattr(retriever, "retrieve", None)):
        raise InvalidInputError("retriever", "must have a retrieve() method")
    if inventory is not None and (
        isinstance(inventory, str)
        or not isinstance(inventory, Sequence)
        or not all(isinstance(x, str) for x in inventory)
    ):
        raise InvalidInputError("inventory", "must be a sequence of str or None")
    if not _is_turn_options(options):
        raise InvalidInputError("options", f"must be TurnOptions, not {type(options).__name__}")
    return session


def check_chat_turn(
    scope: object, session_id: object, text: object, public_context: object, options: Any
) -> tuple[Principal, str, str]:
    """Check ``MemoryChat.turn``'s arguments; returns (scope, canonical session id, text)."""
    principal = check_scope(scope)
    session = scope_id("session_id", session_id)
    check_text("text", text, limit=MAX_TURN_CHARS)
    if public_context is not None:
        check_text("public_context", public_context, limit=MAX_CONTEXT_CHARS, allow_empty=True)
    if options is not None and not _is_turn_options(options):
        raise InvalidInputError("options", f"must be TurnOptions, not {type(options).__name__}")
    assert isinstance(text, str)
    return principal, session, text
