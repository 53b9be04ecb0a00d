"""The Retold gateway: ``retold serve`` (OpenAI-compatible) and ``retold mcp`` (stdio).

Needs the ``gateway`` extra (Starlette, uvicorn, prometheus-client); the MCP server needs
the ``mcp`` extra.
"""

from __future__ import annotations

from retold._keys import KEY_PREFIX, ApiKeyEntry, KeyFile, hash_key

from ._app import BUDGET_HEADER, DECISION_HEADER, SESSION_HEADER, Gateway, GatewayConfig
from ._build import UPSTREAM_KEY_ENV, build_gateway
from ._sessions import default_session_id

__all__ = [
    "BUDGET_HEADER",
    "DECISION_HEADER",
    "KEY_PREFIX",
    "SESSION_HEADER",
    "UPSTREAM_KEY_ENV",
    "ApiKeyEntry",
    "Gateway",
    "GatewayConfig",
    "KeyFile",
    "build_gateway",
    "default_session_id",
    "hash_key",
]
