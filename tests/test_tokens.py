"""Token counters: agreement with tiktoken, Unicode characters, host-defined, clear errors."""

from __future__ import annotations

import pytest
import tiktoken

from retold import TokenizerUnavailableError, UsageError, token_counter
from retold._tokens import _encoding

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Je me suis installée à Lisbonne en mars ; c'était génial.",
    "東京で寿司を食べました。とても美味しかったです。",
    "Привет! Как дела? Всё хорошо.",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "नमस्ते, मुझे हिंदी में उत्तर दें।",
    "def f(x):\n    return {'k': [1, 2, 3]}  # code\n",
    "emoji 👩‍💻🚀 and <|endoftext|> as plain text",
    "",
]


def test_cl100k_matches_tiktoken_offline() -> None:
    """cl100k_base counts exactly what tiktoken's cl100k encoding does, with no network."""
    counter = token_counter("cl100k_base")
    reference = tiktoken.get_encoding("cl100k_base_offline")
    for text in CORPUS:
        assert counter.count(text) == len(reference.encode(text, disallowed_special=()))
    assert counter.unit == "cl100k_base"


def test_chars_counts_code_points_not_bytes() -> None:
    """The chars unit counts Unicode characters."""
    counter = token_counter("chars")
    assert counter.count("héllo") == 5
    assert counter.count("東京") == 2
    assert counter.count("👩‍💻") == 3  # woman, ZWJ, laptop
    assert len("東京".encode()) == 6


def test_host_defined_counter_is_used() -> None:
    """A host-defined counter counts with the host's callable."""
    counter = token_counter("host-defined", host_counter=lambda s: len(s.split()))
    assert counter.count("one two three") == 3
    assert counter.unit == "host-defined"
    with pytest.raises(UsageError):
        token_counter("host-defined")
    with pytest.raises(UsageError):
        token_counter("host-defined", host_counter=lambda s: -1).count("x")


def test_unknown_unit_is_a_usage_error() -> None:
    """An unknown unit names the valid ones."""
    with pytest.raises(UsageError, match="cl100k_base"):
        token_counter("words")


def test_unavailable_encoding_says_how_to_provide_it() -> None:
    """An encoding that cannot be loaded raises an error naming TIKTOKEN_CACHE_DIR."""
    _encoding.cache_clear()
    with pytest.raises(TokenizerUnavailableError, match="TIKTOKEN_CACHE_DIR"):
        _encoding("no_such_encoding")
