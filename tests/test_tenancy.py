"""CTI-1: no store operation ever returns or touches another scope's rows."""

from __future__ import annotations

import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from retold import InvalidInputError, LifecycleState, Principal, RecordDraft, SQLiteStore

SCOPES = [Principal(tenant=t, principal=p) for t in ("acme", "globex") for p in ("alice", "bob")]
WORDS = ["paris", "budget", "deadline", "sister", "python", "invoice"]


class TenancyMachine(RuleBasedStateMachine):
    """Random writes, searches, lists and deletes over two tenants with two principals each."""

    records = Bundle("records")

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.store = SQLiteStore(Path(self._dir.name) / "t.db")
        self.owner: dict[str, Principal] = {}
        self.live: dict[Principal, set[str]] = {s: set() for s in SCOPES}

    def teardown(self) -> None:
        self.store.close()
        self._dir.cleanup()

    @rule(
        target=records,
        scope=st.sampled_from(SCOPES),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    )
    def add(self, scope: Principal, words: list[str]) -> str:
        rec = self.store.add(scope, RecordDraft(text=" ".join(words)))
        self.owner[rec.id] = scope
        self.live[scope].add(rec.id)
        return rec.id

    @rule(scope=st.sampled_from(SCOPES), word=st.sampled_from(WORDS))
    def search(self, scope: Principal, word: str) -> None:
        for rec, _ in self.store.search(scope, word):
            assert rec.scope == scope
            assert rec.id in self.live[scope]

    @rule(scope=st.sampled_from(SCOPES))
    def list_all(self, scope: Principal) -> None:
        for rec in self.store.list_records(scope, lifecycle=None, include_expired=True):
            assert self.owner[rec.id] == scope

    @rule(scope=st.sampled_from(SCOPES), record_id=records)
    def delete(self, scope: Principal, record_id: str) -> None:
        owner = self.owner[record_id]
        before = self.store.get(owner, record_id)
        if owner != scope:
            try:
                self.store.delete(scope, record_id)
            except InvalidInputError:
                pass
            else:
                raise AssertionError("deleted another scope's record")
            assert self.store.get(owner, record_id) == before
        else:
            self.store.delete(scope, record_id)
            self.live[scope].discard(record_id)

    @rule(scope=st.sampled_from(SCOPES), record_id=records)
    def get(self, scope: Principal, record_id: str) -> None:
        rec = self.store.get(scope, record_id)
        if self.owner[record_id] != scope:
            assert rec is None
        else:
            assert rec is not None and rec.scope == scope

    @rule(scope=st.sampled_from(SCOPES), record_id=records)
    def supersede(self, scope: Principal, record_id: str) -> None:
        owner = self.owner[record_id]
        rec = self.store.get(owner, record_id)
        assert rec is not None
        if owner != scope or rec.lifecycle is not LifecycleState.ACTIVE:
            try:
                self.store.add(scope, RecordDraft(text="replacement", supersedes=record_id))
            except InvalidInputError:
                return
            raise AssertionError("superseded a record outside scope or not active")
        new = self.store.add(scope, RecordDraft(text="replacement", supersedes=record_id))
        self.owner[new.id] = scope
        self.live[scope].discard(record_id)
        self.live[scope].add(new.id)

    @invariant()
    def events_stay_in_scope(self) -> None:
        for scope in SCOPES:
            for event in self.store.events(scope):
                if event.record_id is not None:
                    assert self.owner[event.record_id] == scope


TestTenancy = TenancyMachine.TestCase
TestTenancy.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
