"""The ``retold`` command.

Each command group lives in its own module and registers itself through ``register``.
``main`` is the one boundary every command passes through: it checks argv (every text
argument must be valid UTF-8), configures warnings-only logging on stderr (and no progress
bars) for the duration of the command, turns Retold's caller errors into a one-line message
and exit status 2, and ends quietly when the reader of stdout goes away (``retold decisions
report | head -1``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .._errors import InvalidInputError, RetoldError, UsageError
from . import _bench, _decisions, _fitness, _keys, _mcp, _memory, _profile, _review, _serve

__all__ = ["main"]

# Command groups, in the order ``retold --help`` lists them.
_GROUPS = [_memory, _profile, _review, _decisions, _bench, _fitness, _serve, _keys, _mcp]

# Options that name files: a file name is whatever bytes the OS allows, so these are the
# only arguments not required to be valid UTF-8.
_PATH_OPTIONS = frozenset({"db", "report", "data", "scenarios"})

# Exit status of a command whose reader closed stdout early: what a shell reports for a
# process ended by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141

# Read by huggingface_hub (and through it transformers) at import: progress bars off.
_PROGRESS_BARS = "HF_HUB_DISABLE_PROGRESS_BARS"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retold",
        description="Retold: utility-aware memory for LLM assistants.",
    )
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub)
    return parser


class _Stderr:
    """A file that is whatever ``sys.stderr`` is at the time of each write.

    Log lines follow a redirected or replaced stderr instead of a stream captured once.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@contextmanager
def cli_logging() -> Iterator[None]:
    """Warnings and errors only, human-readable, on stderr, while a command runs.

    The command line is an application, so it may configure logging; the library never
    does. stdout carries only the command's output (one JSON document under ``--json``).
    A caller that configured structlog already keeps its setup, and an in-process caller
    gets structlog's defaults back when the command returns.
    """
    import logging

    import structlog

    if structlog.is_configured():
        yield
        return
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.reset_defaults()


@contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """No download or weight-loading progress bars on stderr while a command runs.

    The ``local`` bundle's sentence model is loaded through transformers, which draws a
    "Loading weights" bar on stderr by default; a command writes only warnings and errors
    there. huggingface_hub reads ``HF_HUB_DISABLE_PROGRESS_BARS`` when it is first imported,
    so this sets it for the command unless the caller set it already (``0`` keeps the bars),
    and has no effect on libraries a caller in the same process imported before.
    """
    if _PROGRESS_BARS in os.environ:
        yield
        return
    os.environ[_PROGRESS_BARS] = "1"
    try:
        yield
    finally:
        os.environ.pop(_PROGRESS_BARS, None)


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Every text argument must be valid UTF-8; the first that is not is named.

    Undecodable bytes in argv reach Python as lone surrogates (PEP 383); stored, they make
    records that cannot be printed or exported as UTF-8, so they are refused before any
    command runs and before anything is opened or written.
    """
    for name, value in vars(args).items():
        if name in _PATH_OPTIONS or name == "handler":
            continue
        values: Sequence[Any] = value if isinstance(value, list) else [value]
        for item in values:
            if not isinstance(item, str):
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(
                    name, f"is not valid UTF-8 (undecodable byte at position {exc.start})"
                ) from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (in-process)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status.

    0 success, 1 a runtime failure (or a command's own "no" such as a failed gate),
    2 bad input, 141 stdout closed by its reader.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with cli_logging(), quiet_progress_bars():
            _check_text_arguments(args)
            status: int = args.handler(args)
            # Flush here, not at interpreter exit, so a closed pipe is caught below.
            sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except UsageError as exc:
        print(f"retold: error: {exc}", file=sys.stderr)
        return 2
    except RetoldError as exc:
        print(f"retold: failed: {exc}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:
        print(f"retold: failed: database error: {exc}", file=sys.stderr)
        return 1
    return status
