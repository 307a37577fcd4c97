"""The API emulator over HTTP: the gaps of KMock 0.8 that it closes, and what the operator needs."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from kuberl_testing.apiserver import history, serve_emulator

PODS = "/api/v1/namespaces/ns/pods"
RLX = "/apis/kuberl.io/v1alpha1/namespaces/ns/rlexperiments"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


def pod(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.fixture
async def api():
    async with serve_emulator() as (emulator, url), aiohttp.ClientSession(url) as session:
        yield emulator, session


async def call(session, method, path, body=None, headers=None):
    async with session.request(method, path, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def read_events(session, path, count, timeout=5.0):
    events = []
    async with session.get(path) as resp:
        async with asyncio.timeout(timeout):
            async for line in resp.content:
                if line.strip():
                    events.append(json.loads(line))
                if len(events) >= count:
                    break
    return events


async def test_writes_carry_resource_versions_and_lists_the_current_one(api):
    _, s = api
    code, created = await call(s, "POST", PODS, pod("a"))
    assert code == 201
    meta = created["metadata"]
    assert meta["resourceVersion"] and meta["uid"] and meta["namespace"] == "ns" and created["status"]["phase"] == "Pending"
    code, again = await call(s, "POST", PODS, pod("a"))
    assert code == 409 and again["reason"] == "AlreadyExists"
    code, patched = await call(s, "PATCH", f"{PODS}/a", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    assert int(patched["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    _, listing = await call(s, "GET", PODS)
    assert listing["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    code, same = await call(s, "PATCH", f"{PODS}/a", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    assert same["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]  # no-op: no new version


async def test_failed_json_patch_test_is_422_and_changes_nothing(api):
    _, s = api
    _, created = await call(s, "POST", PODS, pod("a"))
    rv = created["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "999"},
           {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]
    code, body = await call(s, "PATCH", f"{PODS}/a", ops, JSONPATCH)
    assert code == 422 and body["reason"] == "Invalid"
    ops[0]["value"] = rv
    code, body = await call(s, "PATCH", f"{PODS}/a", ops, JSONPATCH)
    assert code == 200 and body["metadata"]["finalizers"] == ["f"]
    code, body = await call(s, "PATCH", f"{PODS}/a", {"metadata": {"resourceVersion": rv, "labels": {"a": "b"}}},
                            MERGE)
    assert code == 409  # a stale resourceVersion precondition


async def test_watch_replays_only_events_after_the_given_resource_version(api):
    _, s = api
    _, first = await call(s, "POST", PODS, pod("a"))
    await call(s, "POST", PODS, pod("b"))
    await call(s, "DELETE", f"{PODS}/a")
    events = await read_events(s, f"{PODS}?watch=true&resourceVersion={first['metadata']['resourceVersion']}", 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("DELETED", "a")]


async def test_watch_from_an_expired_resource_version_is_410_gone(api, monkeypatch):
    _, s = api
    monkeypatch.setattr(history, "MAX_EVENTS_KEPT", 2)
    for i in range(8):
        await call(s, "POST", PODS, pod(f"p{i}"))
    events = await read_events(s, f"{PODS}?watch=true&resourceVersion=1", 1)
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


async def test_stopping_the_server_ends_open_watches(api):
    """A watch whose client went away would otherwise hold the server's shutdown until its timeoutSeconds
    (the module fixtures of the operator tests waited 30 s at each teardown)."""
    emulator, s = api
    await call(s, "POST", PODS, pod("a"))
    async with s.get(f"{PODS}?watch=true&timeoutSeconds=300") as resp:
        first = json.loads(await resp.content.readline())
        emulator.end_watches()
        async with asyncio.timeout(30):  # a hang guard: the stream ends at once
            rest = await resp.content.read()
    assert first["object"]["metadata"]["name"] == "a" and rest == b""


async def test_no_event_is_lost_between_the_snapshot_and_the_stream(api):
    _, s = api
    for i in range(5):
        await call(s, "POST", PODS, pod(f"old{i}"))

    async def writer():
        for i in range(20):
            await call(s, "POST", PODS, pod(f"new{i}"))

    task = asyncio.create_task(writer())
    events = await read_events(s, f"{PODS}?watch=true", 25)
    await task
    names = [e["object"]["metadata"]["name"] for e in events]
    assert sorted(names) == sorted([f"old{i}" for i in range(5)] + [f"new{i}" for i in range(20)])


async def test_label_selectors_on_list_and_watch(api):
    _, s = api
    await call(s, "POST", PODS, pod("h", role="head", app="kuberl"))
    await call(s, "POST", PODS, pod("w", role="worker", app="kuberl"))
    await call(s, "POST", PODS, pod("other"))
    _, listing = await call(s, "GET", f"{PODS}?labelSelector=app%3Dkuberl,role%3Dworker")
    assert [p["metadata"]["name"] for p in listing["items"]] == ["w"]
    events = await read_events(s, f"{PODS}?watch=true&labelSelector=app%3Dkuberl", 2)
    assert sorted(e["object"]["metadata"]["name"] for e in events) == ["h", "w"]


async def test_status_and_scale_subresources_and_generation(api):
    _, s = api
    body = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "metadata": {"name": "e"},
            "spec": {"workers": {"replicas": 1}}, "status": {"phase": "Ignored"}}
    code, created = await call(s, "POST", RLX, body)
    assert code == 201 and "status" not in created and created["metadata"]["generation"] == 1
    _, main = await call(s, "PATCH", f"{RLX}/e", {"status": {"phase": "X"}, "metadata": {"labels": {"a": "b"}}}, MERGE)
    assert "status" not in main and main["metadata"]["generation"] == 1  # main endpoint: no status, no generation
    _, st = await call(s, "PATCH", f"{RLX}/e/status", {"status": {"phase": "Running", "workers": 1,
                                                                  "selector": "a=b"}, "spec": {"x": 1}}, MERGE)
    assert st["status"]["phase"] == "Running" and "x" not in st["spec"] and st["metadata"]["generation"] == 1
    _, scale = await call(s, "GET", f"{RLX}/e/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1 and scale["status"]["selector"] == "a=b"
    _, scale = await call(s, "PATCH", f"{RLX}/e/scale", {"spec": {"replicas": 4}}, MERGE)
    assert scale["spec"]["replicas"] == 4
    _, obj = await call(s, "GET", f"{RLX}/e")
    assert obj["spec"]["workers"]["replicas"] == 4 and obj["metadata"]["generation"] == 2


async def test_finalizers_and_owner_reference_garbage_collection(api):
    _, s = api
    _, owner = await call(s, "POST", RLX, {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                           "metadata": {"name": "e", "finalizers": ["kopf"]}, "spec": {}})
    ref = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "name": "e",
           "uid": owner["metadata"]["uid"], "controller": True}
    child = pod("child")
    child["metadata"]["ownerReferences"] = [ref]
    await call(s, "POST", PODS, child)
    await call(s, "POST", "/api/v1/namespaces/ns/configmaps",
               {"metadata": {"name": "cm", "ownerReferences": [ref]}, "data": {}})
    code, marked = await call(s, "DELETE", f"{RLX}/e")
    assert code == 200 and marked["metadata"]["deletionTimestamp"]
    assert (await call(s, "GET", f"{PODS}/child"))[0] == 200  # the owner still exists
    await call(s, "PATCH", f"{RLX}/e", {"metadata": {"finalizers": None}}, MERGE)
    assert (await call(s, "GET", f"{RLX}/e"))[0] == 404
    assert (await call(s, "GET", f"{PODS}/child"))[0] == 404
    assert (await call(s, "GET", "/api/v1/namespaces/ns/configmaps/cm"))[0] == 404


async def test_a_dependent_created_after_its_owner_was_deleted_is_collected(api):
    """A controller that read its owner just before the owner went creates an orphan: the GC removes it."""
    _, s = api
    _, owner = await call(s, "POST", RLX, {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                           "metadata": {"name": "gone"}, "spec": {}})
    ref = {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment", "name": "gone",
           "uid": owner["metadata"]["uid"], "controller": True}
    await call(s, "DELETE", f"{RLX}/gone")
    late = pod("late")
    late["metadata"]["ownerReferences"] = [ref]
    code, created = await call(s, "POST", PODS, late)
    assert code == 201 and created["metadata"]["uid"]
    assert (await call(s, "GET", f"{PODS}/late"))[0] == 404
    _, live = await call(s, "POST", RLX, {"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                          "metadata": {"name": "live"}, "spec": {}})
    kept = pod("kept")
    kept["metadata"]["ownerReferences"] = [ref, {**ref, "name": "live", "uid": live["metadata"]["uid"]}]
    await call(s, "POST", PODS, kept)
    assert (await call(s, "GET", f"{PODS}/kept"))[0] == 200  # one owner left is enough


async def test_crds_created_through_the_api_are_served(api):
    _, s = api
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "subresources": {"status": {}}}]}}
    assert (await call(s, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))[0] == 201
    code, _ = await call(s, "POST", "/apis/example.com/v1/namespaces/ns/widgets",
                         {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert code == 201
    _, discovery = await call(s, "GET", "/apis/example.com/v1")
    assert {r["name"] for r in discovery["resources"]} == {"widgets", "widgets/status"}
    _, namespaces = await call(s, "GET", "/api/v1/namespaces")
    assert [n["metadata"]["name"] for n in namespaces["items"]] == ["ns"]  # created on first use
