"""The erasure fence: work that began before a principal's erasure writes none of their words.

:func:`retold.erase_principal` removes every stored copy of a principal's words in one
transaction and records a ``principal.erased`` event. Work that read those words before
the erasure and writes after it (a chat turn's decision and transcript rows, a session
end's extracted records, a search's logged query, a session's profile snapshot) asks
:func:`erased_since` inside its own write transaction and, when the principal was erased
after the work began, writes nothing of their words.

Both sides take the scope's :func:`erasure_lock` inside their write (PostgreSQL's advisory
lock; a SQLite write already excludes every other), so such a write either commits wholly
before the erasure, which then erases it, or sees the erasure's event.

Times are compared as :func:`retold._store.iso` text: a write counts as begun before the
erasure only when its start is strictly earlier than the erasure's event.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ._records import Principal
from ._retrieval_sql import retrieval_sql
from ._store import Store, WriteTx, iso

__all__ = ["erased_since", "erasure_lock", "last_erasures"]


def erasure_lock(scope: Principal) -> str:
    """The lock a principal's erasure and every fenced write take inside their write."""
    return f"erase:{len(scope.tenant)}:{scope.tenant}:{scope.principal}"


def last_erasures(store: Store, w: WriteTx, scopes: Iterable[Principal]) -> dict[Principal, str]:
    """The time of each scope's last ``principal.erased`` event, read inside ``w`` under
    each scope's :func:`erasure_lock` (taken in one order); scopes never erased are absent."""
    out: dict[Principal, str] = {}
    for scope in sorted(scopes, key=lambda s: (s.tenant, s.principal)):
        retrieval_sql(store).serialize(w, erasure_lock(scope))
        rows = w.query(
            "SELECT MAX(time) AS t FROM events WHERE tenant = ? AND principal = ? "
            "AND record_id IS NULL AND type = 'principal.erased'",
            [scope.tenant, scope.principal],
        )
        if rows and rows[0]["t"]:
            out[scope] = str(rows[0]["t"])
    return out


def erased_since(store: Store, w: WriteTx, scope: Principal, started: datetime) -> bool:
    """Whether ``scope`` was erased after ``started`` (read inside ``w``, under the lock)."""
    return (iso(started) or "") < last_erasures(store, w, (scope,)).get(scope, "")
