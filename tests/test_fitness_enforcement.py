"""The orchestrator refuses to serve a bundle without a passing fitness result in the store (§5)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from retold import Principal, SQLiteStore, UnfittedBundleError
from retold._fitness import record_fitness, run_fitness
from retold.adapters import MemoryChat, OfflineResponder
from retold.policy.reference import get_bundle

from .test_fitness import _small_set

BUNDLE = get_bundle("offline-reference")


def _chat(store: SQLiteStore, *, shadow: bool = False) -> MemoryChat:
    return MemoryChat.from_bundle(
        store=store,
        bundle=BUNDLE,
        responder=OfflineResponder(),
        config=BUNDLE.config(shadow=shadow),
    )


def test_unfitted_bundle_is_refused_live_but_runs_in_shadow(tmp_path: Path) -> None:
    """No recorded result: serving live raises, shadow mode is allowed."""
    store = SQLiteStore(tmp_path / "host.db")
    with pytest.raises(UnfittedBundleError, match="retold fitness"):
        _chat(store)
    assert _chat(store, shadow=True).orchestrator is not None


def test_recorded_results_gate_serving(tmp_path: Path) -> None:
    """A failing newest result refuses; a passing one serves; a later failure withdraws it."""
    store = SQLiteStore(tmp_path / "host.db")
    result = anyio.run(lambda: run_fitness(BUNDLE, _small_set(tmp_path), review_owner="team"))
    failing = result.model_copy(update={"verdict": "fail"})
    passing = result.model_copy(update={"verdict": "pass"})  # the verdict is what is under test
    record_fitness(store, failing)
    with pytest.raises(UnfittedBundleError, match="failed"):
        _chat(store)
    record_fitness(store, passing)
    chat = _chat(store)
    reply = anyio.run(lambda: chat.turn(Principal(tenant="t", principal="p"), "s1", "hello there"))
    assert reply.decision is not None and not reply.decision.shadow
    record_fitness(store, failing)
    with pytest.raises(UnfittedBundleError):
        _chat(store)


def test_another_bundles_result_does_not_count(tmp_path: Path) -> None:
    """A passing result recorded for a different bundle hash does not let this bundle serve."""
    store = SQLiteStore(tmp_path / "host.db")
    result = anyio.run(lambda: run_fitness(BUNDLE, _small_set(tmp_path), review_owner="team"))
    record_fitness(store, result.model_copy(update={"verdict": "pass", "bundle_sha256": "0" * 64}))
    with pytest.raises(UnfittedBundleError):
        _chat(store)
