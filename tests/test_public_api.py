"""The public surface: ``retold.__all__`` is sorted and complete, and no generic top-level names ship."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import retold


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then everything else.
    group = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def test_all_is_sorted_and_resolves() -> None:
    """Every name in __all__ exists and the list is sorted (constants, classes, functions)."""
    assert list(retold.__all__) == sorted(retold.__all__, key=_isort_key)
    for name in retold.__all__:
        assert hasattr(retold, name), name


def test_all_lists_every_public_name() -> None:
    """Every public attribute of retold (other than submodules) is in __all__."""
    import types

    public = {
        n
        for n, v in vars(retold).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }
    assert public <= set(retold.__all__)


def test_distribution_has_no_generic_top_level_modules() -> None:
    """The installed distribution exposes only retold* top-level packages."""
    adapters = importlib.import_module("retold.adapters")
    policy = importlib.import_module("retold.policy")
    assert adapters.__name__ == "retold.adapters" and policy.__name__ == "retold.policy"
    dist = importlib.metadata.distribution("retold")
    top = (dist.read_text("top_level.txt") or "").split()
    assert all(name.startswith("retold") for name in top), top


def test_wheel_maps_adapters_and_policies_under_retold(tmp_path: Path) -> None:
    """The built wheel holds only retold/ (adapters and policies mapped in, data files included)."""
    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(tmp_path), str(root)),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("retold-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"retold"}
    for expected in (
        "retold/adapters/openai.py",
        "retold/policy/reference.py",
        "retold/policy/manifests/",
        "retold/policy/prompts/",
        "retold/policy/scenarios/test/personas/",  # `retold fitness` gates on it by default
        "retold/policy/scenarios/test/amara.jsonl",
        "retold/policy/scenarios/dev/personas/",
        "retold/py.typed",
    ):
        assert any(name.startswith(expected) for name in names), expected


def test_no_symbolic_links_in_the_package_tree() -> None:
    """retold/ holds no symbolic links (they break on Windows checkouts and in archive tools)."""
    root = Path(__file__).resolve().parent.parent / "retold"
    assert [p for p in root.rglob("*") if p.is_symlink()] == []
