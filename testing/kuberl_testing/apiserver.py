"""A Kubernetes API emulator over HTTP for tests, e2e and benchmarks: KMock's emulator, made whole.

`KubeApiEmulator` subclasses `kmock.KubernetesEmulator` and keeps KMock's HTTP server, request
parsing, API discovery and error shape. It replaces the object store, because KMock 0.8 lacks what
Kopf and the kubernetes client rely on (see DESIGN.md): `metadata.resourceVersion` on every write,
422 when a JSON-patch `test` fails, a list resourceVersion, WATCH `?resourceVersion=` replay (410
Gone when too old), no event lost between a watch's snapshot and its subscription. It also adds
what an operator needs: CRDs (registered directly or by creating CustomResourceDefinition
objects), the status and scale subresources, generation, label and field selectors, merge/JSON/
strategic patches, PUT, finalizers and ownerReference garbage collection.

Admission: mutating hooks registered with `add_admission()` change objects on create, as a webhook
would (the Kueue stand-in in kuberl_testing.kueue gates queued pods). Not emulated: schema validation of
custom resources, validating admission, RBAC, graceful pod termination
(pods are deleted at once; there is no kubelet). Everything listens on 127.0.0.1 only.

Use it from async code with `serve_emulator()`, from sync code with `EmulatorThread`, or as a
process: `python -m kuberl_testing.apiserver --port 0 --kubeconfig PATH`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import datetime
import functools
import json
import re
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

MAX_EVENTS_KEPT = 20_000
STATS_PATH = "/_emulator/requests"
MAX_EVENT_OBJECTS = 5_000  # Kubernetes Events expire (1 h by default); here the oldest go first

Key = tuple[str, str, str, str]  # (group, plural, namespace or "", name)


class ApiError(Exception):
    """An API failure rendered as a metav1.Status with the reason strings clients check."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "code": self.code, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    scale_spec_path: str | None = None  # e.g. ".spec.workers.replicas"
    scale_status_path: str | None = None
    scale_selector_path: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN_TYPES = (
    ResourceType("", "v1", "pods", "Pod", status_subresource=True),
    ResourceType("", "v1", "services", "Service", status_subresource=True),
    ResourceType("", "v1", "configmaps", "ConfigMap"),
    ResourceType("", "v1", "secrets", "Secret"),
    ResourceType("", "v1", "events", "Event"),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount"),
    ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True),
    ResourceType("events.k8s.io", "v1", "events", "Event"),
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                 namespaced=False, status_subresource=True),
    ResourceType("kopf.dev", "v1", "kopfpeerings", "KopfPeering"),
    ResourceType("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False),
)
_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}


@dataclass(frozen=True)
class _Event:
    rv: int
    group: str
    plural: str
    type: str
    obj: dict[str, Any]


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- patches -------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key; lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], op: dict[str, Any]) -> Any:
    node = doc
    for part in parts:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, "Invalid", f"JSON patch {op['op']}: path {op.get('path')!r} not found") from None
    return node


def _get(doc: Any, path: str, op: dict[str, Any]) -> Any:
    return _walk(doc, _pointer(path), op)


def _remove(doc: Any, path: str, op: dict[str, Any]) -> Any:
    parts = _pointer(path)
    parent = _walk(doc, parts[:-1], op)
    try:
        return parent.pop(int(parts[-1]) if isinstance(parent, list) else parts[-1])
    except (KeyError, IndexError, ValueError):
        raise ApiError(422, "Invalid", f"JSON patch {op['op']}: path {path!r} not found") from None


def _add(doc: Any, path: str, value: Any, op: dict[str, Any], *, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _walk(doc, parts[:-1], op)
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if replace:
            parent[index] = copy.deepcopy(value)
        else:
            parent.insert(index, copy.deepcopy(value))
    elif isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, "Invalid", f"JSON patch replace: path {path!r} not found")
        parent[last] = copy.deepcopy(value)
    else:
        raise ApiError(422, "Invalid", f"JSON patch {op['op']}: parent of {path!r} is not a container")
    return doc


def json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 JSON patch; a failed `test` is 422 Invalid, as the API server answers."""
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _get(doc, path, op) != op.get("value"):
                raise ApiError(422, "Invalid", f"JSON patch test failed at {path!r}")
        elif kind == "remove":
            _remove(doc, path, op)
        elif kind in ("add", "replace"):
            doc = _add(doc, path, op.get("value"), op, replace=kind == "replace")
        elif kind in ("move", "copy"):
            value = _get(doc, op["from"], op)
            if kind == "move":
                _remove(doc, op["from"], op)
            doc = _add(doc, path, copy.deepcopy(value), op)
        else:
            raise ApiError(422, "Invalid", f"unknown JSON patch op {kind!r}")
    return doc


# --- selectors -----------------------------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Kubernetes label selector syntax: k=v, k==v, k!=v, k, !k, k in (a,b), k notin (a,b)."""
    for term in _split_terms(selector):
        if match := _SET_TERM.match(term):
            key, op, values = match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",")}
            ok = labels.get(key) in values if op == "in" else labels.get(key) not in values
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            ok = labels.get(key) != value
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            ok = labels.get(key) == value
        elif term.startswith("!"):
            ok = term[1:].strip() not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def field_selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    for term in _split_terms(selector):
        negate = "!=" in term
        path, value = (s.strip() for s in term.replace("==", "=").replace("!=", "=").split("=", 1))
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        actual = "" if node is None else str(node)
        if (actual == value) == negate:
            return False
    return True


@dataclass(frozen=True)
class ApiCall:
    """A resource request, parsed once (KMock's Request does much more than the store needs)."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    data: Any
    subresource: str | None
    raw: aiohttp.web.BaseRequest


def _resource_target(path: str) -> tuple[str, str, str | None, str | None, str | None] | None:
    """(group, plural, namespace, name, subresource) of a resource URL; None for anything else."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # discovery of a group version
    if rest[0] == "namespaces" and len(rest) <= 2:  # the namespaces themselves
        return group, "namespaces", None, rest[1] if len(rest) == 2 else None, None
    namespace = None
    if rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    plural, name = rest[0], rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) or None
    return group, plural, namespace, name, sub


def _dig(obj: dict[str, Any], path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _with_path(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    parts = path.strip(".").split(".")
    patch: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        patch = {part: patch}
    return merge_patch(obj, patch)


# --- the emulator --------------------------------------------------------------------------------------


class _Store:
    """Objects by kind, with an index of dependents by owner uid (so lists and GC never scan everything)."""

    def __init__(self) -> None:
        self.kinds: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self.dependents: dict[str, set[Key]] = {}
        self.uids: set[str] = set()

    def get(self, key: Key) -> dict[str, Any] | None:
        return self.kinds.get(key[:2], {}).get(key[2:])

    def __contains__(self, key: Key) -> bool:
        return key[2:] in self.kinds.get(key[:2], {})

    def __setitem__(self, key: Key, obj: dict[str, Any]) -> None:
        self._unindex(key)
        self.kinds.setdefault(key[:2], {})[key[2:]] = obj
        self.uids.add(obj["metadata"]["uid"])
        for ref in obj["metadata"].get("ownerReferences") or []:
            self.dependents.setdefault(ref.get("uid"), set()).add(key)

    def pop(self, key: Key) -> dict[str, Any] | None:
        self._unindex(key)
        return self.kinds.get(key[:2], {}).pop(key[2:], None)

    def _unindex(self, key: Key) -> None:
        old = self.get(key)
        if old is None:
            return
        self.uids.discard(old["metadata"]["uid"])
        for ref in old["metadata"].get("ownerReferences") or []:
            self.dependents.get(ref.get("uid"), set()).discard(key)

    def of_kind(self, group: str, plural: str) -> dict[tuple[str, str], dict[str, Any]]:
        return self.kinds.get((group, plural), {})


@attrs.define(kw_only=True)
class KubeApiEmulator(kmock.KubernetesEmulator):
    """KMock's Kubernetes emulator with a store that behaves like the API server (see module doc)."""

    _types: dict[tuple[str, str], ResourceType] = attrs.field(factory=dict, init=False)
    _store: _Store = attrs.field(factory=_Store, init=False)
    _events: list[_Event] = attrs.field(factory=list, init=False)
    _rv: int = attrs.field(default=0, init=False)
    _tick: asyncio.Event | None = attrs.field(default=None, init=False)
    _faults: list[list[Any]] = attrs.field(factory=list, init=False)
    _fault_hits: int = attrs.field(default=0, init=False)
    request_counts: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)
    _admission: list[Callable[[str, str, dict[str, Any]], None]] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for rtype in BUILTIN_TYPES:
            self.register(rtype)

    # -- registration and direct access (sync; call from the emulator's event loop or before serving) --

    def register(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.plural)] = rtype
        subresources = {"status"} if rtype.status_subresource else set()
        if rtype.scale_spec_path:
            subresources.add("scale")
        self.resources[kmock.resource(rtype.group, rtype.version, rtype.plural)] = kmock.ResourceInfo(
            kind=rtype.kind, namespaced=rtype.namespaced, singular=rtype.kind.lower(),
            verbs=_VERBS, subresources=subresources,
        )

    def add_admission(self, hook: Callable[[str, str, dict[str, Any]], None]) -> None:
        """A mutating admission hook: hook(group, plural, object) may change an object being created."""
        self._admission.append(hook)

    def register_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            sub = version.get("subresources") or {}
            scale = sub.get("scale") or {}
            self.register(ResourceType(
                spec["group"], version["name"], spec["names"]["plural"], spec["names"]["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in sub,
                scale_spec_path=scale.get("specReplicasPath"),
                scale_status_path=scale.get("statusReplicasPath"),
                scale_selector_path=scale.get("labelSelectorPath"),
            ))

    def get_object(self, group: str, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object (a copy), or None."""
        obj = self._store.get((group, plural, namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, group: str, plural: str, namespace: str | None = None,
                     label_selector: str | None = None) -> list[dict[str, Any]]:
        """Stored objects of a resource (copies), optionally in one namespace and by label selector."""
        return [copy.deepcopy(o) for o in self._select(group, plural, namespace, label_selector, None)]

    @property
    def resource_version(self) -> int:
        return self._rv

    def inject_fault(self, method: str, path_pattern: str, status: int = 500, times: int = 1, skip: int = 0) -> None:
        """Fault injection: let `skip` matching requests (METHOD, path regex) through, fail the next `times`."""
        self._faults.append([method.upper(), re.compile(path_pattern), status, times, skip])

    def fault_hits(self) -> int:
        """How many requests the injected faults have failed so far."""
        return self._fault_hits

    def clear_faults(self) -> None:
        self._faults.clear()

    def _injected_fault(self, request: ApiCall) -> ApiError | None:
        for fault in self._faults:
            method, pattern, status, times, skip = fault
            if times > 0 and request.method == method and pattern.search(request.path):
                if skip > 0:
                    fault[4] -= 1
                    return None
                fault[3] -= 1
                self._fault_hits += 1
                return ApiError(status, "InternalError", f"injected fault for {method} {request.path}")
        return None

    # -- request dispatch --

    async def _serve_version(self, request: kmock.Request) -> dict[str, Any]:
        body = await super()._serve_version(request)
        body["groupVersion"] = body["groupVersion"].lstrip("/")  # the core group is "v1", not "/v1"
        return body

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Resource requests go to this store; KMock serves the rest (discovery, /version) and errors.

        Resource requests skip KMock's request recording and DSL matching: they cost more than the
        store itself, and an emulator under load (the operator benchmark) must not grow without bound.
        """
        if raw_request.path == STATS_PATH:  # request counts, for benchmarks
            return aiohttp.web.json_response(dict(self.request_counts))
        target = _resource_target(raw_request.path)
        if target is None:
            return await super().__call__(raw_request)
        group, plural, namespace, name, sub = target
        watch = raw_request.query.get("watch", "").lower() in ("true", "1")
        self.request_counts[f"{'WATCH' if watch else raw_request.method} {plural}{'/' + sub if sub else ''}"] += 1
        body = await raw_request.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            return aiohttp.web.json_response(ApiError(400, "BadRequest", "the body is not JSON").body(), status=400)
        call = ApiCall(raw_request.method.upper(), raw_request.path, dict(raw_request.query),
                       dict(raw_request.headers), data, sub, raw_request)
        try:
            fault = self._injected_fault(call)
            if fault is not None:
                raise fault
            rtype = self._type(group, plural)
            if call.params.get("watch", "").lower() in ("true", "1"):
                return await self._watch(call, rtype, namespace, name)
            status, result = self._dispatch(call, rtype, namespace, name)
        except ApiError as exc:
            status, result = exc.code, exc.body()
        return aiohttp.web.json_response(result, status=status)

    def _type(self, group: str, plural: str) -> ResourceType:
        rtype = self._types.get((group, plural))
        if rtype is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural}.{group})")
        return rtype

    def _dispatch(self, request: ApiCall, rtype: ResourceType, namespace: str | None,
                  name: str | None) -> tuple[int, dict[str, Any]]:
        method, sub = request.method, request.subresource
        if not rtype.namespaced:
            namespace = None
        if sub not in (None, "status", "scale") or (sub == "status" and not rtype.status_subresource) \
                or (sub == "scale" and not rtype.scale_spec_path):
            raise ApiError(404, "NotFound", f"{rtype.plural} has no subresource {sub!r}")
        if name is None:
            if method == "GET":
                return 200, self._list(request, rtype, namespace)
            if method == "POST":
                return 201, self._create(rtype, namespace, request.data)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not supported")
        if method == "GET":
            obj = self._require(rtype, namespace, name)
            return 200, self._scale_of(rtype, obj) if sub == "scale" else obj
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "application/merge-patch+json").split(";")[0]
            return 200, self._patch(rtype, namespace, name, sub, content_type, request.data)
        if method == "PUT":
            return 200, self._replace(rtype, namespace, name, sub, request.data)
        if method == "DELETE":
            policy = (request.data or {}).get("propagationPolicy") if isinstance(request.data, dict) else None
            policy = request.params.get("propagationPolicy", policy)
            return 200, self._delete(rtype, namespace, name, orphan=policy == "Orphan")
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    # -- reads --

    def _select(self, group: str, plural: str, namespace: str | None, labels: str | None,
                fields: str | None) -> Iterator[dict[str, Any]]:
        for (ns, _), obj in self._store.of_kind(group, plural).items():
            if namespace is not None and ns != namespace:
                continue
            if labels and not label_selector_matches(labels, obj["metadata"].get("labels") or {}):
                continue
            if fields and not field_selector_matches(fields, obj):
                continue
            yield obj

    def _list(self, request: ApiCall, rtype: ResourceType, namespace: str | None) -> dict[str, Any]:
        items = list(self._select(rtype.group, rtype.plural, namespace, request.params.get("labelSelector"),
                                  request.params.get("fieldSelector")))
        return {"apiVersion": rtype.api_version, "kind": f"{rtype.kind}List",
                "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def _require(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._store.get((rtype.group, rtype.plural, namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
        return obj

    def _scale_of(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "resourceVersion": meta["resourceVersion"], "uid": meta["uid"]},
            "spec": {"replicas": _dig(obj, rtype.scale_spec_path or "") or 0},
            "status": {"replicas": _dig(obj, rtype.scale_status_path or "") or 0,
                       "selector": _dig(obj, rtype.scale_selector_path or "") or ""},
        }

    # -- writes: every write bumps the resourceVersion and appends exactly one event --

    def _publish(self, rtype: ResourceType, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Stamp a new resourceVersion on `obj` (never mutated afterwards) and wake the watchers."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._events.append(_Event(self._rv, rtype.group, rtype.plural, kind, obj))
        if len(self._events) > 2 * MAX_EVENTS_KEPT:
            del self._events[: len(self._events) - MAX_EVENTS_KEPT]
        if self._tick is not None:
            self._tick.set()
        self._tick = asyncio.Event()
        return obj

    def _create(self, rtype: ResourceType, namespace: str | None, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            if namespace and meta.get("namespace") not in (None, namespace):
                raise ApiError(400, "BadRequest", "the namespace of the object does not match the URL")
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = (rtype.group, rtype.plural, meta.get("namespace", ""), name)
        if key in self._store:
            raise ApiError(409, "AlreadyExists", f'{rtype.plural} "{name}" already exists')
        obj.update(apiVersion=rtype.api_version, kind=rtype.kind)
        for hook in self._admission:
            hook(rtype.group, rtype.plural, obj)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        if rtype.status_subresource:
            obj.pop("status", None)
            if rtype.plural == "pods":
                obj["status"] = {"phase": "Pending"}
        if rtype.group == "apiextensions.k8s.io":
            self.register_crd(obj)
        if rtype.namespaced:
            self._ensure_namespace(meta["namespace"])
        self._store[key] = obj
        created = self._publish(rtype, "ADDED", obj)
        bucket = self._store.of_kind(rtype.group, rtype.plural)
        if rtype.kind == "Event" and len(bucket) > MAX_EVENT_OBJECTS:
            ns, oldest = next(iter(bucket))
            self._remove(rtype, (rtype.group, rtype.plural, ns, oldest), bucket[(ns, oldest)], orphan=True)
        return created

    def _ensure_namespace(self, namespace: str) -> None:
        """Namespaces appear on first use (the real API server would answer 404 for a missing one)."""
        if ("", "namespaces", "", namespace) not in self._store:
            self._create(self._types[("", "namespaces")], None,
                         {"metadata": {"name": namespace}, "status": {"phase": "Active"}})

    def _write(self, rtype: ResourceType, old: dict[str, Any], new: dict[str, Any], sub: str | None) -> dict[str, Any]:
        """Store `new` in place of `old` with the API server's rules for what each endpoint may change."""
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patched object must be a JSON object")
        if sub == "status":
            new = {**old, "status": new.get("status")} if new.get("status") is not None else \
                {k: v for k, v in old.items() if k != "status"}
        elif rtype.status_subresource and sub is None:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = old["status"]
        meta = dict(new.get("metadata") or {})
        old_meta = old["metadata"]
        for fixed in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation"):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new = {**new, "metadata": meta, "apiVersion": old["apiVersion"], "kind": old["kind"]}
        if new == old:
            return old  # a no-op write changes nothing, not even the resourceVersion
        spec_changed = {k: v for k, v in new.items() if k not in ("metadata", "status")} != \
            {k: v for k, v in old.items() if k not in ("metadata", "status")}
        if spec_changed:
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        key = (rtype.group, rtype.plural, old_meta.get("namespace", ""), old_meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rtype, key, new, orphan=False)
        self._store[key] = new
        return self._publish(rtype, "MODIFIED", new)

    def _check_precondition(self, old: dict[str, Any], body: Any) -> None:
        wanted = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified; please apply your changes "
                                            "to the latest version and try again")

    def _patch(self, rtype: ResourceType, namespace: str | None, name: str, sub: str | None,
               content_type: str, data: Any) -> dict[str, Any]:
        old = self._require(rtype, namespace, name)
        if sub == "scale":
            replicas = ((data or {}).get("spec") or {}).get("replicas") if isinstance(data, dict) else None
            if replicas is not None:
                self._write(rtype, old, _with_path(old, rtype.scale_spec_path or "", replicas), None)
            return self._scale_of(rtype, self._require(rtype, namespace, name))
        if content_type == "application/json-patch+json":
            if not isinstance(data, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            new = json_patch(old, data)
        elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json",
                              "application/apply-patch+yaml", "application/json"):
            if content_type == "application/apply-patch+yaml" and not isinstance(data, dict):
                raise ApiError(415, "UnsupportedMediaType", "send server-side apply bodies as JSON")
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            self._check_precondition(old, data)
            new = merge_patch(old, data)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
        return self._write(rtype, old, new, sub)

    def _replace(self, rtype: ResourceType, namespace: str | None, name: str, sub: str | None,
                 data: Any) -> dict[str, Any]:
        old = self._require(rtype, namespace, name)
        if sub == "scale":
            return self._patch(rtype, namespace, name, sub, "application/merge-patch+json", data)
        self._check_precondition(old, data)
        new = copy.deepcopy(data) if isinstance(data, dict) else data
        if isinstance(new, dict) and rtype.status_subresource and sub is None and "status" in old:
            new["status"] = old["status"]
        return self._write(rtype, old, new, sub)

    def _delete(self, rtype: ResourceType, namespace: str | None, name: str, *, orphan: bool) -> dict[str, Any]:
        obj = self._require(rtype, namespace, name)
        key = (rtype.group, rtype.plural, namespace or "", name)
        if obj["metadata"].get("finalizers"):
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            marked = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": _now()}}
            self._store[key] = marked
            return self._publish(rtype, "MODIFIED", marked)
        return self._remove(rtype, key, obj, orphan=orphan)

    def _remove(self, rtype: ResourceType, key: Key, obj: dict[str, Any], *, orphan: bool) -> dict[str, Any]:
        self._store.pop(key)
        gone = self._publish(rtype, "DELETED", {**obj, "metadata": dict(obj["metadata"])})
        if not orphan:
            self._collect_garbage(obj["metadata"]["uid"])
        return gone

    def _collect_garbage(self, owner_uid: str) -> None:
        """Delete the dependents whose owners are all gone (the garbage collector, background policy)."""
        for group, plural, ns, name in sorted(self._store.dependents.pop(owner_uid, set())):
            obj = self._store.get((group, plural, ns, name))
            if obj is None:
                continue
            owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []}
            if not (owners & self._store.uids):
                with contextlib.suppress(ApiError):
                    self._delete(self._types[(group, plural)], ns or None, name, orphan=False)

    # -- watch --

    async def _watch(self, request: ApiCall, rtype: ResourceType, namespace: str | None,
                     name: str | None) -> aiohttp.web.StreamResponse:
        namespace = namespace if rtype.namespaced else None
        labels, fields = request.params.get("labelSelector"), request.params.get("fieldSelector")
        if name:
            fields = f"metadata.name={name}" + (f",{fields}" if fields else "")
        since = request.params.get("resourceVersion") or "0"
        timeout = float(request.params.get("timeoutSeconds") or 0) or None

        def wanted(obj: dict[str, Any]) -> bool:
            ns = obj["metadata"].get("namespace")
            return (namespace is None or ns == namespace) \
                and (not labels or label_selector_matches(labels, obj["metadata"].get("labels") or {})) \
                and (not fields or field_selector_matches(fields, obj))

        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request.raw)
        # Snapshot and cursor are taken with no await in between, so no event falls into a gap.
        if since == "0":
            cursor = self._rv
            initial = [{"type": "ADDED", "object": o}
                       for o in self._select(rtype.group, rtype.plural, namespace, labels, fields)]
        else:
            cursor = int(since) if since.isdigit() else 0
            initial = []
            if self._events and cursor < self._events[0].rv - 1:
                gone = ApiError(410, "Expired", f"too old resource version: {cursor} ({self._events[0].rv - 1})")
                await response.write(json.dumps({"type": "ERROR", "object": gone.body()}).encode() + b"\n")
                return response
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            for event in initial:
                await response.write(json.dumps(event).encode() + b"\n")
            while True:
                if self._tick is None:
                    self._tick = asyncio.Event()
                tick = self._tick
                for event in self._events_after(cursor):
                    cursor = event.rv
                    if event.group == rtype.group and event.plural == rtype.plural and wanted(event.obj):
                        await response.write(json.dumps({"type": event.type, "object": event.obj}).encode() + b"\n")
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                if cursor >= self._rv:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(tick.wait(), timeout=min(remaining or 5.0, 5.0))
        return response

    def _events_after(self, rv: int) -> list[_Event]:
        if not self._events or rv >= self._events[-1].rv:
            return []
        start = max(0, rv - self._events[0].rv + 1)
        return self._events[start:]


# --- serving -------------------------------------------------------------------------------------------


def kubeconfig(url: str) -> dict[str, Any]:
    """A kubeconfig for the emulator (no authentication: it only listens on loopback)."""
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "kuberl-emulator",
        "clusters": [{"name": "kuberl-emulator", "cluster": {"server": url}}],
        "users": [{"name": "kuberl-emulator", "user": {"token": "emulator"}}],
        "contexts": [{"name": "kuberl-emulator",
                      "context": {"cluster": "kuberl-emulator", "user": "kuberl-emulator", "namespace": "default"}}],
    }


def write_kubeconfig(path: str | Path, url: str) -> Path:
    path = Path(path)
    path.write_text(yaml.safe_dump(kubeconfig(url)))
    return path


def _default_emulator(with_kuberl_crd: bool) -> KubeApiEmulator:
    emulator = KubeApiEmulator()
    if with_kuberl_crd:
        from kuberl.api.crd import build_crd

        emulator.register_crd(build_crd())
    return emulator


@contextlib.asynccontextmanager
async def serve_emulator(port: int = 0, *, with_kuberl_crd: bool = True,
                         host: str = "127.0.0.1") -> AsyncIterator[tuple[KubeApiEmulator, str]]:
    """Serve a fresh emulator on loopback; yields (emulator, base URL)."""
    emulator = _default_emulator(with_kuberl_crd)
    async with emulator, kmock.Server(emulator, host=host, port=port or None) as server:
        yield emulator, str(server.url).rstrip("/")


class EmulatorThread:
    """The emulator on its own event loop in a background thread, for synchronous tests and tools."""

    def __init__(self, port: int = 0, *, with_kuberl_crd: bool = True):
        self._port, self._with_crd = port, with_kuberl_crd
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.emulator: KubeApiEmulator | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kube-api-emulator", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            async with serve_emulator(self._port, with_kuberl_crd=self._with_crd) as (emulator, url):
                self.emulator, self.url, self.loop = emulator, url, asyncio.get_running_loop()
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    def start(self) -> EmulatorThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None or not self.url:
            raise RuntimeError(f"the API emulator did not start: {self._error!r}")
        return self

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a sync function on the emulator's loop (its store is not thread-safe) and return its result."""
        assert self.loop is not None

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Kubernetes API emulator on 127.0.0.1 (for tests and e2e)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", metavar="PATH", help="write a kubeconfig pointing at the emulator")
    parser.add_argument("--no-kuberl-crd", action="store_true", help="do not pre-register the RLExperiment CRD")
    parser.add_argument("--kueue", action="store_true",
                        help="gate queued pods as Kueue's webhook does (kuberl_testing.kueue)")
    args = parser.parse_args(argv)

    async def serve() -> None:
        async with serve_emulator(args.port, with_kuberl_crd=not args.no_kuberl_crd) as (emulator, url):
            if args.kueue:  # the gate and label, not the finalizer: no Kueue controller would remove it
                from kuberl_testing.kueue import kueue_webhook

                emulator.add_admission(functools.partial(kueue_webhook, finalizer=False))
            if args.kubeconfig:
                write_kubeconfig(args.kubeconfig, url)
            print(url, flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
