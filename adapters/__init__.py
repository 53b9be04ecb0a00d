"""Provider adapters over httpx (installed as ``retold.adapters``)."""

from __future__ import annotations
