"""The bundle registry, its manifests, and the orchestrator's manifest enforcement (spec §5)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from retold import (
    BundleMismatchError,
    Principal,
    RecordDraft,
    RecordKind,
    SQLiteStore,
    UsageError,
    UtilityAwareConfig,
    UtilityAwareOrchestrator,
)
from retold._activation_classifier import OfflineActivationClassifier
from retold._config import bundle_sha256, canonical_json, check_bundle
from retold._extraction import OfflineExtractor
from retold._orchestrator import store_inventory
from retold._retrieval import RetrievalConfig
from retold.policy import reference
from retold.policy._identity import component_entry
from retold.policy.lexical import LexicalAdmissionJudge, LexicalGapPlanner
from retold.policy.llm import HostedJudge, LLMActivationClassifier, LLMExtractor, LLMGapPlanner
from retold.policy.reference import (
    COMPONENTS,
    bundle_names,
    compute_manifest,
    get_bundle,
    recorded_manifest,
    supported_bundle,
    write_manifests,
)
from retold.policy.taxonomy import INVENTORY_BUILDER, TAXONOMY, check_taxonomy

REGENERATE = "python -m retold.policy.reference --write-manifests"
HEX64 = r"^[0-9a-f]{64}$"


class NeverCalled:
    """A chat model for factory tests: it must not be called."""

    async def complete(self, messages: Any, **kw: Any) -> Any:
        raise AssertionError("not called")


def test_registry_lists_both_bundles_and_refuses_unknown_names() -> None:
    """bundle_names lists the LLM, local and offline bundles; an unknown name names them all."""
    assert bundle_names() == ["local", "offline-reference", "reference"]
    with pytest.raises(UsageError, match="local, offline-reference, reference"):
        get_bundle("nightly")
    import retold.policy as policy

    assert policy.get_bundle is get_bundle and policy.supported_bundle is supported_bundle


@pytest.mark.parametrize("name", ["reference", "local", "offline-reference"])
def test_manifest_shape_and_hashes_recompute(name: str) -> None:
    """Every component carries id, version and sha256, and bundle_sha256 recomputes from them."""
    manifest = get_bundle(name).manifest
    assert set(manifest) == {"name", "components", "retrieval_config_sha256", "bundle_sha256"}
    assert manifest["name"] == name and set(manifest["components"]) == set(COMPONENTS)
    for entry in manifest["components"].values():
        assert set(entry) == {"id", "version", "sha256"}
        assert len(entry["sha256"]) == 64 and int(entry["sha256"], 16) >= 0
    retrieval = get_bundle(name).retrieval_config
    assert manifest["retrieval_config_sha256"] == retrieval.sha256()
    assert manifest["components"]["retrieval_config"]["sha256"] == retrieval.sha256()
    assert manifest["bundle_sha256"] == bundle_sha256(
        manifest["components"], manifest["retrieval_config_sha256"]
    )


@pytest.mark.parametrize("name", ["reference", "offline-reference"])
def test_computed_manifest_equals_the_recorded_one(name: str) -> None:
    """What the installed code hashes to is what was recorded (and measured)."""
    recorded = recorded_manifest(name)
    computed = compute_manifest(name)
    assert recorded == computed, (
        f"the {name!r} bundle no longer hashes to policies/manifests/{name}.json. If the change "
        f"to its policies, prompts, taxonomy or retrieval settings is intended, run `{REGENERATE}`, "
        "commit the manifest and re-run the fitness suite."
    )


def test_component_hash_rule() -> None:
    """A component's sha256 is the SHA-256 of the canonical JSON of its identity."""
    identity = LLMGapPlanner.identity()
    assert set(identity) == {
        "id",
        "version",
        "prompt_sha256",
        "response_schema_sha256",
        "source_sha256",
    }
    entry = get_bundle("reference").manifest["components"]["gap_planner"]
    assert entry == component_entry(identity)
    assert canonical_json({"b": "é", "a": [1, 2]}) == '{"a":[1,2],"b":"é"}'
    changed = component_entry({**identity, "prompt_sha256": "0" * 64})
    assert changed["sha256"] != entry["sha256"]
    offline = get_bundle("offline-reference").manifest["components"]
    taxonomy = get_bundle("reference").manifest["components"]["taxonomy"]
    assert taxonomy == component_entry(TAXONOMY.identity()) == offline["taxonomy"]


def test_supported_bundle_is_the_measured_config() -> None:
    """supported_bundle() returns the reference config carrying the recorded manifest."""
    config = supported_bundle()
    assert config.gap_enabled and config.admission_mode == "hosted_judge" and not config.shadow
    assert config.bundle == recorded_manifest("reference")
    offline = supported_bundle("offline-reference")
    assert offline.admission_mode == "custom"
    assert offline.bundle is not None and offline.bundle["name"] == "offline-reference"


def test_supported_bundle_refuses_a_drifted_or_missing_manifest(tmp_path: Path) -> None:
    """When the installed components no longer hash to the recorded manifest, it refuses."""
    with pytest.raises(BundleMismatchError, match="--write-manifests"):
        supported_bundle(manifests_dir=tmp_path)
    (path,) = write_manifests(["reference"], directory=tmp_path)
    assert supported_bundle(manifests_dir=tmp_path).bundle == compute_manifest("reference")
    drifted = json.loads(path.read_text())
    drifted["components"]["admission_judge"]["sha256"] = "0" * 64
    path.write_text(json.dumps(drifted))
    with pytest.raises(BundleMismatchError, match=r"changed: admission_judge.*--write-manifests"):
        supported_bundle(manifests_dir=tmp_path)


def test_config_overrides_apply_on_top_of_the_bundle() -> None:
    """config(**overrides) keeps the bundle and applies shadow, budgets and timeouts."""
    bundle = get_bundle("reference")
    config = bundle.config(shadow=True, latency_budget_ms=0, gap_timeout_ms=4000)
    assert (config.shadow, config.latency_budget_ms, config.gap_timeout_ms) == (True, 0, 4000)
    assert config.bundle == bundle.manifest
    with pytest.raises(UsageError, match="not overridable"):
        bundle.config(bundle={})


def test_offline_bundle_returns_the_deterministic_policies() -> None:
    """The offline bundle's factories ignore the model and return the labelled offline policies."""
    bundle = get_bundle("offline-reference")
    assert bundle.offline and "offline" in bundle.name
    assert isinstance(bundle.gap_policy(), LexicalGapPlanner)
    assert isinstance(bundle.admission_policy(NeverCalled()), LexicalAdmissionJudge)
    assert isinstance(bundle.activation_classifier(), OfflineActivationClassifier)
    assert isinstance(bundle.extractor(), OfflineExtractor)
    for key in ("gap_planner", "admission_judge", "activation_classifier", "extractor"):
        assert "offline" in bundle.manifest["components"][key]["id"], key
    assert LexicalGapPlanner.policy_id.startswith(
        bundle.manifest["components"]["gap_planner"]["id"] + "@"
    )


def test_reference_bundle_needs_a_model() -> None:
    """The LLM bundle's factories refuse without a model and bind the one they are given."""
    bundle = get_bundle("reference")
    assert not bundle.offline and "offline" not in bundle.name
    for factory in (
        bundle.gap_policy,
        bundle.admission_policy,
        bundle.activation_classifier,
        bundle.extractor,
    ):
        with pytest.raises(UsageError, match="offline-reference"):
            factory()
    model = NeverCalled()
    judge = bundle.admission_policy(model)
    assert isinstance(judge, HostedJudge) and judge.model is model
    assert isinstance(bundle.gap_policy(model), LLMGapPlanner)
    assert isinstance(bundle.activation_classifier(model), LLMActivationClassifier)
    assert isinstance(bundle.extractor(model), LLMExtractor)


def test_taxonomy_matches_the_core_contracts_and_inventory_wraps_the_store(
    store: SQLiteStore, alice: Principal
) -> None:
    """The taxonomy data agrees with the core enums; the inventory builder is store_inventory."""
    check_taxonomy()
    store.add(alice, RecordDraft(kind=RecordKind.DECISION, text="We picked the blue venue."))
    assert INVENTORY_BUILDER(store, alice) == store_inventory(store, alice) == ["prior_decision"]


def test_cli_check_passes_on_the_recorded_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m retold.policy.reference --check` exits 0 when nothing drifted."""
    assert reference.main(["--check"]) == 0
    assert capsys.readouterr().out == ""


# -- enforcement in the orchestrator ---------------------------------------------------------


def _orchestrator(
    store: SQLiteStore, bundle: dict[str, Any], retrieval: Any = None, **config: Any
) -> UtilityAwareOrchestrator:
    offline = get_bundle("offline-reference")
    return UtilityAwareOrchestrator(
        store,
        UtilityAwareConfig(gap_enabled=True, admission_mode="custom", bundle=bundle, **config),
        gap_policy=offline.gap_policy(),
        admission_policy=offline.admission_policy(),
        retrieval_config=retrieval,
    )


@pytest.mark.parametrize("name", ["reference", "offline-reference"])
def test_orchestrator_verifies_a_declared_bundle(store: SQLiteStore, name: str) -> None:
    """A bundle's own config and retrieval settings are accepted, with the retrieval hash verified.

    Shadow mode: serving live additionally needs a recorded fitness result
    (tests/test_fitness_enforcement.py).
    """
    bundle = get_bundle(name)
    offline = get_bundle("offline-reference")
    orchestrator = UtilityAwareOrchestrator(
        store,
        bundle.config(shadow=True),
        gap_policy=offline.gap_policy(),
        admission_policy=offline.admission_policy(),
        retrieval_config=bundle.retrieval_config,
    )
    assert orchestrator.bundle.retrieval_verified
    assert orchestrator.bundle.bundle_sha256 == bundle.manifest["bundle_sha256"]


def _tamper(path: str, value: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(compute_manifest("offline-reference"))
    *parents, leaf = path.split(".")
    node = manifest
    for key in parents:
        node = node[key]
    node[leaf] = value
    return manifest


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        pytest.param(
            "components.gap_planner.sha256", "0" * 64, "components hash to", id="component"
        ),
        pytest.param("components.extractor.version", "9", "components hash to", id="version"),
        pytest.param("bundle_sha256", "0" * 64, "components hash to", id="bundle-hash"),
        pytest.param(
            "components.retrieval_config.sha256",
            "0" * 64,
            "retrieval_config component",
            id="retrieval-component",
        ),
        pytest.param("components.taxonomy", "retold-taxonomy@1", "string id", id="entry-shape"),
        pytest.param("components", {}, "non-empty mapping", id="no-components"),
    ],
)
def test_tampered_manifest_is_refused(
    store: SQLiteStore, path: str, value: Any, match: str
) -> None:
    """A manifest edited after it was recorded cannot serve, in shadow mode either."""
    retrieval = get_bundle("offline-reference").retrieval_config
    manifest = _tamper(path, value)
    with pytest.raises(BundleMismatchError, match=match):
        _orchestrator(store, manifest, retrieval)
    with pytest.raises(BundleMismatchError, match=match):
        _orchestrator(store, manifest, retrieval, shadow=True)


def test_retrieval_config_mismatch_is_refused(store: SQLiteStore) -> None:
    """The manifest's retrieval hash must be the host's retrieval configuration's."""
    manifest = compute_manifest("offline-reference")
    with pytest.raises(BundleMismatchError, match="hashes to"):
        _orchestrator(store, manifest, RetrievalConfig(dense=False, rrf_k=61))
    with pytest.raises(BundleMismatchError, match="hashes to"):
        _orchestrator(store, manifest, get_bundle("reference").retrieval_config)
    with pytest.raises(BundleMismatchError, match="no retrieval_config"):
        _orchestrator(store, manifest)
    shadow = _orchestrator(store, manifest, shadow=True)
    assert not shadow.bundle.retrieval_verified
    assert shadow.bundle.bundle_sha256 == manifest["bundle_sha256"]


def test_check_bundle_without_components_keeps_the_retrieval_rule() -> None:
    """A bundle declaring only a retrieval hash is checked as before; none declared, nothing claimed."""
    retrieval = RetrievalConfig()
    check = check_bundle(
        UtilityAwareConfig(bundle={"retrieval_config_sha256": retrieval.sha256()}),
        retrieval_config=retrieval,
    )
    assert check.retrieval_verified and check.bundle_sha256 is None
    assert check_bundle(UtilityAwareConfig(bundle={"planner": "mine"})).retrieval_verified is False
