"""The reference policy bundle (installed as ``retold.policy``)."""

from __future__ import annotations
