"""The session of a gateway call that names none (no ``X-Retold-Session`` header).

An OpenAI client names no conversation: it resends the whole of it on every call. The
gateway finds the conversation from what the client sends. The first user message seeds a
base id (``conv-`` and 16 hex digits of its sha256), and a call continues the session of that
base whose stored user messages the client's earlier user messages continue. A
conversation that continues none of them starts the base's next fork (``base``, then
``base-2``, ``base-3``, ...), and the client's earlier messages are recorded in it as
imported history. That is the case for a new chat that opens with the same words as an
earlier one ("hi"), and for a client that edited an earlier message. Without forks these
shared one session, and the model was sent the other chat's history as this one's. An
app's fixed greeting before the first user message is not the seed, or all its chats
would share one base.

Matching reads user messages only, since a client may drop or reformat the assistant's. It
compares them as stored (redacted); a stored message whose words an erasure or retention
removed matches any. A client that drops messages from the middle of its history (keeping
the first and the latest) continues its session too. A turn that failed (its user message
stored, no answer) may be sent again, by the client or by its SDK's automatic retry, and
continues its session. When several sessions match, one the client continues whole wins
over one it continues with messages dropped, then the one that holds the most of the
client's user messages, then the newest.

Bounds: a call reads at most ``FORK_WINDOW`` sessions (the newest forks of its base) and
finds how many forks exist in about 2·log2(forks) primary-key seeks. A conversation
resumed after more than ``FORK_WINDOW`` newer chats opened the same way continues in a new
fork: its history is recorded again there, and the model still sees all of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from retold._records import Principal, Role, TranscriptTurn
from retold._store import Store

__all__ = ["FORK_WINDOW", "default_session_id", "fork_id", "resolve_session"]

#: The newest forks of a base a continuing call compares.
FORK_WINDOW = 16
_MAX_FORKS = 1 << 24


def default_session_id(first_message: str) -> str:
    """The base session of a conversation whose first user message is ``first_message``
    (its first fork)."""
    return "conv-" + hashlib.sha256(first_message.encode("utf-8")).hexdigest()[:16]


def fork_id(base: str, k: int) -> str:
    """The ``k``-th fork of ``base`` (1: the base itself)."""
    return base if k == 1 else f"{base}-{k}"


def _fork_count(store: Store, scope: Principal, base: str) -> int:
    """How many forks of ``base`` hold turns. Forks are started in order, so the count is
    found by doubling, then bisecting, on the transcript's primary key."""

    def exists(k: int) -> bool:
        return bool(
            store.query(
                "SELECT 1 AS x FROM transcript_turns "
                "WHERE tenant = ? AND principal = ? AND session_id = ? LIMIT 1",
                [scope.tenant, scope.principal, fork_id(base, k)],
            )
        )

    if not exists(1):
        return 0
    lo, hi = 1, 2
    while hi <= _MAX_FORKS and exists(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # exists(lo), and not exists(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if exists(mid) else (lo, mid)
    return lo


def _held(
    stored: Sequence[TranscriptTurn], earlier: Sequence[str], turn: str
) -> tuple[bool, int] | None:
    """Whether the client's conversation continues the session's whole (not with messages
    dropped), and how many of the client's user messages the session holds; None when it
    does not continue it. ``earlier`` and ``turn`` are redacted.

    It continues it when the session's user messages are where the client's begin, or
    when the client dropped some from the middle of its history (a client that keeps the
    first messages and the latest ones): the client's are then, in order, among the
    session's, and both end with the same one.

    A turn that failed left its user message unanswered: the client (or its SDK) sends it
    again as its turn, so a session whose last user message is unanswered may hold the
    call's ``turn`` too, and a user message followed by the same one (the failed try, then
    the retry) counts once.
    """
    users: list[str] = []
    answered = True
    for t in stored:
        if t.role is Role.USER:
            if not answered and users and users[-1] == t.text:
                continue  # the retry of a turn that failed
            users.append(t.text)
            answered = False
        elif t.role is Role.ASSISTANT:
            answered = True
    mine = [*earlier] if answered else [*earlier, turn]
    if not users or not mine:
        return None
    if len(users) <= len(mine):
        if all(_same(text, said) for text, said in zip(users, mine, strict=False)):
            return True, len(users)
    elif _same(users[-1], mine[-1]) and _among(mine, users):
        return False, len(mine)
    return None


def _same(stored: str, said: str) -> bool:
    """Whether a stored user message is the client's (a blank one, whose words an erasure
    or retention removed, is any)."""
    return not stored or stored == said


def _among(mine: Sequence[str], users: Sequence[str]) -> bool:
    """Whether the client's messages are, in order, among the session's."""
    at = 0
    for said in mine:
        while at < len(users) and not _same(users[at], said):
            at += 1
        if at == len(users):
            return False
        at += 1
    return True


def resolve_session(
    store: Store,
    scope: Principal,
    first_message: str,
    conversation: Sequence[tuple[str, str]],
    turn: str,
    claimed: Callable[[str], bool],
) -> str:
    """The session a call without ``X-Retold-Session`` continues, or the fork it starts.

    ``conversation`` is the client's earlier messages as ``(role, text)`` and ``turn`` its
    last user message; ``claimed`` says whether a session id is taken by a call still in
    flight (it may not have written yet), so that two chats opening at once start two
    forks. Reads the store: run it in a thread, under a lock that covers the principal's
    resolutions and claims.
    """
    base = default_session_id(first_message)
    count = _fork_count(store, scope, base)
    redact = store.redactor.for_tenant(scope.tenant).redact
    earlier = [redact(text) for role, text in conversation if role == "user"]
    said = redact(turn)
    if count:
        best: tuple[tuple[bool, int], str] | None = None
        for k in range(count, max(0, count - FORK_WINDOW), -1):
            session = fork_id(base, k)
            held = _held(store.turns(scope, session), earlier, said)
            if held is not None and (best is None or held > best[0]):
                best = (held, session)
        if best is not None:
            return best[1]
    k = count + 1
    while claimed(fork_id(base, k)):
        k += 1
    return fork_id(base, k)
