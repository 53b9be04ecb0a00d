"""``retold serve``: the OpenAI-compatible memory gateway (needs the ``gateway`` extra)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._errors import UsageError
from .._keys import KeyFile
from ._common import add_db, open_store


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the OpenAI-compatible memory gateway (POST /v1/chat/completions)",
        description=(
            "Serve POST /v1/chat/completions and GET /v1/models over an upstream model, with "
            "Retold's utility-aware memory around every turn. Shadow mode unless --live. The "
            "upstream API key is read from RETOLD_UPSTREAM_API_KEY."
        ),
    )
    add_db(p)
    p.add_argument("--keys", required=True, help="the client keys file (retold keys add)")
    p.add_argument(
        "--bundle", required=True, help="policy bundle (offline-reference, local, reference)"
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="inject memory (needs a passing fitness result recorded in --db); default shadow",
    )
    p.add_argument("--upstream-base-url", required=True, help="upstream endpoint root")
    p.add_argument("--upstream-model", required=True, help="upstream model name")
    p.add_argument(
        "--upstream-provider",
        choices=["openai", "anthropic"],
        default="openai",
        help="upstream wire protocol (default openai: any OpenAI-compatible server)",
    )
    p.add_argument(
        "--upstream-timeout-s",
        type=float,
        default=60.0,
        help="read timeout of one upstream call, seconds (raise it for slow local models)",
    )
    p.add_argument(
        "--policy-timeout-ms",
        type=int,
        help="gap and admission policy timeout, ms (default: the bundle's 2000; raise it for "
        "a slow local model serving the model-backed bundle)",
    )
    p.add_argument(
        "--latency-budget-ms",
        type=int,
        help="each turn's latency budget beyond the draft, ms, unless the request sends "
        "X-Retold-Latency-Budget-Ms (default: the bundle's; 0: no gap planning)",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks one)")
    p.add_argument(
        "--session-idle-s",
        type=float,
        default=1800.0,
        help="end a session after this many idle seconds (default 1800)",
    )
    p.add_argument(
        "--session-end-wait-s",
        type=float,
        default=5.0,
        help="longest a turn waits for its principal's pending session ends (default 5)",
    )
    p.add_argument("--max-body-bytes", type=int, default=1_048_576, help="request body cap")
    p.add_argument("--max-messages", type=int, default=256, help="messages per request cap")
    p.add_argument("--rate-limit-rps", type=float, default=5.0, help="per-key requests/second")
    p.add_argument("--rate-limit-burst", type=int, default=20, help="per-key burst")
    p.add_argument(
        "--turn-timeout-s",
        type=float,
        default=180.0,
        help="longest one turn may take end to end before a 504 (default 180)",
    )
    p.add_argument(
        "--shutdown-timeout-s",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, how long in-flight turns and session ends may finish",
    )
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..gateway import UPSTREAM_KEY_ENV, GatewayConfig, build_gateway
    except ImportError as exc:
        raise UsageError(
            f"retold serve needs the gateway extra: pip install 'retold[gateway]' ({exc.name})"
        ) from None
    from pydantic import ValidationError

    from .._errors import InvalidInputError

    if not 0 <= args.port <= 65535:
        raise InvalidInputError("port", f"must be 0-65535, got {args.port}")
    try:
        config = GatewayConfig(
            upstream_model=args.upstream_model,
            max_body_bytes=args.max_body_bytes,
            max_messages=args.max_messages,
            rate_limit_rps=args.rate_limit_rps,
            rate_limit_burst=args.rate_limit_burst,
            session_idle_s=args.session_idle_s,
            session_end_wait_s=args.session_end_wait_s,
            turn_timeout_s=args.turn_timeout_s,
            shutdown_timeout_s=args.shutdown_timeout_s,
        )
    except ValidationError as exc:
        raise InvalidInputError.from_validation_error(exc) from exc
    if args.upstream_timeout_s <= 0:
        raise InvalidInputError("upstream-timeout-s", "must be > 0")
    if args.policy_timeout_ms is not None and args.policy_timeout_ms <= 0:
        raise InvalidInputError("policy-timeout-ms", "must be > 0")
    if args.latency_budget_ms is not None and args.latency_budget_ms < 0:
        raise InvalidInputError("latency-budget-ms", "must be >= 0")
    keys = KeyFile(args.keys)
    keys.entries()  # a broken keys file is a start-up error, not a 500 per request
    api_key = os.environ.get(UPSTREAM_KEY_ENV) or None
    with open_store(args) as store:
        gateway = build_gateway(
            store=store,
            keys=keys,
            bundle=args.bundle,
            live=args.live,
            upstream_base_url=args.upstream_base_url,
            upstream_model=args.upstream_model,
            upstream_provider=args.upstream_provider,
            upstream_api_key=api_key,
            upstream_timeout_s=args.upstream_timeout_s,
            policy_timeout_ms=args.policy_timeout_ms,
            latency_budget_ms=args.latency_budget_ms,
            config=config,
        )
        mode = "live" if args.live else "shadow"
        print(
            f"retold serve: {mode} mode, bundle {args.bundle}, upstream {args.upstream_model} "
            f"at {args.upstream_base_url} ({args.upstream_provider})",
            file=sys.stderr,
            flush=True,
        )
        server = uvicorn.Server(
            uvicorn.Config(
                gateway.app,
                host=args.host,
                port=args.port,
                lifespan="on",
                access_log=False,
                log_level="info",
                timeout_graceful_shutdown=int(args.shutdown_timeout_s) or None,
            )
        )
        try:
            server.run()
        except KeyboardInterrupt:
            # uvicorn re-raises the SIGINT it captured once the graceful shutdown is done.
            pass
        print("retold serve: stopped", file=sys.stderr, flush=True)
    return 0
