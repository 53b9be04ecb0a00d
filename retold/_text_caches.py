"""Process-wide caches keyed by people's words, which an erasure empties.

Some components remember the text they were given, so that they do not work on it again:
the redactor the short strings it found to hold no secret, the ``local`` bundle's embedder
each text's vector. Those keys are the principals' own words, in this process's memory.
:func:`retold.erase_principal` cannot tell whose words a cached text was, so it empties
every registered cache. Each is only a cache, and its next use computes again.

A component registers itself when it is made (:func:`register`); the registry holds it
weakly, so it does not keep anything alive.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

__all__ = ["TextCache", "clear_text_caches", "register"]


class TextCache(Protocol):
    def clear_text_cache(self) -> None:
        """Forget every text remembered."""
        ...


_CACHES: weakref.WeakSet[TextCache] = weakref.WeakSet()
_LOCK = threading.Lock()


def register(cache: TextCache) -> None:
    """Have :func:`clear_text_caches` empty ``cache`` (held weakly)."""
    with _LOCK:
        _CACHES.add(cache)


def clear_text_caches() -> int:
    """Empty every registered cache still alive; returns how many there were."""
    with _LOCK:
        caches = list(_CACHES)
    for cache in caches:
        cache.clear_text_cache()
    return len(caches)
