"""``retold bench redaction``: how redaction time grows with text length, adversarial inputs.

Start point: a string in memory. End points: (1) ``Redactor.redact`` returning, and (2)
``SQLiteStore.add`` of a record with that text returning (a real SQLite file in a temporary
directory: validation, redaction, the row, its FTS5 entry and its event, committed). Nothing
is simulated. Inputs are the shapes that make backtracking detectors quadratic (long letter
runs, ``eyJ-`` chains, ``a:`` and ``x://`` chains, repeated assignment names and stated
openers, with and without a copula, ``Bearer`` chains, card words before digit groups, PIN,
seed-phrase and one-time-code openers, zero-width characters, a planted secret every 1,000
characters), each at several lengths; the report gives the time per length and the growth
exponent between the two largest lengths (1.0 is linear, 2.0 quadratic). Timings depend on
the machine; the exponent and the 100k-character add (the bar is < 2 s) are what to
compare.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ._records import Principal, RecordDraft
from ._redaction import Redactor
from ._store import SQLiteStore

__all__ = ["ADVERSARIAL", "register", "run_redaction_bench"]

_SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


def _planted(n: int) -> str:
    block = ("lorem ipsum dolor sit amet " * 40)[: 1000 - len(_SECRET) - 2]
    return ((block + " " + _SECRET + " ") * (n // 1000 + 1))[:n]


#: name -> builder of a string of the given length
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "letters": _repeat("a"),
    "jwt_chain": _repeat("eyJ-"),
    "colon_chain": _repeat("a:"),
    "scheme_chain": _repeat("x://"),
    "assignment_names": _repeat('token="'),
    "aws_context": _repeat("aws key "),
    "stated_openers": _repeat("password for a b c is now "),
    "bare_openers": _repeat("the a b password 1a1a1a1a1a"),
    "bearer_chain": _repeat("Bearer "),
    "card_digits": _repeat("card 4111 1111 "),
    "pin_openers": _repeat("pin for a b c is 12 "),
    "seed_words": _repeat("seed phrase is word word word "),
    "code_lists": _repeat("backup codes for a b are 1ab 2cd and "),
    "pem_headers": _repeat("-----BEGIN "),
    "zero_width": _repeat("a\u200b"),
    "planted_secrets": _planted,
}


def _best_of(fn: Callable[[], Any], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run_redaction_bench(
    lengths: tuple[int, ...] = (25_000, 50_000, 100_000), *, repeat: int = 3
) -> dict[str, Any]:
    """Time redaction per input shape and length, and one 100k-character record add."""
    redactor = Redactor(b"bench-redaction-key-0123456789")
    shapes: dict[str, Any] = {}
    for name, build in ADVERSARIAL.items():
        seconds = {n: _best_of(partial(redactor.redact, build(n)), repeat) for n in lengths}
        a, b = lengths[-2], lengths[-1]
        growth = (
            math.log(seconds[b] / seconds[a]) / math.log(b / a)
            if seconds[a] > 0 and seconds[b] > 0
            else None
        )
        shapes[name] = {
            "seconds": {str(n): round(s, 5) for n, s in seconds.items()},
            "growth_exponent": None if growth is None else round(growth, 2),
        }
    add_seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with SQLiteStore(Path(tmp) / "redaction.db") as store:
            scope = Principal(tenant="bench", principal="p")
            for name in ("letters", "planted_secrets", "jwt_chain"):
                text = ADVERSARIAL[name](100_000)
                start = time.perf_counter()
                store.add(scope, RecordDraft(text=text))
                add_seconds[name] = round(time.perf_counter() - start, 4)
    worst = max(
        (s["growth_exponent"] for s in shapes.values() if s["growth_exponent"] is not None),
        default=None,
    )
    return {
        "lengths": list(lengths),
        "shapes": shapes,
        "worst_growth_exponent": worst,
        "add_100k_record_seconds": add_seconds,
        "add_100k_record_max_seconds": max(add_seconds.values()),
    }


def register(sub: Any) -> None:
    p = sub.add_parser("redaction", help="redaction time against text length on adversarial inputs")
    p.add_argument(
        "--lengths",
        default="25000,50000,100000",
        help="comma-separated text lengths (default 25000,50000,100000)",
    )
    p.add_argument("--repeat", type=int, default=3, help="best of N runs per point")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    from ._errors import InvalidInputError

    try:
        lengths = tuple(sorted({int(x) for x in args.lengths.split(",") if x.strip()}))
    except ValueError:
        raise InvalidInputError("lengths", "must be comma-separated integers") from None
    if len(lengths) < 2 or lengths[0] <= 0 or lengths[-1] > 1_000_000 or args.repeat <= 0:
        raise InvalidInputError(
            "lengths", "give at least two lengths in 1..1,000,000 and --repeat > 0"
        )
    report = run_redaction_bench(lengths, repeat=args.repeat)
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        for name, shape in report["shapes"].items():
            times = ", ".join(f"{n}: {s * 1000:.1f} ms" for n, s in shape["seconds"].items())
            print(f"{name}: {times} (growth x^{shape['growth_exponent']})")
        print(f"add 100k-char record: max {report['add_100k_record_max_seconds']:.2f} s")
    return 0
