"""The ``retold`` command.

Each command group lives in its own module and registers itself through ``register``;
``main`` turns Retold's caller errors into a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._errors import RetoldError, UsageError
from . import _bench, _decisions, _fitness, _memory, _profile, _review

__all__ = ["main"]

# Command groups, in the order ``retold --help`` lists them.
_GROUPS = [_memory, _profile, _review, _decisions, _bench, _fitness]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retold",
        description="Retold: utility-aware memory for LLM assistants.",
    )
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub)
    return parser


def _configure_logging() -> None:
    """The CLI is an application, so it may configure logging: warnings only, to stderr.

    A host that configured structlog already (or calls ``main`` in-process) keeps its setup.
    """
    import logging

    import structlog

    if structlog.is_configured():
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    _configure_logging()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.handler(args)
    except UsageError as exc:
        print(f"retold: error: {exc}", file=sys.stderr)
        return 2
    except RetoldError as exc:
        print(f"retold: failed: {exc}", file=sys.stderr)
        return 1
    return status
