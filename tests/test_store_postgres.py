"""PostgresStore on a real cluster: concurrent CLI writers, secrets off disk, tenancy, erasure.

Runs only when ``RETOLD_TEST_POSTGRES_URL`` names a test cluster (``.ci/run`` starts one);
each test works in a fresh schema (``?retold_schema=...``) dropped afterwards.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from retold import (
    AsyncStore,
    InvalidInputError,
    PostgresStore,
    Principal,
    RecordDraft,
    StoreError,
    open_store,
)
from retold.cli import main

from .conftest import POSTGRES_URL, fresh_pg_schema, need_readable, postgres_table_files

# conftest does not collect this module without a cluster; this guards a direct run.
pytestmark = pytest.mark.skipif(POSTGRES_URL is None, reason="RETOLD_TEST_POSTGRES_URL is not set")


SCOPE = ["--tenant", "acme", "--principal", "alice"]

# One writer process: 25 `retold memory add` calls; its first record carries a secret.
_WRITER = """
import sys
from retold.cli import main

url, writer, secret_text = sys.argv[1], sys.argv[2], sys.argv[3]
for i in range(25):
    text = secret_text if i == 0 else f"writer {writer} record {i}"
    code = main(["memory", "add", "--db", url, "--tenant", "acme", "--principal", "alice", text])
    if code != 0:
        sys.exit(code)
"""


@pytest.fixture
def url() -> Iterator[str]:
    """The test cluster's URL, pointed at a fresh schema."""
    with fresh_pg_schema() as schema:
        yield _url(schema)


def _url(schema: str) -> str:
    assert POSTGRES_URL is not None
    sep = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{sep}retold_schema={schema}"


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


@pytest.fixture(scope="module")
def written() -> Iterator[tuple[str, dict[str, str]]]:
    """4 concurrent writer processes x 25 CLI adds into a fresh schema; (url, secret -> text)."""
    templates = ["my key id is {}", "use {} for the API", "github token {}", "my password is {}"]
    alnum = string.ascii_letters + string.digits
    planted = [
        "AKIA" + _random(string.ascii_uppercase + string.digits, 16),
        "sk-proj-" + _random(alnum, 28),
        "ghp_" + _random(alnum, 36),
        _random(alnum, 14),
    ]
    with fresh_pg_schema() as schema:
        url = _url(schema)
        texts = {secret: t.format(secret) for secret, t in zip(planted, templates, strict=True)}
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, url, str(w), texts[planted[w]]],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONWARNINGS": "error"},
            )
            for w in range(4)
        ]
        for proc in writers:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
        yield url, texts


def _list(capsys: pytest.CaptureFixture[str], url: str, *scope: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["memory", "list", "--db", url, *scope, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_four_concurrent_writer_processes_lose_nothing(
    written: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """4 processes x 25 `retold memory add` calls: all 100 records list back, none twice."""
    url, _ = written
    records = _list(capsys, url, *SCOPE)["records"]
    assert len(records) == 100 == len({r["id"] for r in records})
    plain = sorted(
        r["text"] for r in records if not r["text"].startswith(("my ", "use ", "github"))
    )
    assert plain == sorted(f"writer {w} record {i}" for w in range(4) for i in range(1, 25))


def test_planted_secrets_reach_no_byte_of_the_data_directory(
    written: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Four secrets written by the CLI writers are in no file of the cluster after a CHECKPOINT."""
    import psycopg

    url, planted = written
    stored = [r["text"] for r in _list(capsys, url, *SCOPE)["records"]]
    assert sum("[REDACTED:" in t for t in stored) == 4
    assert not any(secret in t for secret in planted for t in stored)
    assert POSTGRES_URL is not None
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    data_dir = Path(row[0])
    need_readable(data_dir)
    needles = [s.encode() for s in planted]
    scanned = 0
    for path in data_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            blob = path.read_bytes()
            scanned += len(blob)
            for needle in needles:
                assert needle not in blob, f"a planted secret is in {path}"
    assert scanned > 0


def test_another_tenant_lists_zero_rows(
    written: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Records of acme/alice are invisible to another tenant with the same principal id."""
    url, _ = written
    assert _list(capsys, url, "--tenant", "globex", "--principal", "alice")["count"] == 0
    assert _list(capsys, url, "--tenant", "acme", "--principal", "bob")["count"] == 0


def test_deleted_text_leaves_the_table_files_after_vacuum(url: str) -> None:
    """Deletion erases the text from row, tsvector and GIN at once; vacuum() drops dead copies."""
    marker = "zq" + _random(string.ascii_lowercase, 20)
    alice = Principal(tenant="acme", principal="alice")
    with open_store(url) as store:
        assert isinstance(store, PostgresStore)
        rec = store.add(alice, RecordDraft(text=f"the vault code word is {marker}"))
        store.delete(alice, rec.id)
        assert store.search(alice, marker) == []
        assert store.query(
            "SELECT count(*) AS n FROM records WHERE text_tsv @@ ?::tsquery", [marker]
        ) == [{"n": 0}]
        store.vacuum()
        files = postgres_table_files(store)
    assert files
    for name, paths in files.items():
        for path in paths:
            assert marker.encode() not in path.read_bytes(), f"erased text is in {name}: {path}"


@pytest.mark.anyio
async def test_concurrent_async_writers_on_one_store(url: str) -> None:
    """Twenty tasks writing through AsyncStore (pooled connections) lose no record."""
    alice = Principal(tenant="acme", principal="alice")
    store = open_store(url)
    try:
        facade = AsyncStore(store)
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(facade.add, alice, RecordDraft(text=f"parallel note {i}"))
        listed = await facade.list_records(alice)
        assert sorted(r.text for r in listed) == sorted(f"parallel note {i}" for i in range(20))
    finally:
        store.close()


def test_idempotency_key_holds_across_processes(url: str) -> None:
    """Two stores (two pools) writing one idempotency key store one record."""
    alice = Principal(tenant="acme", principal="alice")
    with open_store(url) as a, open_store(url) as b:
        one = a.add(alice, RecordDraft(text="first", idempotency_key="k1"))
        two = b.add(alice, RecordDraft(text="second", idempotency_key="k1"))
        assert one == two
        assert len(b.list_records(alice)) == 1


def test_bad_urls_and_schema_names_are_named_errors(tmp_path: Path) -> None:
    """An unknown scheme, a bad schema name and an unreachable server are clear errors."""
    with pytest.raises(InvalidInputError) as err:
        open_store("mysql://x/y")
    assert err.value.field == "db"
    with pytest.raises(InvalidInputError) as err:
        open_store("postgresql://127.0.0.1:1/x?retold_schema=Bad-Name")
    assert err.value.field == "schema"
    with pytest.raises(StoreError, match="cannot open PostgreSQL database"):
        open_store(
            "postgresql://nobody:hunter2@127.0.0.1:1/x", connect_timeout_s=2, pool_timeout_s=1
        )


def test_profile_review_and_decisions_commands_take_a_postgres_url(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`retold profile show`, `review list` and `decisions report` run on a postgresql:// --db."""
    assert main(["memory", "add", "--db", url, *SCOPE, "I like green tea"]) == 0
    assert main(["profile", "show", "--db", url, *SCOPE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["record_ids"] == []
    assert main(["review", "list", "--db", url, "--tenant", "acme", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 0
    assert main(["decisions", "report", "--db", url, "--tenant", "acme"]) == 0
    assert "policy failures" in capsys.readouterr().out


def test_fitness_results_record_on_postgres(url: str) -> None:
    """The serving gate's fitness table works on PostgreSQL: the newest verdict counts."""
    from retold._serving_gate import recorded_fitness, write_fitness_record

    with open_store(url) as store:
        common = {"bundle": "b", "bundle_sha256": "ab" * 32, "scenario_set_sha256": "cd" * 32}
        first = write_fitness_record(
            store,
            **common,
            verdict="pass",
            gates=(),
            result_json="{}",
            harness_version="1",
            category_counts={},
        )
        second = write_fitness_record(
            store,
            **common,
            verdict="fail",
            gates=(),
            result_json="{}",
            harness_version="1",
            category_counts={},
        )
        assert second.id > first.id
        newest = recorded_fitness(store, "ab" * 32)
        assert newest is not None and newest.id == second.id and not newest.passed
        assert recorded_fitness(store, "ef" * 32) is None
