"""Issue 15 hardening: secrets through every column, scope ids, atomic chat turns, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from retold import (
    InvalidInputError,
    Principal,
    ProfileBlock,
    RecordDraft,
    SQLiteStore,
    StoreError,
    StoreIntegrityError,
    TurnOptions,
    UtilityAwareOrchestrator,
)
from retold._redaction import normalise
from retold.adapters import MemoryChat, OfflineResponder
from retold.policy.lexical import LexicalGapPlanner
from retold.policy.reference import get_bundle

from .conftest import FixedClock
from .test_redaction import PLANTED

BUNDLE = get_bundle("offline-reference")
SCOPE = Principal(tenant="acme", principal="alice")
JWT = (
    "eyJ" + "hbGciOiJIUzI1NiJ9.eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"
)


def _chat(store: SQLiteStore, **kw: Any) -> MemoryChat:
    return MemoryChat.from_bundle(
        store=store,
        bundle=BUNDLE,
        responder=OfflineResponder(),
        config=BUNDLE.config(shadow=True),
        **kw,
    )


def _db_bytes(path: Path) -> bytes:
    blob = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(str(path) + suffix)
        if p.exists():
            blob += p.read_bytes()
    return blob


def _secret_turns() -> list[str]:
    """Ordinary chat turns that paste each planted credential, several ways."""
    turns: list[str] = []
    for text, _secret in PLANTED.values():
        turns.append(f"What did I tell you about my keys? Here it is again: {text}")
        turns.append(f"Remember my setup, I use this daily: {text.upper()}")
    turns.append('Search my notes for {"password": "Hunter2Hunter2", "q": "my db"}, I told you.')
    return turns


def test_pasted_credentials_leave_no_byte_in_the_database(tmp_path: Path) -> None:
    """Chat turns pasting credentials through the offline bundle (gap queries, decisions,
    transcript, extraction) leave no planted secret in any byte, compared case-insensitively."""
    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    store.add(SCOPE, RecordDraft(text="My database runs on Postgres at work."))
    chat = _chat(store)

    async def main() -> None:
        for i, turn in enumerate(_secret_turns()):
            await chat.turn(SCOPE, f"s{i % 3}", turn)
        for s in ("s0", "s1", "s2"):
            await chat.end_session(SCOPE, s)

    anyio.run(main)
    gaps = store.query("SELECT gaps FROM turn_decisions WHERE gap_count > 0")
    assert gaps, "the planner planned no gap: the gap columns were not exercised"
    store.close()
    blob = _db_bytes(path).lower()
    secrets = [s for _t, s in PLANTED.values()] + ["Hunter2Hunter2"]
    found = [s for s in secrets if s.lower().encode() in blob]
    assert found == []


def test_gap_planner_strips_secrets_before_lower_casing() -> None:
    """The offline planner's query never carries a (lower-cased) AWS key id or password."""
    key = "AKIA" + "Q7XK2M4P9RZT3WVB"
    turn = f"What did I say about my AWS key {key} and password=Hunter2Hunter2?"
    plan = LexicalGapPlanner().plan(turn, None, ProfileBlock.empty(), ["fact"])
    assert plan.gaps
    for gap in plan.gaps:
        assert key.lower() not in gap.query.lower() and "hunter2" not in gap.query.lower()


def test_writer_redacts_values_before_encoding(store: SQLiteStore) -> None:
    """Structured values and JSON-encoded strings are redacted value by value (escaped
    quotes, \\u200b and fullwidth escapes included) before they reach a column."""
    secret = "Zx9Qw8Er7Ty6Ui5O"
    store.ensure_schema("ext", ["CREATE TABLE ext_rows (tenant TEXT, body TEXT)"])
    hidden = secret[:3] + "\u200b" + secret[3:]
    fullwidth = "".join(chr(ord(c) + 0xFEE0) for c in secret)
    with store.write() as w:
        w.insert("ext_rows", {"tenant": "t", "body": [{"q": f"api_key={hidden}"}]})
        w.insert("ext_rows", {"tenant": "t", "body": json.dumps({"q": f'api_key="{secret}"'})})
        w.insert("ext_rows", {"tenant": "t", "body": json.dumps([f"api_key={fullwidth}"])})
        w.insert("ext_rows", {"tenant": "t", "body": json.dumps({"api_key": secret})})
        inner = json.dumps({"note": f"api_key={hidden}"})  # escaped \u200b inside
        w.insert("ext_rows", {"tenant": "t", "body": f"look up {json.dumps(inner)} please"})
    bodies = [r["body"] for r in store.query("SELECT body FROM ext_rows")]
    assert len(bodies) == 5
    for body in bodies:
        decoded = normalise(body)
        assert secret not in decoded and secret[3:] not in decoded, body
        assert "[REDACTED:" in body


def test_redaction_ids_are_keyed_per_tenant(store: SQLiteStore) -> None:
    """The same secret stored by two tenants gets unrelated redaction ids."""
    text = "config api_key=" + "Zx9Qw8Er7Ty6Ui5O"
    a = store.add(Principal(tenant="t1", principal="p"), RecordDraft(text=text))
    b = store.add(Principal(tenant="t2", principal="p"), RecordDraft(text=text))
    again = store.add(Principal(tenant="t1", principal="q"), RecordDraft(text=text))
    assert a.text != b.text and a.text == again.text and "[REDACTED:" in a.text


def test_jwt_session_id_works_for_two_turns_and_never_reaches_logs_or_files(
    tmp_path: Path,
) -> None:
    """A JWT-shaped session id is one session across turns, stored and logged as its
    pseudonym only."""
    path = tmp_path / "jwt.db"
    store = SQLiteStore(path)
    store.add(SCOPE, RecordDraft(text="I like hiking in the Alps."))
    chat = _chat(store)

    async def main() -> list[int]:
        first = await chat.turn(SCOPE, JWT, "Where do I like hiking?")
        second = await chat.turn(SCOPE, JWT, "And what else do you remember about me?")
        return [first.turn_index, second.turn_index]

    with capture_logs() as logs:
        assert anyio.run(main) == [0, 2]
    assert [t.turn_index for t in store.turns(SCOPE, JWT)] == [0, 1, 2, 3]
    assert JWT not in json.dumps(logs, default=str)
    assert len(store.query("SELECT id FROM turn_decisions")) == 2
    store.close()
    assert JWT.split(".")[-1].lower().encode() not in _db_bytes(path).lower()


def test_secret_shaped_principal_reads_what_it_wrote(store: SQLiteStore) -> None:
    """A ghp_-shaped principal id is hashed the same way on write and read."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    scope = Principal(tenant="acme", principal=token)
    assert scope.principal.startswith("hashed-") and token not in scope.principal
    rec = store.add(scope, RecordDraft(text="I live in Lisbon."))
    assert store.get(Principal(tenant="acme", principal=token), rec.id) == rec
    assert [r.id for r in store.list_records(scope)] == [rec.id]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x" * 1_000_000, "1-200 characters"),
        ("password:hunter2x", "secret"),
        ("bad id", "1-200 characters"),
        ("a\udcff", "1-200 characters"),
    ],
)
def test_scope_ids_are_validated_at_the_boundary(value: str, message: str) -> None:
    """Oversized, secret-carrying or malformed ids are refused by name, before any work."""
    with pytest.raises(ValueError, match=message):
        Principal(tenant="acme", principal=value)
    with pytest.raises(InvalidInputError, match=f"session_id: .*{message}"):
        SQLiteStore(":memory:").turns(SCOPE, value)


def test_fts_integrity_check_passes_with_deleted_records(store: SQLiteStore) -> None:
    """FTS5's index-against-table check passes on a store with deleted records."""
    keep = store.add(SCOPE, RecordDraft(text="Alpha beta gamma."))
    gone = store.add(SCOPE, RecordDraft(text="Delta epsilon zeta."))
    store.delete(SCOPE, gone.id)
    assert store.check_integrity() == []
    assert [r.id for r, _ in store.search(SCOPE, "alpha delta")] == [keep.id]


# -- bad input: a Retold error naming the field, nothing written --------------------------


def _nothing_written(store: SQLiteStore) -> bool:
    turns = store.query("SELECT COUNT(*) AS n FROM transcript_turns")[0]["n"]
    decisions = store.query("SELECT COUNT(*) AS n FROM turn_decisions")[0]["n"]
    return turns == 0 and decisions == 0


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"text": "x" * 200_001}, "text", "limit is 200,000 characters"),
        ({"text": "hi \udc80 there"}, "text", "lone surrogate"),
        ({"text": "   "}, "text", "must not be empty"),
        ({"text": 42}, "text", "must be a str"),
        ({"session_id": None}, "session_id", "must be a string"),
        ({"session_id": JWT + "x" * 300}, "session_id", "1-200"),
        ({"scope": "acme/alice"}, "scope", "must be a Principal"),
        ({"public_context": "\ud800"}, "public_context", "lone surrogate"),
        ({"options": {"latency_budget_ms": 5}}, "options", "must be TurnOptions"),
    ],
)
def test_chat_turn_bad_input_names_the_field_and_writes_nothing(
    store: SQLiteStore, kwargs: dict[str, Any], field: str, message: str
) -> None:
    """MemoryChat.turn refuses bad input with InvalidInputError, and nothing is written."""
    chat = _chat(store)
    args: dict[str, Any] = {"scope": SCOPE, "session_id": "s1", "text": "hello", **kwargs}
    with pytest.raises(InvalidInputError) as exc:
        anyio.run(
            lambda: chat.turn(
                args["scope"],
                args["session_id"],
                args["text"],
                public_context=args.get("public_context"),
                options=args.get("options"),
            )
        )
    assert exc.value.field == field and message in str(exc.value)
    assert _nothing_written(store)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"turn": "caf\udce9"}, "turn"),
        ({"turn": None}, "turn"),
        ({"session_id": 7}, "session_id"),
        ({"turn_index": "0"}, "turn_index"),
        ({"profile": None}, "profile"),
        ({"generate_draft": "not callable"}, "generate_draft"),
        ({"options": None}, "options"),
        ({"inventory": "fact"}, "inventory"),
        ({"retriever": object()}, "retriever"),
    ],
)
def test_prepare_turn_bad_input_names_the_field_and_writes_nothing(
    store: SQLiteStore, kwargs: dict[str, Any], field: str
) -> None:
    """prepare_turn checks its arguments first: InvalidInputError, no row, no draft."""
    orch = UtilityAwareOrchestrator(
        store,
        BUNDLE.config(shadow=True),
        gap_policy=BUNDLE.gap_policy(None),
        admission_policy=BUNDLE.admission_policy(None),
    )
    drafted: list[str] = []

    def draft(req: Any) -> str:
        drafted.append(req.turn)
        return "ok"

    args: dict[str, Any] = {
        "session_id": "s1",
        "turn_index": 0,
        "turn": "hello",
        "public_context": None,
        "profile": ProfileBlock.empty(),
        "generate_draft": draft,
        "generate_final": draft,
        "options": TurnOptions(),
        "retriever": None,
        **kwargs,
    }
    with pytest.raises(InvalidInputError) as exc:
        anyio.run(lambda: orch.prepare_turn(SCOPE, **args))
    assert exc.value.field == field
    assert drafted == [] and store.query("SELECT COUNT(*) AS n FROM turn_decisions")[0]["n"] == 0


def test_model_returning_none_is_a_retold_error(store: SQLiteStore) -> None:
    """A chat adapter whose complete() returns None fails the turn with a named error."""

    class NoneModel:
        model = "none"
        supports_tools = False

        async def complete(self, messages: Any, **_: Any) -> None:
            return None

    chat = MemoryChat(store=store, model=NoneModel(), memory_mode="off")
    with pytest.raises(InvalidInputError) as exc:
        anyio.run(lambda: chat.turn(SCOPE, "s1", "hello"))
    assert exc.value.field == "model"
    assert store.query("SELECT COUNT(*) AS n FROM transcript_turns")[0]["n"] == 0


# -- atomic turns ----------------------------------------------------------------------------


_STEPS = ["turn_user", "turn_decision", "search_log", "turn_assistant", "turn_committing"]


@pytest.mark.parametrize("step", _STEPS)
def test_a_fault_inside_a_turn_leaves_nothing_and_the_session_continues(
    tmp_path: Path, clock: FixedClock, step: str
) -> None:
    """A failure at any point of a turn's write leaves no partial turn; the next turn of
    the session reuses nothing and continues cleanly."""
    armed = {"on": True}

    def fault(name: str) -> None:
        if armed["on"] and name == step:
            raise RuntimeError(f"injected at {name}")

    store = SQLiteStore(tmp_path / "f.db", clock=clock, on_write_step=fault)
    store.add(SCOPE, RecordDraft(text="I like hiking in the Alps."))
    chat = _chat(store)
    with pytest.raises((RuntimeError, StoreError)):
        anyio.run(lambda: chat.turn(SCOPE, "s1", "Where do I like hiking?"))
    assert _nothing_written(store)
    assert store.query("SELECT COUNT(*) AS n FROM search_log")[0]["n"] == 0
    armed["on"] = False
    reply = anyio.run(lambda: chat.turn(SCOPE, "s1", "Where do I like hiking?"))
    assert reply.turn_index == 0
    rows = store.query("SELECT turn_index FROM turn_decisions")
    assert [r["turn_index"] for r in rows] == [0]
    assert [t.turn_index for t in store.turns(SCOPE, "s1")] == [0, 1]


def test_a_duplicate_turn_index_rolls_the_whole_turn_back(store: SQLiteStore) -> None:
    """Two turns racing for one index: the loser writes nothing at all (no orphan decision)."""
    chat = _chat(store)
    anyio.run(lambda: chat.turn(SCOPE, "s1", "hello"))
    turns = store.turns

    def stale(scope: Principal, session_id: str, *, last: int | None = None) -> Any:
        return []  # as if another worker had not yet seen turn 0

    store.turns = stale  # type: ignore[method-assign]
    try:
        with pytest.raises(StoreError, match="IntegrityError"):
            anyio.run(lambda: chat.turn(SCOPE, "s1", "again"))
    finally:
        store.turns = turns  # type: ignore[method-assign]
    assert len(store.query("SELECT id FROM turn_decisions")) == 1
    assert [t.turn_index for t in store.turns(SCOPE, "s1")] == [0, 1]
    with pytest.raises(StoreIntegrityError, match="IntegrityError"):
        with store.write() as w:
            w.execute(
                "INSERT INTO transcript_turns VALUES ('acme','alice','s1',0,'user',NULL,'x','t')"
            )


@pytest.mark.anyio
async def test_a_cancelled_turn_leaves_nothing(store: SQLiteStore) -> None:
    """Cancelling MemoryChat.turn while the model is answering writes no part of the turn."""
    scope_holder: dict[str, anyio.CancelScope] = {}

    async def model(messages: Any) -> str:
        scope_holder["scope"].cancel()
        await anyio.sleep_forever()
        return "never"

    chat = MemoryChat(
        store=store,
        model=model,
        memory_mode="utility_aware",
        retriever=_chat(store).retriever,
        config=BUNDLE.config(shadow=True),
        gap_policy=BUNDLE.gap_policy(None),
        admission_policy=BUNDLE.admission_policy(None),
        require_fitness=False,
    )
    with anyio.CancelScope() as cancel:
        scope_holder["scope"] = cancel
        await chat.turn(SCOPE, "s1", "hello there")
    assert cancel.cancelled_caught
    assert store.turns(SCOPE, "s1") == []
    assert store.query("SELECT COUNT(*) AS n FROM turn_decisions")[0]["n"] == 0
