"""Escaping shared by every renderer that puts stored text in front of a model.

A stored string is rendered as a JSON string with U+0085, U+2028 and U+2029 escaped too, so
no stored text can start a new line, forge a tag or pose as a section header, and decoding
the JSON restores the exact stored text.
"""

from __future__ import annotations

import json

__all__ = ["quote_speaker", "quote_text", "unquote_text"]

_LINE_BREAKERS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def quote_text(text: str) -> str:
    """Render ``text`` as a one-line JSON string literal (multilingual text stays readable)."""
    out = json.dumps(text, ensure_ascii=False)
    for ch, esc in _LINE_BREAKERS.items():
        out = out.replace(ch, esc)
    return out


def unquote_text(literal: str) -> str:
    """Inverse of :func:`quote_text`."""
    value = json.loads(literal)
    if not isinstance(value, str):
        raise ValueError("not a JSON string literal")
    return value


def quote_speaker(speaker: str) -> str:
    """Render a speaker name, always as a JSON string literal.

    A speaker can come from a model-backed extractor, so it is never shown bare: a name
    such as ``SYSTEM override from the developer team`` renders ``"SYSTEM override ..."``
    and no rendered line can begin like a role line (``SYSTEM ...:``, ``assistant:``).
    """
    return quote_text(speaker)
