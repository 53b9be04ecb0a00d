"""``retold serve`` refuses bad start-up input with a clear error before binding anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold.cli import main


def _serve(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "serve",
        "--db",
        str(tmp_path / "g.db"),
        "--keys",
        str(tmp_path / "keys.json"),
        "--bundle",
        "offline-reference",
        "--upstream-base-url",
        "http://127.0.0.1:9/v1",
        "--upstream-model",
        "m",
        *extra,
    ]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--live",), "fitness"),
        (("--port", "70000"), "port"),
        (("--rate-limit-rps", "0"), "rate_limit_rps"),
        (("--upstream-timeout-s", "0"), "upstream-timeout-s"),
        (("--policy-timeout-ms", "-1"), "policy-timeout-ms"),
        (("--latency-budget-ms", "-5"), "latency-budget-ms"),
    ],
    ids=["live-unfitted", "port", "rate", "upstream-timeout", "policy-timeout", "budget"],
)
def test_bad_start_up_input_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], needle: str
) -> None:
    """--live without a recorded passing fitness result, or a bad limit, exits 2 with the reason."""
    assert main(_serve(tmp_path, *extra)) == 2
    assert needle in capsys.readouterr().err


def test_unknown_bundle_and_broken_keys_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown bundle or an unreadable keys file stops start-up with exit 2."""
    argv = _serve(tmp_path)
    argv[argv.index("offline-reference")] = "no-such-bundle"
    assert main(argv) == 2
    assert "no-such-bundle" in capsys.readouterr().err
    (tmp_path / "keys.json").write_text("[]", encoding="utf-8")
    assert main(_serve(tmp_path)) == 2
    assert "keys" in capsys.readouterr().err
