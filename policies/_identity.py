"""How a bundle component names itself: an identity dict and the SHA-256 of its canonical JSON.

Every component of a manifest is ``{"id", "version", "sha256"}`` where ``sha256`` is the
hash of the canonical JSON (sorted keys, ``(",", ":")`` separators, ``ensure_ascii=False``)
of its *identity*: ``{"id", "version", ...}`` plus the hashes of what decides its
behaviour: the prompt, the response schema and the implementing module's source for a
model-backed policy; the implementing module's source (its rules) for a deterministic one;
the data for the taxonomy. Source text is hashed with its line endings normalised to ``\\n``,
so a checkout's newline convention does not change a bundle.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from importlib.resources import files
from typing import Any

from retold._config import canonical_json

__all__ = ["component_entry", "resource_sha256", "resource_text", "sha256_json", "sha256_text"]


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_json(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_text(canonical_json(value))


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def resource_text(package: str, name: str) -> str:
    """A text file shipped inside ``package`` (line endings normalised)."""
    return _normalise(files(package).joinpath(name).read_text(encoding="utf-8"))


def resource_sha256(package: str, name: str) -> str:
    """Hex SHA-256 of a text file shipped inside ``package`` (line endings normalised)."""
    return sha256_text(resource_text(package, name))


def component_entry(identity: Mapping[str, Any]) -> dict[str, str]:
    """The manifest entry ``{"id", "version", "sha256"}`` for a component's identity."""
    return {
        "id": str(identity["id"]),
        "version": str(identity["version"]),
        "sha256": sha256_json(dict(identity)),
    }
