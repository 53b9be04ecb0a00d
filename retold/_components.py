"""The components that keep tables of their own in a store, by name, with their migrations.

The store creates its own tables (records, transcript, events); each component ensures its
schema when it first runs on a store. An operation over a whole store (erasing a principal,
copying a store) ensures the components' schemas itself first, so it covers a store
whichever components have run on it. This module sits above those components and below
those operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ._activation_schema import _ACTIVATION_MIGRATIONS
from ._audit import _AUDIT_MIGRATIONS
from ._extraction import _MIGRATIONS as _EXTRACTION_MIGRATIONS
from ._profile import _PROFILE_MIGRATIONS
from ._serving_gate import _MIGRATIONS as _FITNESS_MIGRATIONS
from ._vectors import _VECTOR_MIGRATIONS

__all__ = ["COMPONENT_MIGRATIONS"]

#: Component name (as ``Store.ensure_schema`` records it) -> its migrations.
COMPONENT_MIGRATIONS: Mapping[str, Sequence[str]] = MappingProxyType(
    {
        "profile": _PROFILE_MIGRATIONS,
        "activation": _ACTIVATION_MIGRATIONS,
        "extraction": _EXTRACTION_MIGRATIONS,
        "audit": _AUDIT_MIGRATIONS,
        "fitness": _FITNESS_MIGRATIONS,
        "vectors": _VECTOR_MIGRATIONS,
    }
)
