"""Issue 14's bar, checked from outside the project: run by hand, prints one JSON object.

    .venv/bin/python tools/postgres_bar.py [--keep]

Like the outside check, it uses nothing of the test suite: it starts its own throwaway
cluster (``.ci/postgres start``: initdb + pg_ctl on 127.0.0.1, a free port), and drives only
the ``retold`` command:

* 4 writer processes at once, each 25 ``retold memory add --db postgresql://...`` calls
  (tenant acme, principal alice); each writer's first record carries one planted secret
  (an AWS key id, an OpenAI key, a GitHub token, a password);
* ``retold memory list`` for acme/alice must return all 100 records, each once;
* ``retold memory list`` as another tenant (globex/alice) and another principal (acme/bob)
  must return 0 rows;
* ``CHECKPOINT``, then every file under the cluster's data directory (tables, indexes,
  WAL, everything) is read and searched for each planted secret's bytes: none may appear.

Exit status 0 when every check holds; the cluster is stopped and removed unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RETOLD = [sys.executable, "-m", "retold"]

_WRITER = """
import subprocess, sys
url, writer, secret_text = sys.argv[1], sys.argv[2], sys.argv[3]
for i in range(25):
    text = secret_text if i == 0 else f"writer {writer} record {i}"
    cmd = [sys.executable, "-m", "retold", "memory", "add", "--db", url,
           "--tenant", "acme", "--principal", "alice", text]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(done.returncode)
"""


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _list(url: str, tenant: str, principal: str) -> dict[str, object]:
    out = subprocess.run(
        [
            *RETOLD,
            "memory",
            "list",
            "--db",
            url,
            "--json",
            "--tenant",
            tenant,
            "--principal",
            principal,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    listed: dict[str, object] = json.loads(out.stdout)
    return listed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    alnum = string.ascii_letters + string.digits
    planted = {
        "AKIA" + _random(string.ascii_uppercase + string.digits, 16): "my key id is {}",
        "sk-proj-" + _random(alnum, 28): "use {} for the API",
        "ghp_" + _random(alnum, 36): "github token {}",
        _random(alnum, 14): "my password is {}",
    }
    pgdir = Path(tempfile.mkdtemp(prefix="retold-bar-pg."))
    report: dict[str, object] = {}
    try:
        url = subprocess.run(
            [str(ROOT / ".ci" / "postgres"), "start", str(pgdir)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()
        report["cluster"] = url
        t0 = time.perf_counter()
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, url, str(w), template.format(secret)],
                stderr=subprocess.PIPE,
                text=True,
            )
            for w, (secret, template) in enumerate(planted.items())
        ]
        codes = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in writers]
        report["writers_s"] = round(time.perf_counter() - t0, 1)
        report["writer_exit_codes"] = [c for c, _ in codes]
        errors = [e for c, e in codes if c != 0]
        listed = _list(url, "acme", "alice")
        records = listed["records"]
        assert isinstance(records, list)
        ids = {r["id"] for r in records}
        texts = [r["text"] for r in records]
        expected = {f"writer {w} record {i}" for w in range(4) for i in range(1, 25)}
        report["records_listed"] = len(records)
        report["distinct_ids"] = len(ids)
        report["plain_records_all_present"] = expected <= set(texts)
        report["redacted_records"] = sum("[REDACTED:" in t for t in texts)
        report["other_tenant_rows"] = _list(url, "globex", "alice")["count"]
        report["other_principal_rows"] = _list(url, "acme", "bob")["count"]
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        data_dir = pgdir / "data"
        hits: list[str] = []
        scanned = files = 0
        needles = [s.encode() for s in planted]
        for path in sorted(data_dir.rglob("*")):
            if path.is_file() and not path.is_symlink():
                blob = path.read_bytes()
                scanned += len(blob)
                files += 1
                hits += [str(path) for n in needles if n in blob]
        report["data_dir_files_scanned"] = files
        report["data_dir_bytes_scanned"] = scanned
        report["secret_hits_in_data_dir"] = hits
        ok = (
            not errors
            and len(records) == 100 == len(ids)
            and report["plain_records_all_present"] is True
            and report["redacted_records"] == 4
            and report["other_tenant_rows"] == 0
            and report["other_principal_rows"] == 0
            and not hits
            and scanned > 0
        )
        report["errors"] = errors
        report["pass"] = ok
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0 if ok else 1
    finally:
        if not args.keep:
            subprocess.run(
                [str(ROOT / ".ci" / "postgres"), "stop", str(pgdir)], check=False, timeout=120
            )


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
