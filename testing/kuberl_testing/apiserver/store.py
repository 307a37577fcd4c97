"""The API server's object semantics, without HTTP: create, patch, replace, delete, finalizers, garbage collection.

Every write bumps the resourceVersion and appends exactly one event to the `EventLog`. What each
endpoint may change follows the API server: the status subresource changes only `.status`, the main
endpoint never does; name, uid, creationTimestamp and generation are fixed; a spec change bumps
the generation; a no-op write changes nothing.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kuberl_testing.apiserver.errors import ApiError
from kuberl_testing.apiserver.history import EventLog
from kuberl_testing.apiserver.patch import json_patch, merge_patch
from kuberl_testing.apiserver.resources import ResourceType
from kuberl_testing.apiserver.scale import scale_of, with_replicas
from kuberl_testing.apiserver.selectors import object_matches

MAX_EVENT_OBJECTS = 5_000  # Kubernetes Events expire (1 h by default); here the oldest go first
MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json",
                     "application/apply-patch+yaml", "application/json")

Key = tuple[str, str, str, str]  # (group, plural, namespace or "", name)
AdmissionHook = Callable[[str, str, dict[str, Any]], None]


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectIndex:
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


class ObjectStore:
    """The objects of every registered resource type and the rules for changing them.

    `on_crd` is called with each CustomResourceDefinition created, so that its kind gets served.
    `admission` holds mutating admission hooks: hook(group, plural, object) may change an object being
    created, as a mutating webhook would.
    """

    def __init__(self, on_crd: Callable[[dict[str, Any]], None]) -> None:
        self.types: dict[tuple[str, str], ResourceType] = {}
        self.admission: list[AdmissionHook] = []
        self.index = ObjectIndex()
        self.log = EventLog()
        self._on_crd = on_crd

    def type_of(self, group: str, plural: str) -> ResourceType:
        rtype = self.types.get((group, plural))
        if rtype is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural}.{group})")
        return rtype

    # -- reads --

    def select(self, group: str, plural: str, namespace: str | None, labels: str | None,
               fields: str | None) -> Iterator[dict[str, Any]]:
        for obj in self.index.of_kind(group, plural).values():
            if object_matches(obj, namespace, labels, fields):
                yield obj

    def list(self, rtype: ResourceType, namespace: str | None, labels: str | None,
             fields: str | None) -> dict[str, Any]:
        items = list(self.select(rtype.group, rtype.plural, namespace, labels, fields))
        return {"apiVersion": rtype.api_version, "kind": f"{rtype.kind}List",
                "metadata": {"resourceVersion": str(self.log.resource_version)}, "items": items}

    def require(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.index.get((rtype.group, rtype.plural, namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
        return obj

    # -- writes --

    def _publish(self, rtype: ResourceType, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.log.publish(rtype.group, rtype.plural, kind, obj)

    def create(self, rtype: ResourceType, namespace: str | None, body: Any) -> dict[str, Any]:
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
        if key in self.index:
            raise ApiError(409, "AlreadyExists", f'{rtype.plural} "{name}" already exists')
        obj.update(apiVersion=rtype.api_version, kind=rtype.kind)
        for hook in self.admission:
            hook(rtype.group, rtype.plural, obj)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        if rtype.status_subresource:
            obj.pop("status", None)
            if rtype.plural == "pods":
                obj["status"] = {"phase": "Pending"}
        if rtype.group == "apiextensions.k8s.io":
            self._on_crd(obj)
        if rtype.namespaced:
            self._ensure_namespace(meta["namespace"])
        self.index[key] = obj
        created = self._publish(rtype, "ADDED", obj)
        bucket = self.index.of_kind(rtype.group, rtype.plural)
        if rtype.kind == "Event" and len(bucket) > MAX_EVENT_OBJECTS:
            ns, oldest = next(iter(bucket))
            self._remove(rtype, (rtype.group, rtype.plural, ns, oldest), bucket[(ns, oldest)], orphan=True)
        if self._owners_gone(obj):
            # The garbage collector also removes a dependent created after its owners were deleted (a
            # controller that read the owner just before it went): it finds no owner and deletes it.
            with contextlib.suppress(ApiError):
                self.delete(rtype, meta.get("namespace"), name, orphan=False)
        return created

    def _ensure_namespace(self, namespace: str) -> None:
        """Namespaces appear on first use (the real API server would answer 404 for a missing one)."""
        if ("", "namespaces", "", namespace) not in self.index:
            self.create(self.types[("", "namespaces")], None,
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
        self.index[key] = new
        return self._publish(rtype, "MODIFIED", new)

    def _check_precondition(self, old: dict[str, Any], body: Any) -> None:
        wanted = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified; please apply your changes "
                                            "to the latest version and try again")

    def get(self, rtype: ResourceType, namespace: str | None, name: str, sub: str | None) -> dict[str, Any]:
        obj = self.require(rtype, namespace, name)
        return scale_of(rtype, obj) if sub == "scale" else obj

    def patch(self, rtype: ResourceType, namespace: str | None, name: str, sub: str | None,
              content_type: str, data: Any) -> dict[str, Any]:
        old = self.require(rtype, namespace, name)
        if sub == "scale":
            replicas = ((data or {}).get("spec") or {}).get("replicas") if isinstance(data, dict) else None
            if replicas is not None:
                self._write(rtype, old, with_replicas(rtype, old, replicas), None)
            return scale_of(rtype, self.require(rtype, namespace, name))
        if content_type == "application/json-patch+json":
            if not isinstance(data, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            new = json_patch(old, data)
        elif content_type in MERGE_PATCH_TYPES:
            if content_type == "application/apply-patch+yaml" and not isinstance(data, dict):
                raise ApiError(415, "UnsupportedMediaType", "send server-side apply bodies as JSON")
            if not isinstance(data, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            self._check_precondition(old, data)
            new = merge_patch(old, data)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
        return self._write(rtype, old, new, sub)

    def replace(self, rtype: ResourceType, namespace: str | None, name: str, sub: str | None,
                data: Any) -> dict[str, Any]:
        old = self.require(rtype, namespace, name)
        if sub == "scale":
            return self.patch(rtype, namespace, name, sub, "application/merge-patch+json", data)
        self._check_precondition(old, data)
        new = copy.deepcopy(data) if isinstance(data, dict) else data
        if isinstance(new, dict) and rtype.status_subresource and sub is None and "status" in old:
            new["status"] = old["status"]
        return self._write(rtype, old, new, sub)

    def delete(self, rtype: ResourceType, namespace: str | None, name: str, *, orphan: bool) -> dict[str, Any]:
        obj = self.require(rtype, namespace, name)
        key = (rtype.group, rtype.plural, namespace or "", name)
        if obj["metadata"].get("finalizers"):
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            marked = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": _now()}}
            self.index[key] = marked
            return self._publish(rtype, "MODIFIED", marked)
        return self._remove(rtype, key, obj, orphan=orphan)

    def _remove(self, rtype: ResourceType, key: Key, obj: dict[str, Any], *, orphan: bool) -> dict[str, Any]:
        self.index.pop(key)
        gone = self._publish(rtype, "DELETED", {**obj, "metadata": dict(obj["metadata"])})
        if not orphan:
            self._collect_garbage(obj["metadata"]["uid"])
        return gone

    def _owners_gone(self, obj: dict[str, Any]) -> bool:
        """Whether the object has owners and none of them exists any more."""
        owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []}
        return bool(owners) and not owners & self.index.uids

    def _collect_garbage(self, owner_uid: str) -> None:
        """Delete the dependents whose owners are all gone (the garbage collector, background policy)."""
        for group, plural, ns, name in sorted(self.index.dependents.pop(owner_uid, set())):
            obj = self.index.get((group, plural, ns, name))
            if obj is None:
                continue
            if self._owners_gone(obj):
                with contextlib.suppress(ApiError):
                    self.delete(self.types[(group, plural)], ns or None, name, orphan=False)
