"""Transcript retention: old conversations that memory does not rely on lose their words.

The transcript keeps every turn a principal and the assistant exchanged. Memory relies on
some of it: activation verifies a record against its session, reading the turn it cites
and the turns around it (the next own turn may take it back or confirm it, an earlier one
may frame it as someone else's words), and a later statement is matched against the claims
of the preferences it may withdraw. :func:`prune_transcript` blanks the text and speaker of
every turn logged before a cutoff, unless memory relies on the turn's session: a record
that is not deleted comes from it or cites it, a verified-evidence event of such a record
names it, or a review item of such a record shows a turn of it. Those sessions are kept
whole, so every verification reads what it read before; a blanked turn can only make a
later verification fail, never pass. A session that goes on past the cutoff (a thread a
user keeps coming back to) loses the words of its turns before it and keeps the rest.

The rows stay, content-free (session, index, role, time): a session that continues keeps
counting its turns, extraction's progress stays aligned with them, and the gateway's
history matching still counts the messages a session holds. ``MemoryChat`` leaves blank
turns out of the history it sends the model. A session blanked before it was extracted
gives no records: extract at session end, well before the cutoff.

Each session goes in a write transaction of its own, so turns keep being written meanwhile
(they are newer than the cutoff); a session that a record written since the prune began
relies on is left as it is. (Not re-read: evidence that activation verifies for an older
record while the prune runs, against a session that no record, event or review named
before; such a record has no session and cites none.) Run ``vacuum`` afterwards for the
text to leave the database files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ._activation_schema import EV_EVIDENCE_VERIFIED
from ._errors import InvalidInputError
from ._records import Principal, RowCounts
from ._store import Store, iso

__all__ = ["TranscriptPrune", "prune_transcript"]

_Query = Callable[[str, Sequence[Any]], list[dict[str, Any]]]


class TranscriptPrune(RowCounts):
    """What :func:`prune_transcript` did, as counts: ``sessions`` whose turns before the
    cutoff were blanked (``sessions_continuing`` of them keep newer turns), the
    ``transcript_turns`` blanked, and ``sessions_kept`` (with old turns, but memory relies
    on them)."""

    before: datetime
    tenant: str | None


def prune_transcript(
    store: Store, before: datetime, *, tenant: str | None = None
) -> TranscriptPrune:
    """Blank the words of the turns logged before ``before`` in the sessions memory does not
    rely on (see the module doc); ``tenant`` limits it to one tenant.

    Raises:
        InvalidInputError: ``before`` has no time zone.
        StoreError: the store refused a statement (the sessions before it stay pruned).
    """
    if before.tzinfo is None:
        raise InvalidInputError("before", "needs a time zone (e.g. UTC)")
    cutoff = iso(before) or ""
    only, only_params = (" AND tenant = ?", [tenant]) if tenant is not None else ("", [])
    # Sessions with a turn older than the cutoff that still holds some text.
    old = store.query(
        "SELECT tenant, principal, session_id FROM transcript_turns "
        f"WHERE time < ? AND (text != '' OR speaker IS NOT NULL){only} "
        "GROUP BY tenant, principal, session_id ORDER BY tenant, principal, session_id",
        [cutoff, *only_params],
    )
    counts = {"sessions": 0, "sessions_continuing": 0, "transcript_turns": 0, "sessions_kept": 0}
    # Per principal: the sessions memory relies on, and the newest record then read (the
    # records written later are read again inside each session's transaction).
    relied: dict[Principal, tuple[set[str], int]] = {}
    reviews = store.schema_version("activation") > 0
    for row in old:
        scope = Principal(tenant=row["tenant"], principal=row["principal"])
        if scope not in relied:
            mark = store.query(
                "SELECT COALESCE(MAX(rowid), 0) AS m FROM records "
                "WHERE tenant = ? AND principal = ?",
                [scope.tenant, scope.principal],
            )[0]["m"]
            relied[scope] = (_relied_on(store.query, scope, reviews), int(mark))
        sessions, mark = relied[scope]
        session = row["session_id"]
        key = [scope.tenant, scope.principal, session]
        with store.write(tenant=scope.tenant) as w:
            # A record written since the prune began may rely on the session. (Turns written
            # meanwhile are newer than the cutoff, so they are not touched.)
            if session in sessions or session in _relied_on(
                w.query, scope, reviews, after_rowid=mark
            ):
                counts["sessions_kept"] += 1
                continue
            blanked = int(
                w.execute(
                    "UPDATE transcript_turns SET text = '', speaker = NULL "
                    "WHERE tenant = ? AND principal = ? AND session_id = ? AND time < ? "
                    "AND (text != '' OR speaker IS NOT NULL)",
                    [*key, cutoff],
                ).rowcount
            )
            if not blanked:
                continue
            newer = w.query(
                "SELECT 1 AS x FROM transcript_turns "
                "WHERE tenant = ? AND principal = ? AND session_id = ? AND time >= ? LIMIT 1",
                [*key, cutoff],
            )
        counts["sessions"] += 1
        counts["sessions_continuing"] += bool(newer)
        counts["transcript_turns"] += blanked
    return TranscriptPrune(before=before, tenant=tenant, counts=counts)


def _relied_on(
    query: _Query, scope: Principal, reviews: bool, *, after_rowid: int | None = None
) -> set[str]:
    """The sessions memory relies on in ``scope`` (records not deleted: their own session,
    the sessions they cite, the sessions their verified evidence and review items name);
    with ``after_rowid``, only what the records written after that row add (read on the
    records' scope index, so each session's transaction reads only the new records)."""
    live = "tenant = ? AND principal = ? AND lifecycle != 'deleted'"
    params: list[Any] = [scope.tenant, scope.principal]
    if after_rowid is not None:
        live += " AND rowid > ?"
        params.append(after_rowid)
    out: set[str] = set()
    for r in query(f"SELECT session_id, evidence FROM records WHERE {live}", params):
        if r["session_id"]:
            out.add(str(r["session_id"]))
        out.update(str(e["session_id"]) for e in json.loads(r["evidence"] or "[]"))
    ids = f"SELECT id FROM records WHERE {live}"
    for r in query(
        "SELECT data FROM events WHERE tenant = ? AND principal = ? AND type = ? "
        f"AND record_id IN ({ids})",
        [scope.tenant, scope.principal, EV_EVIDENCE_VERIFIED, *params],
    ):
        session = json.loads(r["data"]).get("session_id")
        if session:
            out.add(str(session))
    if reviews:
        for r in query(
            "SELECT evidence_session_id AS s FROM activation_reviews "
            f"WHERE tenant = ? AND principal = ? AND record_id IN ({ids}) "
            "AND evidence_session_id IS NOT NULL",
            [scope.tenant, scope.principal, *params],
        ):
            out.add(str(r["s"]))
    return out
