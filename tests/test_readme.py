"""The README's Python stays true: it compiles and every name it imports exists."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_import_real_names() -> None:
    """Each ```python block parses and its `from X import Y` names resolve."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_readme_cli_commands_exist() -> None:
    """Every `retold <group> <command>` line in the README is a real command."""
    from retold.cli import build_parser

    parser = build_parser()
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("retold "):
            words = line.split()
            args = [w for w in words[1:3] if not w.startswith("-")]
            try:
                parser.parse_args([*args, "--help"])
            except SystemExit as exc:
                assert exc.code == 0, line
