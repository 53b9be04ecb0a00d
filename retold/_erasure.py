"""Erasing a principal: every copy of their words goes, in one transaction.

Deleting one record erases its text and what retrieval derived from it. A principal who
asks to be forgotten also left their words in the transcript, in the audit (the search
queries and the contexts handed to retrieval, the gap queries of each turn decision), in
session profile snapshots, in reviewers' notes and in extraction failure details.
:func:`erase_principal` removes all of them for one ``(tenant, principal)`` in one write
transaction, on SQLite and PostgreSQL alike; a failure rolls all of it back.

What stays is content-free: each record's row (lifecycle ``deleted``; text, tags and key
empty), each transcript turn's row (session, index, role and time; text and speaker
empty, as transcript retention leaves them), the turn decisions' skeleton (ids,
dispositions, timings, hashes), the review items' outcome and the append-only ``events``
log, which records ids, kinds, reasons and attribute keys, never a record's text.

The transcript rows stay so that the principal's sessions keep counting their turns: a
session that continues after the erasure numbers its next turn after the ones its decision
skeletons name, and a gateway client that resends the erased conversation (as OpenAI
clients resend their whole history) finds those messages already held, matched by
position, so they are not recorded again.

Dense vectors go with their records (the purge trigger); the scope's vector index goes too:
its cell centroids are means of the principal's vectors (a small cell's centroid is one
record's vector), so the cells are deleted and the index is reset to untrained, with its
generation moved so that no process's cache serves a cell it read before. Once the
transaction commits, this process's own caches of the scope (vector cells, retrieval's
speaker names, shared record objects) are dropped too, and so is every cache keyed by
people's words (:mod:`retold._text_caches`: the redactor's clean strings, the ``local``
bundle's embeddings), which cannot tell whose words they hold.

This module sits above the store and every component whose tables it erases (the store
does not know their tables); nothing below imports it.
"""

from __future__ import annotations

import structlog

from ._components import COMPONENT_MIGRATIONS
from ._erasure_fence import erasure_lock
from ._records import Principal, RowCounts
from ._retrieval import forget_scope_stats
from ._retrieval_sql import retrieval_sql
from ._store import Store, _record_from_values
from ._text_caches import clear_text_caches
from ._vectors import forget_scope

log = structlog.get_logger("retold.erasure")

#: Per component: the statements that erase the principal's words from its tables, each
#: named by what it counts (its schema is ensured first, so one erasure covers a store
#: whichever components have run on it). Every statement takes (tenant, principal).
_COMPONENTS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "audit",
        (
            (
                "search_log",
                "UPDATE search_log SET query = '', context = NULL "
                "WHERE tenant = ? AND principal = ? AND (query != '' OR context IS NOT NULL)",
            ),
            (
                "turn_decisions",
                "UPDATE turn_decisions SET gaps = '[]' "
                "WHERE tenant = ? AND principal = ? AND gaps != '[]'",
            ),
        ),
    ),
    (
        "profile",
        (
            (
                "profile_snapshots",
                "DELETE FROM profile_snapshots WHERE tenant = ? AND principal = ?",
            ),
        ),
    ),
    (
        "activation",
        (
            (
                "activation_reviews",
                "UPDATE activation_reviews SET note = NULL "
                "WHERE tenant = ? AND principal = ? AND note IS NOT NULL",
            ),
        ),
    ),
    (
        "extraction",
        (
            (
                "extraction_failures",
                "UPDATE extraction_failures SET detail = '' "
                "WHERE tenant = ? AND principal = ? AND detail != ''",
            ),
            # The transcript is gone, so the next session's turns are read from the start.
            (
                "extraction_progress",
                "DELETE FROM extraction_progress WHERE tenant = ? AND principal = ?",
            ),
        ),
    ),
    (
        "vectors",
        (
            (
                "vector_cells",
                "DELETE FROM vector_cells WHERE tenant = ? AND principal = ?",
            ),
            # Untrained, as before the first build; the generation moves past every cached
            # cell's version (the vectors themselves went with the records).
            (
                "vector_indexes",
                "UPDATE vector_indexes SET trained_count = 0, vector_count = 0, "
                "generation = generation + 1, trained_generation = generation + 1 "
                "WHERE tenant = ? AND principal = ? AND (trained_count != 0 OR vector_count != 0)",
            ),
        ),
    ),
)


class Erasure(RowCounts):
    """What :func:`erase_principal` erased, as row counts per table.

    ``records`` counts the records it deleted (those already deleted are not counted
    again); every other count is the rows whose text it removed or blanked. Erasing the
    same principal again erases nothing and counts zero.
    """

    tenant: str
    principal: str


def erase_principal(store: Store, scope: Principal, *, actor: str = "host") -> Erasure:
    """Erase every stored copy of ``scope``'s words, in one transaction.

    Every record of the principal is deleted as :meth:`Store.delete` deletes one (text,
    speaker and tags erased, idempotency key released, lexical index entry, entity names
    and vectors purged, a ``record.deleted`` event each); their transcript turns lose
    their text and speaker (the rows stay, see the module doc); profile snapshots,
    extraction progress and vector index cells are removed; the audit keeps each turn
    decision and search but loses the queries, the contexts and the gap queries;
    reviewers' notes and extraction failure details are blanked. One ``principal.erased``
    event records the counts.

    Work still in flight that read the principal's words before the erasure writes none of
    them afterwards (:mod:`retold._erasure_fence`), in this process or another: a chat
    turn keeps only its decision's skeleton and its transcript rows without their words
    (no gap queries or search text), a search is logged without its query, a session end's
    extraction writes no record, no progress and no failure, and a profile assembled before
    the erasure is assembled again.

    The database files keep the erased text in free pages, index segments and the WAL
    until ``store.vacuum()`` (or ``retold memory vacuum``) runs, as after any deletion.

    Raises:
        StoreError: the store refused a statement; nothing was erased.
    """
    for component, _ in _COMPONENTS:
        store.ensure_schema(component, COMPONENT_MIGRATIONS[component])
    params = [scope.tenant, scope.principal]
    with store.write() as w:
        # Fenced writes that began before it see this erasure (see _erasure_fence).
        retrieval_sql(store).serialize(w, erasure_lock(scope))
        counts = store.erase_scope(w, scope, actor=actor)
        for _, statements in _COMPONENTS:
            for table, sql in statements:
                counts[table] = int(w.execute(sql, params).rowcount)
        w.step("erased")
        w.event(scope, "principal.erased", actor=actor, data={"counts": counts})
    forget_scope(store, scope)
    forget_scope_stats(store, scope)
    _record_from_values.cache_clear()
    clear_text_caches()
    log.info("principal_erased", tenant=scope.tenant, **counts)
    return Erasure(tenant=scope.tenant, principal=scope.principal, counts=counts)
