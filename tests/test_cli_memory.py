"""``retold memory`` add, list and delete, and the one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from retold.cli import main

SCOPE = ["--tenant", "acme", "--principal", "alice"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_list_delete_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record added with --json is listed, then deleted, with redacted text stored."""
    db = str(tmp_path / "m.db")
    secret = "sk-" + "live-Q2xVbN7mLp4RwZ8yHc9kT3st"
    code, out, _ = run(
        capsys,
        "memory",
        "add",
        "--db",
        db,
        *SCOPE,
        "--kind",
        "preference",
        "--speaker",
        "alice",
        "--event-time",
        "2026-03-01T09:30:00+01:00",
        "--json",
        f"My token is {secret}",
    )
    assert code == 0
    added = json.loads(out)
    assert secret not in added["text"] and "[REDACTED:" in added["text"]
    assert added["event_time"].startswith("2026-03-01T08:30:00")
    code, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE, "--json")
    assert [r["id"] for r in json.loads(out)["records"]] == [added["id"]]
    code, out, _ = run(capsys, "memory", "delete", "--db", db, *SCOPE, added["id"], "--json")
    assert code == 0 and json.loads(out)["lifecycle"] == "deleted"
    code, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE, "--json")
    assert json.loads(out)["count"] == 0


def test_vacuum_removes_deleted_text_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memory vacuum` leaves no copy of a deleted record's words in the database files."""
    db = tmp_path / "m.db"
    code, out, _ = run(
        capsys, "memory", "add", "--db", str(db), *SCOPE, "--json", "code word zqpelican"
    )
    rid = json.loads(out)["id"]
    run(capsys, "memory", "delete", "--db", str(db), *SCOPE, rid)
    code, out, err = run(capsys, "memory", "vacuum", "--db", str(db), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"dialect": "sqlite", "vacuumed": True}
    assert not [f for f in tmp_path.glob("m.db*") if b"zqpelican" in f.read_bytes()]
    code, out, _ = run(capsys, "memory", "vacuum", "--db", str(db))
    assert code == 0 and out.startswith("vacuumed: ")
    code, _, err = run(capsys, "memory", "vacuum", "--db", str(tmp_path / "none.db"))
    assert code == 2 and "db" in err


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--kind", "gossip", "x"], "kind"),
        (["--event-time", "yesterday-ish", "x"], "event_time"),
        (["   "], "text"),
    ],
    ids=["unknown-kind", "malformed-time", "empty-text"],
)
def test_bad_input_names_field_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str
) -> None:
    """Bad input exits 2 with one line naming the field, and creates no database."""
    db = tmp_path / "bad.db"
    code, out, err = run(capsys, "memory", "add", "--db", str(db), *SCOPE, *args)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and f"{field}:" in err
    assert not db.exists()


def test_bad_scope_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed tenant id is refused with the field named."""
    code, _, err = run(
        capsys,
        "memory",
        "add",
        "--db",
        str(tmp_path / "x.db"),
        "--tenant",
        "bad tenant!",
        "--principal",
        "p",
        "x",
    )
    assert code == 2 and "tenant:" in err


def test_missing_scope_exits_nonzero(tmp_path: Path) -> None:
    """Leaving out the principal is a usage error from the installed command."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "retold",
            "memory",
            "add",
            "--db",
            str(tmp_path / "x.db"),
            "--tenant",
            "acme",
            "text",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "--principal" in proc.stderr
    assert not (tmp_path / "x.db").exists()


def test_delete_unknown_id_in_scope(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Deleting an id from another principal's scope fails and leaves it alone."""
    db = str(tmp_path / "m.db")
    _, out, _ = run(capsys, "memory", "add", "--db", db, *SCOPE, "--json", "mine")
    rid = json.loads(out)["id"]
    code, _, err = run(
        capsys, "memory", "delete", "--db", db, "--tenant", "acme", "--principal", "mallory", rid
    )
    assert code == 2 and "id:" in err
    _, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE, "--json")
    assert json.loads(out)["count"] == 1


def _retold(*argv: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """The installed command in a real process (argv may carry raw bytes)."""
    return subprocess.run(
        [sys.executable, "-m", "retold", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_add_dash_reads_stdin(tmp_path: Path) -> None:
    """`printf 'hello' | retold memory add ... -` stores "hello"; a trailing newline is dropped."""
    db = str(tmp_path / "m.db")
    proc = _retold("memory", "add", "--db", db, *SCOPE, "--json", "-", stdin=b"hello")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["text"] == "hello"
    proc = _retold("memory", "add", "--db", db, *SCOPE, "--json", "-", stdin="olá\n".encode())
    assert json.loads(proc.stdout)["text"] == "olá"


def test_add_dash_refuses_non_utf8_stdin(tmp_path: Path) -> None:
    """Undecodable stdin exits 2 naming `text`, and creates no database."""
    db = tmp_path / "m.db"
    proc = _retold("memory", "add", "--db", str(db), *SCOPE, "-", stdin=b"caf\xe9")
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"text: standard input is not valid UTF-8" in proc.stderr
    assert not db.exists()


def test_idempotency_key_makes_a_retry_store_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same --idempotency-key returns the first record with created=false; one record stored."""
    db = str(tmp_path / "m.db")
    argv = ["memory", "add", "--db", db, *SCOPE, "--idempotency-key", "msg-17", "--json"]
    code, out, _ = run(capsys, *argv, "Ines lives in Porto.")
    first = json.loads(out)
    assert code == 0 and first["created"] is True
    code, out, err = run(capsys, *argv, "Ines lives in Porto.")
    again = json.loads(out)
    assert code == 0 and again["created"] is False and again["id"] == first["id"]
    assert "nothing written" in err
    _, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE, "--json")
    assert json.loads(out)["count"] == 1


def test_same_text_twice_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Adding the same text again without a key stores a second record and says which one it repeats."""
    db = str(tmp_path / "m.db")
    _, out, err = run(capsys, "memory", "add", "--db", db, *SCOPE, "--json", "Ines lives in Porto.")
    first = json.loads(out)
    assert first["same_text_as"] == [] and err == ""
    _, out, err = run(capsys, "memory", "add", "--db", db, *SCOPE, "--json", "Ines lives in Porto.")
    second = json.loads(out)
    assert second["created"] is True and second["same_text_as"] == [first["id"]]
    assert f"already stored as {first['id']}" in err and "--idempotency-key" in err


def test_list_shows_activation_and_preference_add_says_conditional(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memory list` prints [kind, activation]; adding a preference says it stays conditional."""
    db = str(tmp_path / "m.db")
    code, out, err = run(
        capsys, "memory", "add", "--db", db, *SCOPE, "--kind", "preference", "Be concise."
    )
    assert code == 0 and "[preference, conditional] Be concise." in out
    assert "stored as conditional memory" in err and "ambient" in err
    _, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE)
    assert "[preference, conditional]" in out and "/active" not in out
    rid = out.split()[0]
    run(capsys, "memory", "delete", "--db", db, *SCOPE, rid)
    _, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE, "--all")
    assert "[preference, conditional, deleted]" in out


def test_list_all_names_what_superseded_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memory list --all` says which record replaced a superseded one."""
    from retold import Principal, RecordDraft, SQLiteStore

    db = str(tmp_path / "m.db")
    store = SQLiteStore(db)
    scope = Principal(tenant="acme", principal="alice")
    old = store.add(scope, RecordDraft(text="Always reply in Spanish.", kind="preference"))
    new = store.add(
        scope,
        RecordDraft(text="Antwoord voortaan in het Engels.", kind="preference", supersedes=old.id),
    )
    store.close()
    _, out, _ = run(capsys, "memory", "list", "--db", db, *SCOPE, "--all")
    assert f"[preference, conditional, superseded by {new.id}] Always reply in Spanish." in out
    assert f"{new.id}  " in out and "[preference, conditional] Antwoord" in out


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--query", "sister", "--budget", "0"], "budget"),
        (["--query", "sister", "--budget", "-5"], "budget"),
        (["--query", "", "--budget", "512"], "query"),
        (["--query", "  ", "--budget", "512"], "query"),
    ],
    ids=["budget-zero", "budget-negative", "query-empty", "query-blank"],
)
def test_search_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str
) -> None:
    """A non-positive budget or an empty query exits 2 naming the field, and leaves the file as it was."""
    db = tmp_path / "m.db"
    run(capsys, "memory", "add", "--db", str(db), *SCOPE, "My sister lives in Porto.")
    before = db.read_bytes()
    code, out, err = run(capsys, "memory", "search", "--db", str(db), *SCOPE, *args)
    assert code == 2 and out == ""
    assert err.startswith(f"retold: error: {field}:") and len(err.splitlines()) == 1
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (
            ["memory", "add", "--db", "{db}", *SCOPE, "--idempotency-key", " ", "x"],
            "idempotency_key",
        ),
        (["profile", "show", "--db", "{db}", *SCOPE, "--session", ""], "session"),
        (["profile", "show", "--db", "{db}", *SCOPE, "--max-records", "-1"], "max_records"),
        (["profile", "show", "--db", "{db}", *SCOPE, "--token-budget", "-1"], "token_budget"),
    ],
    ids=["blank-idempotency-key", "empty-session", "negative-max-records", "negative-token-budget"],
)
def test_more_bad_input_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    """Blank keys and sessions and negative profile bounds exit 2 naming the field; the file is unchanged."""
    db = tmp_path / "m.db"
    run(capsys, "memory", "add", "--db", str(db), *SCOPE, "x")
    before = db.read_bytes()
    code, out, err = run(capsys, *[a.replace("{db}", str(db)) for a in argv])
    assert code == 2 and out == ""
    assert err.startswith(f"retold: error: {field}: ")
    assert db.read_bytes() == before
