"""``retold keys``: the keys file holds hashes only; add, list and revoke through the CLI."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retold._keys import KeyFile, hash_key
from retold.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_add_prints_the_key_once_and_stores_only_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """keys add --json prints {key, tenant, principal}; the file holds the sha256, not the key."""
    path = tmp_path / "keys.json"
    status, out, _ = _run(
        capsys,
        "keys",
        "add",
        "--keys",
        str(path),
        "--tenant",
        "acme",
        "--principal",
        "alice",
        "--json",
    )
    assert status == 0
    shown = json.loads(out)
    assert set(shown) == {"key", "tenant", "principal"}
    assert (shown["tenant"], shown["principal"]) == ("acme", "alice")
    raw = path.read_text(encoding="utf-8")
    assert shown["key"] not in raw
    assert hash_key(shown["key"]) in raw
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    entry = KeyFile(path).lookup(shown["key"])
    assert entry is not None and entry.scope.principal == "alice"


def test_list_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """list shows ids and scopes without hashes; a revoked key no longer looks up."""
    path = tmp_path / "keys.json"
    _run(
        capsys,
        "keys",
        "add",
        "--keys",
        str(path),
        "--tenant",
        "acme",
        "--principal",
        "alice",
        "--json",
    )
    _run(
        capsys,
        "keys",
        "add",
        "--keys",
        str(path),
        "--tenant",
        "acme",
        "--principal",
        "bob",
        "--json",
    )
    status, out, _ = _run(capsys, "keys", "list", "--keys", str(path), "--json")
    listed = json.loads(out)
    assert status == 0 and listed["count"] == 2
    assert all("sha256" not in k for k in listed["keys"])
    bob = next(k for k in listed["keys"] if k["principal"] == "bob")
    status, out, _ = _run(capsys, "keys", "revoke", "--keys", str(path), bob["id"], "--json")
    assert status == 0 and json.loads(out)["revoked_at"] is not None
    status, out, _ = _run(capsys, "keys", "list", "--keys", str(path))
    assert "revoked" in out and "active" in out


def test_revoke_unknown_id_and_bad_scope_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown id or an invalid principal exits 2 naming the field and writes nothing."""
    path = tmp_path / "keys.json"
    status, _, err = _run(capsys, "keys", "revoke", "--keys", str(path), "key_nope")
    assert status == 2 and "id" in err and not path.exists()
    status, _, err = _run(
        capsys, "keys", "add", "--keys", str(path), "--tenant", "acme", "--principal", "bad id!"
    )
    assert status == 2 and "principal" in err and not path.exists()


def test_a_corrupt_keys_file_is_refused_and_kept(tmp_path: Path) -> None:
    """A keys file that is not ours raises a usage error naming it and is left untouched."""
    path = tmp_path / "keys.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(Exception, match="keys"):
        KeyFile(path).add("acme", "alice")
    assert path.read_text(encoding="utf-8") == "{not json"


def test_lookup_follows_the_file_and_ignores_junk(tmp_path: Path) -> None:
    """A running lookup sees keys added and revoked by another KeyFile; junk keys miss."""
    path = tmp_path / "keys.json"
    clock = lambda: datetime(2026, 1, 1, tzinfo=UTC)  # noqa: E731
    reader = KeyFile(path, clock=clock)
    assert reader.lookup("rtd-anything") is None
    writer = KeyFile(path, clock=clock, token=lambda: "fixed-token")
    key, entry = writer.add("acme", "alice")
    assert key == "rtd-fixed-token"
    assert reader.lookup(key) == entry
    writer.revoke(entry.id)
    assert reader.lookup(key) is None
    assert reader.lookup("") is None and reader.lookup("x" * 10_000) is None


def test_writers_in_several_processes_keep_every_key(tmp_path: Path) -> None:
    """Key files changed at once by several processes (``retold keys add`` run in
    parallel) and several KeyFile objects in one process lose no key and no revocation."""
    path = tmp_path / "keys.json"
    script = (
        "import sys\n"
        "from retold._keys import KeyFile\n"
        "keys = KeyFile(sys.argv[1])\n"
        "for i in range(15):\n"
        "    print(keys.add('acme', f'{sys.argv[2]}-{i}')[0], flush=True)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(path), f"p{n}"], stdout=subprocess.PIPE, text=True
        )
        for n in range(4)
    ]
    printed: list[str] = []

    def add(n: int) -> None:
        mine = KeyFile(path)  # its own object: only the file lock orders the writers
        for i in range(15):
            key, entry = mine.add("acme", f"t{n}-{i}")
            printed.append(key)
            if i % 5 == 0:
                mine.revoke(entry.id)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        printed += out.split()

    entries = KeyFile(path).entries()
    assert len(printed) == len(entries) == 4 * 15 + 3 * 15
    assert {hash_key(k) for k in printed} == {e.sha256 for e in entries}
    assert sum(e.revoked_at is not None for e in entries) == 3 * 3
    assert stat.S_IMODE((tmp_path / ".keys.json.lock").stat().st_mode) == 0o600
