"""``UtilityAwareConfig``: the host's switches for the utility-aware path (§5).

The configuration is built by the host that owns the model clients, not read from YAML:
the models, prompts and timeouts are part of the bundle the host is accountable for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._errors import BundleMismatchError

__all__ = ["BundleCheck", "UtilityAwareConfig", "check_bundle"]

log = structlog.get_logger(__name__)

AdmissionMode = Literal["disabled", "hosted_judge", "custom"]


class UtilityAwareConfig(BaseModel):
    """Opt-in switches, bounds and timeouts of the utility-aware path.

    Everything is off by default. Frozen and keyword-only; invalid values raise
    ``pydantic.ValidationError`` at construction.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gap_enabled: bool = False
    """Plan gaps and retrieve conditional candidates against the gap queries."""

    admission_mode: AdmissionMode = "disabled"
    """``hosted_judge`` (the shipping policy), ``custom`` (a host-supplied policy, e.g. in
    tests) or ``disabled``. Gap planning without admission may only run in shadow mode."""

    shadow: bool = False
    """Decide and log everything, never regenerate or inject; the response is the draft."""

    profile_enabled: bool = True
    """False withholds the ambient profile from the draft and the decision, whatever else is
    set; a switch, not a bundle component."""

    max_gaps: int = Field(default=3, ge=1, le=3)
    """Gaps used per turn; a policy's extra gaps are dropped in order."""

    max_candidates: int = Field(default=8, ge=1, le=32)
    """Cap on the merged, de-duplicated candidate set admission sees in its one call."""

    gap_timeout_ms: int = Field(default=2000, gt=0)
    """Hard cap on gap planning; a planner past it is abandoned and the turn fails closed."""

    retrieval_timeout_ms: int = Field(default=2000, gt=0)
    """Hard cap on the retrieval of all gap queries (they run concurrently)."""

    admission_timeout_ms: int = Field(default=2000, gt=0)
    """Hard cap on the admission call."""

    regeneration_timeout_ms: int | None = Field(default=None, gt=0)
    """Hard cap on the final regeneration; None leaves it to the latency budget (if any)."""

    latency_budget_ms: int | None = Field(default=None, ge=0)
    """Default per-turn budget beyond the draft (``TurnOptions`` overrides it per turn).
    None: only the per-stage timeouts bound the path; 0: baseline plus profile only."""

    bundle: Mapping[str, Any] | None = None
    """The declared bundle (planner, judge, classifier, taxonomy, inventory builder,
    retrieval hash). Manifest hashing and fitness enforcement arrive with the bundle work;
    today only ``retrieval_config_sha256`` is checked (see :func:`check_bundle`)."""

    @model_validator(mode="after")
    def _bundle_is_json(self) -> UtilityAwareConfig:
        if self.bundle is not None:
            try:
                json.dumps(dict(self.bundle), sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"bundle must be JSON-serialisable: {exc}") from exc
        return self

    @property
    def admission_enabled(self) -> bool:
        """True when an admission policy decides (any mode but ``disabled``)."""
        return self.admission_mode != "disabled"

    def snapshot(self) -> dict[str, Any]:
        """The JSON-ready configuration recorded with every turn decision."""
        data = self.model_dump(mode="json")
        data["bundle"] = dict(self.bundle) if self.bundle is not None else None
        return data


class BundleCheck(BaseModel):
    """What :func:`check_bundle` established about the declared bundle."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retrieval_verified: bool = False
    retrieval_config_sha256: str | None = None


def _config_sha256(retrieval_config: Any) -> str:
    if isinstance(retrieval_config, BaseModel):
        data: Any = retrieval_config.model_dump(mode="json")
    else:
        data = retrieval_config
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def check_bundle(config: UtilityAwareConfig, *, retrieval_config: Any = None) -> BundleCheck:
    """Check the declared bundle against what this host runs (§5, last paragraphs).

    A bundle that declares ``retrieval_config_sha256`` must be given the retrieval
    configuration it claims; in shadow mode a missing one only warns.

    Raises:
        BundleMismatchError: the declared hash differs from the given configuration's, or a
            hash is declared with no configuration outside shadow mode.
    """
    declared = (config.bundle or {}).get("retrieval_config_sha256")
    if declared is None:
        return BundleCheck()
    if retrieval_config is None:
        if config.shadow:
            log.warning("bundle_retrieval_unverified", declared=declared)
            return BundleCheck()
        raise BundleMismatchError(
            "the bundle declares retrieval_config_sha256 but no retrieval_config was given; "
            "pass the retrieval configuration the host uses, or drop the field from the bundle"
        )
    actual = _config_sha256(retrieval_config)
    if actual != declared:
        raise BundleMismatchError(
            f"the bundle declares retrieval_config_sha256={declared!r} but the host's "
            f"retrieval configuration hashes to {actual!r}"
        )
    return BundleCheck(retrieval_verified=True, retrieval_config_sha256=actual)
