"""A checkpoint's experiment.yaml written when manifests also took Python names (num_epochs) still loads for
`kuberl evaluate` and `kuberl export`, its hyperparameters as written; a user's manifest with them is refused."""

from __future__ import annotations

import pytest
import yaml

from kuberl.api.base import StrictModel
from kuberl.api.field_errors import ManifestError
from kuberl.api.validation import _renamed_to_aliases, in_manifest_names, load_manifest, load_stored_manifest
from kuberl_testing.bad_inputs import base_manifest


def stored(config: dict, **spec: object) -> dict:
    doc = base_manifest(name="old-run")
    doc["spec"].update(config=config, **spec)
    return doc


def test_python_names_in_a_stored_config_are_read_as_the_manifests() -> None:
    text = yaml.safe_dump(stored({"num_epochs": 3, "minibatch_size": 128, "entropy_coeff": 0.02, "lr": 1e-3}))
    params = load_stored_manifest(text).spec.config
    assert params == {"numEpochs": 3, "minibatchSize": 128, "entropyCoeff": 0.02, "lr": 1e-3}


def test_a_users_manifest_with_python_names_is_still_refused() -> None:
    text = yaml.safe_dump(stored({"num_epochs": 3}))
    with pytest.raises(ManifestError) as info:
        load_manifest(text)
    assert "spec.config.num_epochs" in str(info.value) and "numEpochs" in str(info.value)


def test_each_policys_config_is_renamed_and_other_keys_kept() -> None:
    doc = stored({"gradClip": 0.5}, env={"id": "mpe2:simple_speaker_listener_v4", "config": {"max_cycles": 25}},
                 multiAgent={"policies": [{"name": "speaker", "agents": ["speaker_0"], "config": {"num_epochs": 2}},
                                          {"name": "listener", "agents": ["listener_0"]}]})
    renamed = in_manifest_names(doc)
    assert renamed["spec"]["multiAgent"]["policies"][0]["config"] == {"numEpochs": 2}
    assert renamed["spec"]["multiAgent"]["policies"][1] == {"name": "listener", "agents": ["listener_0"]}
    assert renamed["spec"]["env"]["config"] == {"max_cycles": 25}  # the env's own keyword arguments: not ours
    assert renamed["spec"]["config"] == {"gradClip": 0.5}
    assert doc["spec"]["multiAgent"]["policies"][0]["config"] == {"num_epochs": 2}  # the input is left as it was


def test_unknown_keys_still_fail_validation_by_name() -> None:
    with pytest.raises(ManifestError) as info:
        load_stored_manifest(yaml.safe_dump(stored({"num_epochs": 3, "num_epoch": 4})))
    assert "spec.config.num_epoch" in str(info.value)


def test_no_config_and_unknown_algorithms_are_left_alone() -> None:
    doc = base_manifest()
    assert in_manifest_names(doc) == doc
    odd = stored({"num_epochs": 3}, algorithm="nope")
    assert in_manifest_names(odd) == odd


class Inner(StrictModel):
    window_size: int = 1


class Outer(StrictModel):
    inner_list: list[Inner] = []
    inner: Inner = Inner()


def test_nested_models_and_lists_of_them_are_renamed() -> None:
    data = {"inner_list": [{"window_size": 2}], "inner": {"window_size": 3}, "other": {"window_size": 4}}
    assert _renamed_to_aliases(data, Outer) == {
        "innerList": [{"windowSize": 2}], "inner": {"windowSize": 3}, "other": {"window_size": 4}}
