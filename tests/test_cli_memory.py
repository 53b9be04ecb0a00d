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
