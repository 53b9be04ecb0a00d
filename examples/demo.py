"""The demo: store a few memories (one with a secret in it) and read them back.

Run with ``make demo``. It leaves its database at the path it prints.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from retold.cli import main


def run(*argv: str) -> None:
    print(f"$ retold {' '.join(argv)}")
    code = main(list(argv))
    if code != 0:
        sys.exit(code)


def demo(db: Path) -> None:
    scope = ["--db", str(db), "--tenant", "acme", "--principal", "alice"]
    run("memory", "add", *scope, "--kind", "preference", "Always answer me concisely.")
    run(
        "memory",
        "add",
        *scope,
        "--kind",
        "event",
        "--event-time",
        "2026-03-01",
        "I moved to Lisbon in March.",
    )
    run("memory", "add", *scope, "My staging api_key=" + "Zx9Qw8Er7Ty6Ui5O is for the CI box.")
    run("memory", "list", *scope)
    print(f"\nThe database is at {db} (the api_key above was redacted before it was written).")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()) / "demo.db"
    demo(target)
