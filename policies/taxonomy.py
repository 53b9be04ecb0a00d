"""The reference taxonomy as versioned data, and the inventory builder as a bundle component.

The taxonomy is what the policies may say: the gap categories a planner may ask for (§3.1),
the reason codes a judge gives each candidate (§3.2), and the activation categories and
decisions of the record classifier (§2.1). It restates the enums of the core contracts with
the descriptions the prompts use; :func:`check_taxonomy` pins that the two agree, so the
data cannot drift from the code that validates decisions.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from retold._activation_schema import ACTIVATION_CATEGORIES as _CORE_ACTIVATION_CATEGORIES
from retold._orchestrator import _KIND_TO_CATEGORY, store_inventory
from retold._policies import GapCategory, ReasonCode
from retold._records import Principal
from retold._store import Store

from ._identity import sha256_json, sha256_text

__all__ = [
    "INVENTORY_BUILDER",
    "TAXONOMY",
    "InventoryBuilder",
    "Taxonomy",
    "check_taxonomy",
]


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Taxonomy:
    """The categories and codes the reference policies speak, with their descriptions.

    Attributes:
        id / version: the component's identity in a bundle manifest.
        gap_categories: gap category -> what it asks for.
        reason_codes: admission reason code -> when it applies.
        activation_categories: the only categories an activation may promote, -> meaning.
        activation_decisions: classifier decision -> when it applies.
    """

    id: str
    version: str
    gap_categories: Mapping[str, str]
    reason_codes: Mapping[str, str]
    activation_categories: Mapping[str, str]
    activation_decisions: Mapping[str, str]

    def as_data(self) -> dict[str, Any]:
        """The taxonomy as plain JSON-ready data (what is hashed)."""
        return {
            "id": self.id,
            "version": self.version,
            "gap_categories": dict(self.gap_categories),
            "reason_codes": dict(self.reason_codes),
            "activation_categories": dict(self.activation_categories),
            "activation_decisions": dict(self.activation_decisions),
        }

    def identity(self) -> dict[str, Any]:
        """The manifest identity: id, version and the hash of the data."""
        return {"id": self.id, "version": self.version, "data_sha256": sha256_json(self.as_data())}

    def describe_gap_categories(self) -> str:
        """One ``- name: description`` line per gap category, for prompts."""
        return "\n".join(f"- {k}: {v}" for k, v in self.gap_categories.items())


TAXONOMY = Taxonomy(
    id="retold-taxonomy",
    version="1",
    gap_categories=_frozen(
        {
            GapCategory.PREFERENCE.value: "how the user likes things done or what they like "
            "(tastes, habits, preferred tools or formats) that would change this answer",
            GapCategory.PRIOR_DECISION.value: "something the user already decided, chose or "
            "agreed earlier that the answer should follow",
            GapCategory.CONSTRAINT.value: "a fact about the user or their situation that limits "
            "what a good answer can be (diet, health, budget, location, equipment, schedule)",
            GapCategory.RELATIONSHIP_OR_EVENT.value: "a person, pet, organisation or past event "
            "in the user's life that the turn refers to",
            GapCategory.TASK_STATE.value: "where an ongoing task, project or procedure of the "
            "user stands",
        }
    ),
    reason_codes=_frozen(
        {
            ReasonCode.HELPFUL.value: "independently improves correctness, personalization or "
            "the next action",
            ReasonCode.REDUNDANT.value: "repeats information already present in the draft, the "
            "public context or the ambient profile",
            ReasonCode.INSUFFICIENT.value: "concerns the request but cannot support a material "
            "change of the response",
            ReasonCode.STALE_OR_CONFLICTING.value: "outdated, unresolved, or contradicted by "
            "stronger evidence",
            ReasonCode.POTENTIALLY_HARMFUL.value: "risks factual distortion, inappropriate "
            "personalization, privacy exposure or unsafe behaviour",
            ReasonCode.JOINTLY_HELPFUL.value: "useful only together with one or more other "
            "admitted records",
        }
    ),
    activation_categories=_frozen(
        {
            "accessibility": "an accessibility requirement for every response (screen-reader "
            "friendly output, larger text, no colour-only cues, plain language)",
            "answer_style": "how every answer should be written (length, tone, format, structure)",
            "response_language": "the language every answer should be written in",
        }
    ),
    activation_decisions=_frozen(
        {
            "promote": "an explicit, broadly applicable instruction for every response in an "
            "allowed category, with no task, topic, time or place trigger",
            "conditional": "a preference with a trigger that should be checked per turn, or "
            "not a response preference at all",
            "review": "broad applicability, the category or safety is ambiguous",
        }
    ),
)


def check_taxonomy(taxonomy: Taxonomy = TAXONOMY) -> None:
    """Raise ``ValueError`` if the taxonomy disagrees with the core contracts' enums."""
    pairs: Sequence[tuple[str, set[str], set[str]]] = (
        ("gap_categories", set(taxonomy.gap_categories), {c.value for c in GapCategory}),
        ("reason_codes", set(taxonomy.reason_codes), {c.value for c in ReasonCode}),
        (
            "activation_categories",
            set(taxonomy.activation_categories),
            set(_CORE_ACTIVATION_CATEGORIES),
        ),
        (
            "activation_decisions",
            set(taxonomy.activation_decisions),
            {"promote", "conditional", "review"},
        ),
    )
    for name, ours, core in pairs:
        if ours != core:
            raise ValueError(f"taxonomy {name} {sorted(ours)} differ from the core {sorted(core)}")


@dataclass(frozen=True)
class InventoryBuilder:
    """The content-free inventory as a bundle component (wraps ``store_inventory``).

    Callable as the orchestrator's ``inventory_fn``: returns the gap categories the
    principal's live conditional records cover, never any record text.
    """

    id: str = "store-inventory"
    version: str = "1"
    kind_to_category: Mapping[str, str] = field(
        default_factory=lambda: _frozen({k: v.value for k, v in _KIND_TO_CATEGORY.items()})
    )

    def __call__(self, store: Store, scope: Principal) -> list[str]:
        return store_inventory(store, scope)

    def identity(self) -> dict[str, Any]:
        """The manifest identity: the builder's source and its kind-to-category mapping."""
        source = inspect.getsource(store_inventory).replace("\r\n", "\n")
        return {
            "id": self.id,
            "version": self.version,
            "source_sha256": sha256_text(source),
            "kind_to_category_sha256": sha256_json(dict(self.kind_to_category)),
        }


INVENTORY_BUILDER = InventoryBuilder()
