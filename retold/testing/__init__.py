"""Test doubles and fixtures that ship with Retold, for hosts' tests and our own.

Nothing here talks to a real vendor: scripted policies, a deterministic clock and a
loopback HTTP server that speaks the providers' wire protocols on 127.0.0.1.
"""

from __future__ import annotations

__all__: list[str] = []
