"""The command-line boundary shared by every command: argv must be UTF-8, ``--db`` must be a
database, stdout carries only output (no log lines), and a closed stdout ends quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from retold import Principal, SQLiteStore
from retold._store import draft_from
from retold.cli import EXIT_BROKEN_PIPE, main
from retold.testing import LoopbackServer, loopback_fixture, openai_chat

from .test_fitness import _small_set

SCOPE = ["--tenant", "acme", "--principal", "alice"]
BAD = "\udcff"  # what Python makes of the byte 0xff in argv (PEP 383)
loopback = loopback_fixture()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _retold(
    *argv: str | bytes, stdout: int = subprocess.PIPE, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The installed command in a real process (argv may carry raw bytes)."""
    return subprocess.run(
        [sys.executable, "-m", "retold", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store holding one record for acme/alice."""
    path = tmp_path / "m.db"
    with SQLiteStore(path) as store:
        store.add(Principal(tenant="acme", principal="alice"), draft_from({"text": "hello"}))
    return path


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["memory", "delete", "--db", "{db}", *SCOPE, BAD], "id"),
        (["profile", "show", "--db", "{db}", *SCOPE, "--session", BAD], "session"),
        (["memory", "add", "--db", "{db}", *SCOPE, "--tag", "ok", "--tag", BAD, "x"], "tag"),
        (["memory", "add", "--db", "{db}", *SCOPE, f"caf{BAD}"], "text"),
        (["memory", "search", "--db", "{db}", *SCOPE, "--query", BAD, "--budget", "9"], "query"),
        (
            [
                "review",
                "resolve",
                "--db",
                "{db}",
                "--tenant",
                "t",
                BAD,
                "--decision",
                "reject",
                "--reviewer",
                "k",
            ],
            "id",
        ),
    ],
    ids=["delete-id", "profile-session", "add-tag", "add-text", "search-query", "review-id"],
)
def test_non_utf8_argument_is_named_and_writes_nothing(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    """An argument that is not valid UTF-8 exits 2 naming its field; the database is untouched."""
    before = db.read_bytes()
    code, out, err = run(capsys, *[a.replace("{db}", str(db)) for a in argv])
    assert code == 2 and out == ""
    assert err == f"retold: error: {field}: is not valid UTF-8 (undecodable byte at position " + (
        f"{argv[-1].index(BAD) if field == 'text' else 0})\n"
    )
    assert db.read_bytes() == before


def test_non_utf8_bytes_from_the_shell(tmp_path: Path) -> None:
    """The real bytes `$'\\xff'` as a tag: exit 2 naming `tag`, no database created."""
    target = tmp_path / "m.db"
    proc = _retold("memory", "add", "--db", str(target), *SCOPE, "--tag", b"\xff", "x")
    assert proc.returncode == 2
    assert proc.stderr.startswith(b"retold: error: tag: is not valid UTF-8")
    assert not target.exists()


def test_list_json_is_valid_utf8_even_for_old_bad_tags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone surrogate stored before argv was checked comes out as a JSON escape, not broken UTF-8."""
    path = tmp_path / "m.db"
    with SQLiteStore(path) as store:
        store.add(
            Principal(tenant="acme", principal="alice"),
            draft_from({"text": "x", "tags": [BAD]}),
        )
    code, out, _ = run(capsys, "memory", "list", "--db", str(path), *SCOPE, "--json")
    assert code == 0
    out.encode("utf-8")  # valid UTF-8
    assert json.loads(out)["records"][0]["tags"] == [BAD]


def test_db_that_is_a_device_is_refused_before_sqlite(capsys: pytest.CaptureFixture[str]) -> None:
    """`--db /dev/null` exits 2 naming `db`, and SQLite never writes a journal beside it."""
    journal = Path("/dev/null-journal")
    existed = journal.exists()
    code, out, err = run(capsys, "memory", "list", "--db", "/dev/null", *SCOPE)
    assert code == 2 and out == ""
    assert err == "retold: error: db: '/dev/null' is not a regular file\n"
    assert journal.exists() == existed


@pytest.mark.parametrize("kind", ["text-file", "directory"])
def test_db_that_is_not_a_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A text file or a directory as --db exits 2 naming `db`, and nothing is written beside it."""
    target = tmp_path / "notes"
    if kind == "text-file":
        target.write_text("shopping list\n", encoding="utf-8")
    else:
        target.mkdir()
    code, _, err = run(capsys, "memory", "add", "--db", str(target), *SCOPE, "x")
    assert code == 2 and err.startswith("retold: error: db: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]
    if kind == "text-file":
        assert target.read_text(encoding="utf-8") == "shopping list\n"


def test_closed_stdout_ends_quietly(db: Path) -> None:
    """A reader that closed the pipe (`| head -1`) gets no traceback: exit 141, stderr empty."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _retold("decisions", "report", "--db", str(db), "--tenant", "acme", stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_BROKEN_PIPE
    assert proc.stderr == b""


def test_json_stdout_carries_no_log_lines(tmp_path: Path) -> None:
    """`memory add --json` in a real process prints exactly one JSON document on stdout."""
    proc = _retold("memory", "add", "--db", str(tmp_path / "m.db"), *SCOPE, "--json", "hello")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.decode().splitlines()
    assert json.loads(line)["text"] == "hello"
    assert proc.stderr == b""  # debug and info lines are not shown at all
    # Commands that log at info level while they work (a copy, the indexing after it).
    to = str(tmp_path / "copy.db")
    for args, key in [
        (("memory", "copy", "--db", str(tmp_path / "m.db"), "--to", to, "--all-tenants"), "counts"),
        (("memory", "index", "--db", to, "--all-tenants"), "names_read"),
    ]:
        proc = _retold(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        (line,) = proc.stdout.decode().splitlines()
        assert key in json.loads(line) and proc.stderr == b""


def test_warnings_go_to_stderr_human_readable(tmp_path: Path, loopback: LoopbackServer) -> None:
    """A command that logs warnings (a model answering garbage) keeps stdout to its one JSON
    document and shows the warnings as plain lines on stderr."""
    loopback.chat_completions.respond_with(openai_chat("not json"))
    env = {**os.environ, "RETOLD_BASE_URL": loopback.openai_base_url, "RETOLD_MODEL": "m"}
    scenarios = _small_set(tmp_path, per_file=1)
    proc = _retold(
        "fitness", "--bundle", "reference", "--scenarios", str(scenarios), "--json", env=env
    )
    assert proc.returncode in (0, 1), proc.stderr
    (line,) = proc.stdout.decode().splitlines()
    assert json.loads(line)["bundle"] == "reference"
    warnings = proc.stderr.decode().splitlines()
    assert warnings and all(w.startswith("[warning") for w in warnings)
    assert "\x1b[" not in proc.stderr.decode()  # no colour codes in a log file


def test_loading_the_local_model_draws_no_progress_bar(tmp_path: Path) -> None:
    """The `local` bundle loads its sentence model through transformers, which draws a
    "Loading weights" bar on stderr unless told not to; a command shows only warnings."""
    pytest.importorskip("sentence_transformers")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    scenarios = _small_set(tmp_path, per_file=1)
    proc = _retold("fitness", "--bundle", "local", "--scenarios", str(scenarios), "--json", env=env)
    assert proc.returncode in (0, 1), proc.stderr
    (line,) = proc.stdout.decode().splitlines()
    assert json.loads(line)["bundle"] == "local"
    assert proc.stderr == b""


def test_in_process_main_keeps_the_hosts_logging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Calling main in a process that configured structlog leaves that configuration alone."""
    before = structlog.get_config()
    code, _, _ = run(capsys, "memory", "add", "--db", str(tmp_path / "m.db"), *SCOPE, "x")
    assert code == 0
    assert structlog.get_config() == before
