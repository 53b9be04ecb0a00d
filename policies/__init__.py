"""The reference policy bundle (installed as ``retold.policy``).

``retold.policy.reference`` holds the registry: :func:`get_bundle`, :func:`bundle_names`,
:func:`supported_bundle` and :class:`PolicyBundle`, re-exported here. The submodules are
``llm`` (model-backed policies), ``lexical`` (deterministic offline policies) and
``taxonomy``. The re-exports load on first use, so that ``import retold.policy`` stays
cheap and ``python -m retold.policy.reference`` does not import its module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reference import PolicyBundle, bundle_names, get_bundle, supported_bundle

__all__ = ["PolicyBundle", "bundle_names", "get_bundle", "supported_bundle"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".reference", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
