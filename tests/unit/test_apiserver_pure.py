"""The API emulator's pure parts: merge patch, JSON patch, label and field selectors."""

from __future__ import annotations

import pytest

from kuberl_testing.apiserver import (
    ApiError,
    field_selector_matches,
    json_patch,
    label_selector_matches,
    merge_patch,
)


def test_merge_patch_follows_rfc_7386():
    doc = {"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1}
    assert merge_patch(doc, {"a": {"b": None, "d": 3}, "l": [3], "x": None}) == {"a": {"c": 2, "d": 3}, "l": [3]}
    assert doc == {"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1}  # the input is not changed


def test_json_patch_ops_and_test_failure_is_422():
    doc = {"metadata": {"resourceVersion": "5", "finalizers": ["a"]}, "spec": {"n": 1}}
    out = json_patch(doc, [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
        {"op": "replace", "path": "/spec/n", "value": 2},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "copy", "from": "/spec/n", "path": "/spec/m"},
        {"op": "add", "path": "/metadata/annotations", "value": {"k~/": "v"}},
        {"op": "move", "from": "/metadata/annotations/k~0~1", "path": "/metadata/moved"},
    ])
    assert out == {"metadata": {"resourceVersion": "5", "finalizers": ["b"], "annotations": {}, "moved": "v"},
                   "spec": {"n": 2, "m": 2}}
    with pytest.raises(ApiError) as err:
        json_patch(doc, [{"op": "test", "path": "/metadata/resourceVersion", "value": "4"}])
    assert err.value.code == 422
    with pytest.raises(ApiError) as err:
        json_patch(doc, [{"op": "remove", "path": "/spec/absent"}])
    assert err.value.code == 422


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=kuberl", True), ("app==kuberl", True), ("app!=kuberl", False), ("role", True), ("!role", False),
    ("missing", False), ("!missing", True), ("role in (head, worker)", True), ("role notin (head)", True),
    ("app=kuberl,role in (head)", False), ("app=kuberl,role=worker", True), ("", True),
])
def test_label_selectors(selector, expected):
    assert label_selector_matches(selector, {"app": "kuberl", "role": "worker"}) is expected


def test_field_selectors():
    obj = {"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}}
    assert field_selector_matches("metadata.name=a,status.phase=Running", obj)
    assert not field_selector_matches("metadata.name!=a", obj)
    assert field_selector_matches("status.phase!=Failed", obj)
