"""The orchestrator refuses to serve a bundle without a sufficient, passing fitness result (§5),
and its error names the bundle and a command that works as printed (issue 16)."""

from __future__ import annotations

import shlex
import sqlite3
from pathlib import Path

import anyio
import pytest

from retold import Principal, RecordDraft, SQLiteStore, Store, UnfittedBundleError, open_store
from retold._fitness import FitnessResult, record_fitness, run_fitness
from retold._serving_gate import MINIMUM_CASES, recorded_fitness
from retold.adapters import MemoryChat, OfflineResponder, OpenAIChatAdapter
from retold.cli import _fitness as cli_fitness
from retold.cli import main
from retold.policy.reference import get_bundle
from retold.testing import LoopbackServer, loopback_fixture

from .test_fitness import LEGACY, _small_set

BUNDLE = get_bundle("offline-reference")

loopback = loopback_fixture()


def _chat(store: Store, *, shadow: bool = False) -> MemoryChat:
    return MemoryChat.from_bundle(
        store=store,
        bundle=BUNDLE,
        responder=OfflineResponder(),
        config=BUNDLE.config(shadow=shadow),
    )


def _one_case(tmp_path: Path) -> Path:
    out = tmp_path / "one"
    out.mkdir()
    line = (LEGACY / "conditional.jsonl").read_text(encoding="utf-8").splitlines()[0]
    (out / "conditional.jsonl").write_text(line + "\n", encoding="utf-8")
    return out


def _sufficient_pass(result: FitnessResult) -> FitnessResult:
    """``result`` relabelled as a pass measured on exactly the minimum number of cases (the
    recording path, not the harness, is what these tests exercise)."""
    return result.model_copy(
        update={"verdict": "pass", "category_counts": dict(MINIMUM_CASES), "insufficient": {}}
    )


def _small_passing_runs(monkeypatch: pytest.MonkeyPatch, small: Path) -> None:
    """`retold fitness` runs on ``small`` instead of the packaged test split, and its result
    is relabelled a sufficient pass: what the command records, not the bundle's quality."""
    monkeypatch.setattr(cli_fitness, "default_scenarios", lambda: small)
    real = cli_fitness._fitness.run_fitness

    async def passing(*args: object, **kw: object) -> FitnessResult:
        return _sufficient_pass(await real(*args, **kw))  # type: ignore[arg-type]

    monkeypatch.setattr(cli_fitness._fitness, "run_fitness", passing)


def test_unfitted_bundle_is_refused_live_but_runs_in_shadow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recorded result: serving live raises an error naming the bundle and a full command
    (--db, --record, --review-owner); shadow mode is allowed."""
    monkeypatch.setenv("RETOLD_REVIEW_OWNER", "kim")
    store = SQLiteStore(tmp_path / "host.db")
    with pytest.raises(UnfittedBundleError) as caught:
        _chat(store)
    message = str(caught.value)
    assert "'offline-reference'" in message
    assert "no fitness result is recorded" in message
    expected = (
        f"retold fitness --bundle offline-reference --db {shlex.quote(str(tmp_path / 'host.db'))}"
        " --record --review-owner kim"
    )
    assert expected in message
    assert _chat(store, shadow=True).orchestrator is not None


def test_the_printed_command_reaches_the_same_store_on_every_backend(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite and PostgreSQL alike, an unfitted bundle raises UnfittedBundleError (not an
    AttributeError), and its ``--db`` opens the very store that refused, with no password."""
    monkeypatch.setenv("RETOLD_REVIEW_OWNER", "kim")
    with pytest.raises(UnfittedBundleError) as caught:
        _chat(any_store)
    location = any_store.location
    assert location is not None
    assert f"--db {shlex.quote(location)} --record --review-owner kim" in str(caught.value)
    alice = Principal(tenant="acme", principal="alice")
    written = any_store.add(alice, RecordDraft(text="reached through the printed --db"))
    with open_store(location, must_exist=True) as reopened:
        assert reopened.get(alice, written.id) == written


def test_a_postgresql_location_never_carries_the_password() -> None:
    """The URL a command prints drops the password (libpq reads PGPASSWORD or ~/.pgpass) and
    keeps the user, host, port, options and schema."""
    from retold._store_postgres import PostgresStore

    store = PostgresStore.__new__(PostgresStore)  # location reads only url and schema
    store.url, store.schema = "postgresql://app:s3cr%40t@db.internal:6432/mem?sslmode=require", "t1"
    assert store.location == (
        "postgresql://app@db.internal:6432/mem?sslmode=require&retold_schema=t1"
    )
    store.url, store.schema = "postgres://:only-password@db/mem", None
    assert store.location == "postgres://db/mem"
    store.url = "host=db dbname=mem password=x"  # a key=value string: no URL to print
    assert store.location is None


def test_a_one_case_directory_never_unlocks_serving(tmp_path: Path) -> None:
    """A one-case scenario directory yields 'insufficient'; recorded, it does not let the bundle
    serve, even relabelled 'pass'; the error says too few cases."""
    store = SQLiteStore(tmp_path / "host.db")
    result = anyio.run(lambda: run_fitness(BUNDLE, _one_case(tmp_path), review_owner="team"))
    assert result.verdict == "insufficient"
    assert sum(result.category_counts.values()) == 1
    record_fitness(store, result)
    with pytest.raises(UnfittedBundleError, match="too few cases"):
        _chat(store)
    record_fitness(store, result.model_copy(update={"verdict": "pass"}))
    with pytest.raises(UnfittedBundleError, match=r"too few cases \(ordinary 0 < 20"):
        _chat(store)


def test_recorded_results_gate_serving(tmp_path: Path) -> None:
    """A failing newest result refuses (naming the failed gates); a sufficient pass serves; a
    later failure withdraws it."""
    store = SQLiteStore(tmp_path / "host.db")
    result = anyio.run(lambda: run_fitness(BUNDLE, _small_set(tmp_path), review_owner="team"))
    passing = _sufficient_pass(result)
    failing = passing.model_copy(update={"verdict": "fail"})
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
    record_fitness(store, _sufficient_pass(result).model_copy(update={"bundle_sha256": "0" * 64}))
    with pytest.raises(UnfittedBundleError):
        _chat(store)


def test_the_printed_command_works_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command in the error, run as printed through the CLI, records its result in the
    same database; once that result is a sufficient pass, serving works.

    The default scenario set is swapped for a small one and the verdict for a sufficient pass,
    so the test exercises the command line and the recording path, not the bundle's quality.
    """
    monkeypatch.delenv("RETOLD_REVIEW_OWNER", raising=False)
    db = tmp_path / "host.db"
    store = SQLiteStore(db)
    with pytest.raises(UnfittedBundleError) as caught:
        _chat(store)
    command = next(
        line.strip() for line in str(caught.value).splitlines() if "retold fitness" in line
    )
    argv = shlex.split(command)
    assert argv[:2] == ["retold", "fitness"] and "--review-owner" in argv
    _small_passing_runs(monkeypatch, _small_set(tmp_path))
    assert main(argv[1:]) == 0
    assert "recorded as fitness result" in capsys.readouterr().out
    got = recorded_fitness(store, str(BUNDLE.manifest["bundle_sha256"]))
    assert got is not None and got.passed and got.scenario_set_sha256
    assert _chat(store).orchestrator is not None


def test_results_recorded_before_the_case_counts_no_longer_serve(tmp_path: Path) -> None:
    """A pass written by the previous schema (no per-category counts) is migrated but does not
    unlock serving: the error asks for a new run."""
    db = tmp_path / "host.db"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE fitness_results (
            id INTEGER PRIMARY KEY AUTOINCREMENT, bundle TEXT NOT NULL,
            bundle_sha256 TEXT NOT NULL, scenario_set_sha256 TEXT NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail')), gates TEXT NOT NULL,
            result TEXT NOT NULL, harness_version TEXT NOT NULL, created_at TEXT NOT NULL);
        CREATE INDEX fitness_results_bundle ON fitness_results (bundle_sha256, id);
        INSERT INTO retold_schema (component, version) VALUES ('fitness', 1);
        """
    )
    conn.execute(
        "INSERT INTO fitness_results (bundle, bundle_sha256, scenario_set_sha256, verdict, "
        "gates, result, harness_version, created_at) VALUES (?, ?, ?, 'pass', '[]', '{}', "
        "'retold-fitness/1', '2026-01-01T00:00:00+00:00')",
        ["offline-reference", BUNDLE.manifest["bundle_sha256"], "0" * 64],
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(db)
    got = recorded_fitness(store, str(BUNDLE.manifest["bundle_sha256"]))
    assert got is not None and got.verdict == "pass" and got.category_counts == {}
    assert not got.passed
    with pytest.raises(UnfittedBundleError, match="too few cases"):
        _chat(store)


def test_no_command_is_printed_where_none_would_work(tmp_path: Path) -> None:
    """An in-memory store or a bundle without a registry name gets directions, not a command
    that could not work as printed."""
    from retold._serving_gate import fitness_command, require_fitness

    memory = SQLiteStore(":memory:")
    assert fitness_command(memory, "offline-reference") is None
    with pytest.raises(UnfittedBundleError, match="in memory") as caught:
        require_fitness(memory, "ab" * 32, bundle_name="offline-reference")
    assert "retold fitness --" not in str(caught.value)
    on_disk = SQLiteStore(tmp_path / "host.db")
    assert fitness_command(on_disk, None) is None
    with pytest.raises(UnfittedBundleError, match="no registry name"):
        require_fitness(on_disk, "ab" * 32)


# -- the policy model a result was measured with -----------------------------------------

REFERENCE = get_bundle("reference")
REFERENCE_SHA = str(REFERENCE.manifest["bundle_sha256"])


def _reference_chat(store: Store, model: str, base_url: str) -> MemoryChat:
    adapter = OpenAIChatAdapter(model, base_url=base_url, api_key="sk-never-printed")
    return MemoryChat.from_bundle(
        store=store, bundle=REFERENCE, model=adapter, config=REFERENCE.config(shadow=False)
    )


def _reference_pass(offline: FitnessResult, policy_model: str) -> FitnessResult:
    """An offline run's result relabelled as a sufficient pass of the reference bundle."""
    return _sufficient_pass(offline).model_copy(
        update={
            "bundle": "reference",
            "bundle_sha256": REFERENCE_SHA,
            "offline": False,
            "policy_model": policy_model,
        }
    )


def test_a_pass_measured_with_one_model_does_not_serve_another(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """A model-backed bundle's fitness is its policies' model's: a pass recorded with model
    B does not let the same bundle serve with model A, and the error says which model it
    needs a result for."""
    store = SQLiteStore(tmp_path / "host.db")
    base = loopback.openai_base_url
    offline = anyio.run(lambda: run_fitness(BUNDLE, _small_set(tmp_path), review_owner="team"))
    # A result with no policy model (what rows written before it was recorded migrate to)
    # unlocks a model-free bundle only.
    record_fitness(store, _reference_pass(offline, ""))
    with pytest.raises(UnfittedBundleError):
        _reference_chat(store, "model-b", base)
    record_fitness(store, _reference_pass(offline, "openai:model-b"))
    with pytest.raises(UnfittedBundleError) as caught:
        _reference_chat(store, "model-a", base)
    message = str(caught.value)
    assert "policy model (openai:model-a)" in message
    assert "sk-never-printed" not in message
    assert _reference_chat(store, "model-b", base).orchestrator is not None


def test_the_printed_command_measures_the_serving_model(
    tmp_path: Path,
    loopback: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """For a model-backed bundle the printed command names the model through the variables
    `retold fitness` reads; run as printed, it records a result bound to that model, after
    which serving with it works."""
    for name in ("RETOLD_PROVIDER", "RETOLD_BASE_URL", "RETOLD_MODEL", "RETOLD_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "host.db"
    store = SQLiteStore(db)
    with pytest.raises(UnfittedBundleError) as caught:
        _reference_chat(store, "model-a", loopback.openai_base_url)
    command = next(
        line.strip() for line in str(caught.value).splitlines() if "retold fitness" in line
    )
    argv = shlex.split(command)
    env = dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))
    assert env == {
        "RETOLD_PROVIDER": "openai",
        "RETOLD_BASE_URL": loopback.openai_base_url,
        "RETOLD_MODEL": "model-a",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rest = argv[len(env) :]
    assert rest[:2] == ["retold", "fitness"]
    _small_passing_runs(monkeypatch, _small_set(tmp_path, per_file=1))
    assert main(rest[1:]) == 0
    assert "recorded as fitness result" in capsys.readouterr().out
    got = recorded_fitness(store, REFERENCE_SHA, policy_model="openai:model-a")
    assert got is not None and got.passed
    assert _reference_chat(store, "model-a", loopback.openai_base_url).orchestrator is not None


def test_the_printed_base_url_carries_no_credentials(tmp_path: Path) -> None:
    """The command names the model's server by scheme, host, port and path only."""
    from retold._serving_gate import fitness_command

    class Model:
        provider = "openai"
        model = "m"
        base_url = "https://user:secret@llm.internal:8443/v1?api-key=also-secret"

        async def complete(self, *args: object, **kw: object) -> None: ...

    command = fitness_command(SQLiteStore(tmp_path / "h.db"), "reference", [Model()])
    assert command is not None
    assert command.startswith(
        "RETOLD_PROVIDER=openai RETOLD_BASE_URL=https://llm.internal:8443/v1 RETOLD_MODEL=m "
    )
    assert "secret" not in command
