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

__all__ = ["BundleCheck", "UtilityAwareConfig", "bundle_sha256", "canonical_json", "check_bundle"]

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
    retrieval hash), e.g. ``retold.policy.reference.get_bundle("reference").manifest``.
    :func:`check_bundle` verifies ``retrieval_config_sha256`` against the host's retrieval
    configuration and, when ``components`` are declared, that ``bundle_sha256`` recomputes
    from them."""

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
    """What :func:`check_bundle` established about the declared bundle.

    Attributes:
        retrieval_verified: the declared retrieval hash was derived from the host's
            retrieval configuration (recorded on every turn as ``bundle_retrieval_verified``).
        retrieval_config_sha256: that derived hash.
        bundle_sha256: the manifest hash, recomputed from the declared components (None when
            the bundle declares no components).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    retrieval_verified: bool = False
    retrieval_config_sha256: str | None = None
    bundle_sha256: str | None = None


def canonical_json(value: Any) -> str:
    """The canonical JSON every bundle hash is taken over: sorted keys, no whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def bundle_sha256(
    components: Mapping[str, Mapping[str, Any]], retrieval_config_sha256: str | None
) -> str:
    """The manifest's ``bundle_sha256``: SHA-256 of the canonical JSON of
    ``{"components": components, "retrieval_config_sha256": retrieval_config_sha256}``.

    Each component is ``{"id", "version", "sha256"}``; the bundle's name is not hashed, so
    renaming a bundle does not change what it claims was measured.
    """
    body = {
        "components": {name: dict(entry) for name, entry in components.items()},
        "retrieval_config_sha256": retrieval_config_sha256,
    }
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def _config_sha256(retrieval_config: Any) -> str:
    own = getattr(retrieval_config, "sha256", None)
    if callable(own) and not isinstance(retrieval_config, Mapping):
        # RetrievalConfig hashes its own canonical JSON (schema tag included); the manifest
        # records that value, so it must be the one derived here.
        value = own()
        if isinstance(value, str):
            return value
    if isinstance(retrieval_config, BaseModel):
        data: Any = retrieval_config.model_dump(mode="json")
    else:
        data = retrieval_config
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _check_components(bundle: Mapping[str, Any]) -> str:
    """Recompute ``bundle_sha256`` from the declared components; raise on any disagreement."""
    components = bundle["components"]
    if not isinstance(components, Mapping) or not components:
        raise BundleMismatchError(
            "the bundle's components must be a non-empty mapping of component name to "
            '{"id", "version", "sha256"}; use a manifest from retold.policy.reference'
        )
    for name, entry in components.items():
        if not (
            isinstance(entry, Mapping)
            and all(isinstance(entry.get(key), str) and entry.get(key) for key in _ENTRY_KEYS)
        ):
            raise BundleMismatchError(
                f"bundle component {name!r} must carry string id, version and sha256; "
                "use a manifest from retold.policy.reference"
            )
    declared_retrieval = bundle.get("retrieval_config_sha256")
    entry = components.get("retrieval_config")
    if isinstance(entry, Mapping) and entry.get("sha256") != declared_retrieval:
        raise BundleMismatchError(
            "the bundle's retrieval_config component names another hash than its "
            "retrieval_config_sha256; the manifest was edited by hand"
        )
    declared = bundle.get("bundle_sha256")
    actual = bundle_sha256(components, declared_retrieval)
    if declared != actual:
        raise BundleMismatchError(
            f"the bundle declares bundle_sha256={declared!r} but its components hash to "
            f"{actual!r}; the manifest was altered after it was recorded. Use the manifest "
            "retold.policy.reference produces (e.g. supported_bundle())"
        )
    return actual


_ENTRY_KEYS = ("id", "version", "sha256")


def check_bundle(config: UtilityAwareConfig, *, retrieval_config: Any = None) -> BundleCheck:
    """Check the declared bundle against what this host runs (§5, last paragraphs).

    When the bundle declares ``components``, ``bundle_sha256`` must recompute from them and
    the declared retrieval hash (and the ``retrieval_config`` component must name that same
    hash), so a manifest edited by hand cannot serve. A bundle that declares
    ``retrieval_config_sha256`` must be given the retrieval configuration it claims; in
    shadow mode a missing one only warns.

    Raises:
        BundleMismatchError: the manifest does not recompute, the declared retrieval hash
            differs from the given configuration's, or a hash is declared with no
            configuration outside shadow mode.
    """
    bundle = config.bundle or {}
    manifest_hash = _check_components(bundle) if "components" in bundle else None
    declared = bundle.get("retrieval_config_sha256")
    if declared is None:
        return BundleCheck(bundle_sha256=manifest_hash)
    if retrieval_config is None:
        if config.shadow:
            log.warning("bundle_retrieval_unverified", declared=declared)
            return BundleCheck(bundle_sha256=manifest_hash)
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
    return BundleCheck(
        retrieval_verified=True, retrieval_config_sha256=actual, bundle_sha256=manifest_hash
    )
