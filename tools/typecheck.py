"""Run mypy strict over the installed layout of the ``retold`` distribution.

``adapters/`` and ``policies/`` install as ``retold.adapters`` and ``retold.policy`` through
setuptools' ``package-dir``. mypy cannot follow that mapping, so this script lays the packages
out as they install (a tree of file links under ``build/typecheck``, outside ``retold/``),
runs mypy there with the project's configuration, and reports paths in the source tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def _source_dir(package: str, mapping: dict[str, str]) -> Path:
    if package in mapping:
        return ROOT / mapping[package]
    parent, _, leaf = package.rpartition(".")
    return _source_dir(parent, mapping) / leaf if parent else ROOT / leaf


def _lay_out() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config.get("package-dir", {})
    shutil.rmtree(TREE, ignore_errors=True)
    for package in config["packages"]:
        source = _source_dir(package, mapping)
        target = TREE.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(source.iterdir()):
            if path.suffix in {".py", ".pyi"} or path.name == "py.typed":
                (target / path.name).symlink_to(path)


def main() -> int:
    _lay_out()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "-p",
            "retold",
        ],
        cwd=TREE,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        head, sep, rest = line.partition(":")
        linked = TREE / head
        if sep and head.endswith(".py") and linked.is_symlink():
            line = f"{os.path.relpath(linked.resolve(), ROOT)}:{rest}"
        print(line)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
