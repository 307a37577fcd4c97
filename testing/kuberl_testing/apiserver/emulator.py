"""`KubeApiEmulator`: KMock's HTTP server and discovery in front of the `ObjectStore`, with WATCH streaming."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import json
from typing import Any

import aiohttp.web
import attrs
import kmock

from kuberl_testing.apiserver.errors import ApiError
from kuberl_testing.apiserver.faults import FaultInjector
from kuberl_testing.apiserver.history import EventLog
from kuberl_testing.apiserver.resources import (
    BUILTIN_TYPES,
    VERBS,
    ApiCall,
    ResourceType,
    resource_target,
    types_of_crd,
)
from kuberl_testing.apiserver.selectors import object_matches
from kuberl_testing.apiserver.store import AdmissionHook, ObjectStore

STATS_PATH = "/_emulator/requests"


@attrs.define(kw_only=True)
class KubeApiEmulator(kmock.KubernetesEmulator):
    """KMock's Kubernetes emulator with a store that behaves like the API server (see the package doc)."""

    _store: ObjectStore = attrs.field(init=False)
    _faults: FaultInjector = attrs.field(factory=FaultInjector, init=False)
    request_counts: collections.Counter[str] = attrs.field(factory=collections.Counter, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._store = ObjectStore(on_crd=self.register_crd)
        for rtype in BUILTIN_TYPES:
            self.register(rtype)

    # -- registration and direct access (sync; call from the emulator's event loop or before serving) --

    def register(self, rtype: ResourceType) -> None:
        self._store.types[(rtype.group, rtype.plural)] = rtype
        subresources = {"status"} if rtype.status_subresource else set()
        if rtype.scale_spec_path:
            subresources.add("scale")
        self.resources[kmock.resource(rtype.group, rtype.version, rtype.plural)] = kmock.ResourceInfo(
            kind=rtype.kind, namespaced=rtype.namespaced, singular=rtype.kind.lower(),
            verbs=VERBS, subresources=subresources,
        )

    def end_watches(self) -> None:
        """End the open watch streams (serving is stopping), as an API server's shutdown closes them."""
        self._store.log.close()

    def add_admission(self, hook: AdmissionHook) -> None:
        """A mutating admission hook: hook(group, plural, object) may change an object being created."""
        self._store.admission.append(hook)

    def register_crd(self, crd: dict[str, Any]) -> None:
        for rtype in types_of_crd(crd):
            self.register(rtype)

    def get_object(self, group: str, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object (a copy), or None."""
        obj = self._store.index.get((group, plural, namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, group: str, plural: str, namespace: str | None = None,
                     label_selector: str | None = None) -> list[dict[str, Any]]:
        """Stored objects of a resource (copies), optionally in one namespace and by label selector."""
        return [copy.deepcopy(o) for o in self._store.select(group, plural, namespace, label_selector, None)]

    @property
    def resource_version(self) -> int:
        return self._store.log.resource_version

    @property
    def history(self) -> EventLog:
        """Every change, in order (the most recent ones: the log is trimmed)."""
        return self._store.log

    def inject_fault(self, method: str, path_pattern: str, status: int = 500, times: int = 1, skip: int = 0) -> None:
        """Fault injection: let `skip` matching requests (METHOD, path regex) through, fail the next `times`."""
        self._faults.add(method, path_pattern, status, times, skip)

    def fault_hits(self) -> int:
        """How many requests the injected faults have failed so far."""
        return self._faults.hits

    def clear_faults(self) -> None:
        self._faults.clear()

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
        target = resource_target(raw_request.path)
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
            fault = self._faults.check(call.method, call.path)
            if fault is not None:
                raise fault
            rtype = self._store.type_of(group, plural)
            if watch:
                return await self._watch(call, rtype, namespace, name)
            status, result = self._dispatch(call, rtype, namespace, name)
        except ApiError as exc:
            status, result = exc.code, exc.body()
        return aiohttp.web.json_response(result, status=status)

    def _dispatch(self, request: ApiCall, rtype: ResourceType, namespace: str | None,
                  name: str | None) -> tuple[int, dict[str, Any]]:
        method, sub, store = request.method, request.subresource, self._store
        if not rtype.namespaced:
            namespace = None
        if sub not in (None, "status", "scale") or (sub == "status" and not rtype.status_subresource) \
                or (sub == "scale" and not rtype.scale_spec_path):
            raise ApiError(404, "NotFound", f"{rtype.plural} has no subresource {sub!r}")
        if name is None:
            if method == "GET":
                return 200, store.list(rtype, namespace, request.params.get("labelSelector"),
                                       request.params.get("fieldSelector"))
            if method == "POST":
                return 201, store.create(rtype, namespace, request.data)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not supported")
        if method == "GET":
            return 200, store.get(rtype, namespace, name, sub)
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "application/merge-patch+json").split(";")[0]
            return 200, store.patch(rtype, namespace, name, sub, content_type, request.data)
        if method == "PUT":
            return 200, store.replace(rtype, namespace, name, sub, request.data)
        if method == "DELETE":
            policy = (request.data or {}).get("propagationPolicy") if isinstance(request.data, dict) else None
            policy = request.params.get("propagationPolicy", policy)
            return 200, store.delete(rtype, namespace, name, orphan=policy == "Orphan")
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    # -- watch --

    async def _watch(self, request: ApiCall, rtype: ResourceType, namespace: str | None,
                     name: str | None) -> aiohttp.web.StreamResponse:
        namespace = namespace if rtype.namespaced else None
        labels, fields = request.params.get("labelSelector"), request.params.get("fieldSelector")
        if name:
            fields = f"metadata.name={name}" + (f",{fields}" if fields else "")
        since = request.params.get("resourceVersion") or "0"
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        log = self._store.log

        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request.raw)
        # Snapshot and cursor are taken with no await in between, so no event falls into a gap.
        if since == "0":
            cursor = log.resource_version
            initial = [{"type": "ADDED", "object": o}
                       for o in self._store.select(rtype.group, rtype.plural, namespace, labels, fields)]
        else:
            cursor = int(since) if since.isdigit() else 0
            initial = []
            oldest = log.oldest_replayable()
            if oldest is not None and cursor < oldest:
                gone = ApiError(410, "Expired", f"too old resource version: {cursor} ({oldest})")
                await response.write(json.dumps({"type": "ERROR", "object": gone.body()}).encode() + b"\n")
                return response
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            for event in initial:
                await response.write(json.dumps(event).encode() + b"\n")
            while True:
                tick = log.next_change()
                for event in log.after(cursor):
                    cursor = event.rv
                    if event.group == rtype.group and event.plural == rtype.plural \
                            and object_matches(event.obj, namespace, labels, fields):
                        await response.write(json.dumps({"type": event.type, "object": event.obj}).encode() + b"\n")
                remaining = None if deadline is None else deadline - loop.time()
                if log.closed or (remaining is not None and remaining <= 0):
                    break
                if cursor >= log.resource_version:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(tick.wait(), timeout=min(remaining or 5.0, 5.0))
        return response
