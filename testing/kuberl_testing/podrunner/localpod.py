"""How a Pod body becomes a local process: its environment, its files and its addresses.

Pure functions, used by the pod runner (`kuberl_testing.podrunner.runner`). A pod on the stand-in cluster
gets its own loopback address (127.0.0.N) as `status.podIP`; Service names in its command and
environment become the address of the pod the Service selects. Ports that every pod would want
on the wildcard address (Ray's GCS binds `*:6379`) get a free local port per pod, and every
mention of that port next to the pod's address is rewritten to match.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
CLUSTER_DOMAIN = "cluster.local"


class PodSetupError(Exception):
    """The pod cannot start yet; `reason` is the kubelet's waiting reason (CreateContainerConfigError, ...)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Endpoint:
    """Where a pod (or the pod behind a Service) listens locally: its address and port translations."""

    ip: str
    ports: Mapping[int, int] = field(default_factory=dict)  # port inside the cluster -> local port

    def local_port(self, port: int) -> int:
        return self.ports.get(port, port)


# --- Kubernetes' $(VAR) expansion ------------------------------------------------------------------------

_DEPENDENT_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand_dependent_vars(text: str, env: Mapping[str, str]) -> str:
    """Expand `$(VAR)` from `env` as the kubelet does: `$$` escapes, unknown references stay as written."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _DEPENDENT_VAR.sub(replace, text)


# --- environment ----------------------------------------------------------------------------------------

_LABEL_PATH = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def field_ref_value(pod: Mapping[str, Any], field_path: str, pod_ip: str, host_ip: str = "127.0.0.1") -> str:
    """The value of a downward-API `fieldRef` for this pod."""
    meta = pod.get("metadata") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName") or "stand-in",
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if field_path in simple:
        return str(simple[field_path])
    if match := _LABEL_PATH.match(field_path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PodSetupError("CreateContainerConfigError", f"unsupported fieldRef fieldPath {field_path!r}")


def secret_values(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's keys, decoded (`data` is base64; `stringData` is plain, as written)."""
    values = {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
    values.update(secret.get("stringData") or {})
    return values


def _key_ref(kind: str, ref: Mapping[str, Any], namespace: str, objects: Mapping[tuple[str, str], dict[str, str]]
             ) -> str | None:
    name, key = ref.get("name", ""), ref.get("key", "")
    values = objects.get((namespace, name))
    if values is None:
        if ref.get("optional"):
            return None
        raise PodSetupError("CreateContainerConfigError", f'{kind} "{name}" not found')
    if key not in values:
        if ref.get("optional"):
            return None
        raise PodSetupError("CreateContainerConfigError", f"couldn't find key {key} in {kind} {namespace}/{name}")
    return values[key]


def resolve_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_ip: str,
    secrets: Mapping[tuple[str, str], dict[str, str]],
    config_maps: Mapping[tuple[str, str], dict[str, str]],
) -> dict[str, str]:
    """The container's environment: envFrom, then env in order, with `valueFrom` and `$(VAR)` resolved.

    `secrets` and `config_maps` map (namespace, name) to decoded key/value pairs.
    """
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, ref_key, objects in (("secret", "secretRef", secrets), ("configmap", "configMapRef", config_maps)):
            ref = source.get(ref_key)
            if ref is None:
                continue
            values = objects.get((namespace, ref.get("name", "")))
            if values is None and not ref.get("optional"):
                raise PodSetupError("CreateContainerConfigError", f'{kind} "{ref.get("name")}" not found')
            env.update({prefix + key: value for key, value in (values or {}).items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = expand_dependent_vars(str(var["value"]), env)
            continue
        source = var.get("valueFrom") or {}
        value: str | None
        if "fieldRef" in source:
            value = field_ref_value(pod, source["fieldRef"]["fieldPath"], pod_ip)
        elif "secretKeyRef" in source:
            value = _key_ref("secret", source["secretKeyRef"], namespace, secrets)
        elif "configMapKeyRef" in source:
            value = _key_ref("configmap", source["configMapKeyRef"], namespace, config_maps)
        elif "resourceFieldRef" in source:
            value = _resource_field(container, source["resourceFieldRef"])
        else:
            value = ""
        if value is not None:
            env[name] = value
    return env


def _resource_field(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
    return str(value) if value is not None else "0"


def referenced_objects(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The names of the Secrets and ConfigMaps the pod's containers and volumes refer to."""
    spec = pod.get("spec") or {}
    secrets: set[str] = set()
    maps: set[str] = set()
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in container.get("envFrom") or []:
            secrets.update([source["secretRef"]["name"]] if source.get("secretRef") else [])
            maps.update([source["configMapRef"]["name"]] if source.get("configMapRef") else [])
        for var in container.get("env") or []:
            value_from = var.get("valueFrom") or {}
            secrets.update([value_from["secretKeyRef"]["name"]] if value_from.get("secretKeyRef") else [])
            maps.update([value_from["configMapKeyRef"]["name"]] if value_from.get("configMapKeyRef") else [])
    for volume in spec.get("volumes") or []:
        secrets.update([volume["secret"]["secretName"]] if volume.get("secret") else [])
        maps.update([volume["configMap"]["name"]] if volume.get("configMap") else [])
    return secrets, maps


# --- volumes ----------------------------------------------------------------------------------------------


def volume_files(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    secrets: Mapping[tuple[str, str], dict[str, str]],
    config_maps: Mapping[tuple[str, str], dict[str, str]],
) -> dict[str, dict[str, str]]:
    """The files each volume mount shows: mountPath -> {relative path: content} (emptyDir: no files)."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    mounts: dict[str, dict[str, str]] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise PodSetupError("CreateContainerConfigError", f'volume "{mount["name"]}" is not in the pod spec')
        files = _volume_content(volume, namespace, secrets, config_maps)
        if sub_path := mount.get("subPath"):
            files = {name[len(sub_path) + 1:]: text for name, text in files.items() if name.startswith(sub_path + "/")}
        mounts[mount["mountPath"]] = files
    return mounts


def _volume_content(volume: Mapping[str, Any], namespace: str, secrets: Mapping[tuple[str, str], dict[str, str]],
                    config_maps: Mapping[tuple[str, str], dict[str, str]]) -> dict[str, str]:
    for kind, key, name_key, objects in (("configmap", "configMap", "name", config_maps),
                                         ("secret", "secret", "secretName", secrets)):
        source = volume.get(key)
        if source is None:
            continue
        values = objects.get((namespace, source.get(name_key, "")))
        if values is None:
            if source.get("optional"):
                return {}
            raise PodSetupError("CreateContainerConfigError", f'{kind} "{source.get(name_key)}" not found')
        items = source.get("items")
        if not items:
            return dict(values)
        return {item["path"]: values[item["key"]] for item in items if item["key"] in values}
    if "emptyDir" in volume:
        return {}
    raise PodSetupError("CreateContainerConfigError",
                        f'volume "{volume.get("name")}": the stand-in supports configMap, secret and emptyDir only')


def rewrite_paths(text: str, mounts: Mapping[str, str]) -> str:
    """Point in-container paths (mount paths, the termination log) at their local directories or files.

    One pass, so a local path that happens to start with another mount path (/tmp/...) stays as it is.
    """
    if not mounts:
        return text
    by_path = {path.rstrip("/") or "/": local.rstrip("/") for path, local in mounts.items()}
    alternatives = "|".join(re.escape(path) for path in sorted(by_path, key=len, reverse=True))
    pattern = re.compile(r"(?<![\w.\-/])(" + alternatives + r")(?=/|\b|$)")
    return pattern.sub(lambda match: by_path[match.group(1)], text)


# --- addresses ------------------------------------------------------------------------------------------


def service_hostnames(name: str, namespace: str, pod_namespace: str) -> list[str]:
    """The DNS names a pod in `pod_namespace` may use for a Service, longest first."""
    names = [f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}", f"{name}.{namespace}.svc", f"{name}.{namespace}"]
    if namespace == pod_namespace:
        names.append(name)
    return names


def _host_pattern(host: str) -> re.Pattern[str]:
    # Only where a host name is used as an address: HOST:PORT, //HOST (URLs), =HOST or @HOST ending a
    # word, the whole text, or a quoted host before a port ('("HOST", PORT)' in a Python probe);
    # never a word that merely looks like it ("hello" in a greeting).
    name = re.escape(host)
    whole = r"(?<![\w.\-/])" + name + r"(?![\w\-]|\.\w)"
    return re.compile(rf"(?:(?<=//){name}|{whole})(?::(\d+))(?![\w\-]|\.\w)"
                      rf"|(?:(?<=//)|(?<=[=@])|^){name}(?=/|\s|$)(?!\.\w)"
                      rf"|(?<=[\"']){name}(?=[\"']\s*,\s*(\d+)\b)")


def _quoted_pair(ip: str) -> re.Pattern[str]:
    return re.compile(r"([\"']" + re.escape(ip) + r"[\"']\s*,\s*)(\d+)\b")


def rewrite_addresses(text: str, hosts: Mapping[str, Endpoint]) -> str:
    """Replace `HOST` and `HOST:PORT` (Service names, pod addresses) by the local address and port."""
    for host in sorted(hosts, key=len, reverse=True):
        endpoint = hosts[host]

        def replace(match: re.Match[str], endpoint: Endpoint = endpoint) -> str:
            port = match.group(1)  # None for a bare host
            return endpoint.ip if port is None else f"{endpoint.ip}:{endpoint.local_port(int(port))}"

        text = _host_pattern(host).sub(replace, text)
        text = _quoted_pair(endpoint.ip).sub(
            lambda m, endpoint=endpoint: f"{m.group(1)}{endpoint.local_port(int(m.group(2)))}", text)
    return text


def referenced_hosts(text: str, hostnames: Iterable[str]) -> set[str]:
    """Which of `hostnames` appear in `text` as whole host names."""
    return {host for host in hostnames if _host_pattern(host).search(text)}


_PORT_FLAG = re.compile(r"(--[\w\-]*port)([= ]+)(\d+)\b")


def rewrite_port_flags(argv: list[str], ports: Mapping[int, int]) -> list[str]:
    """Point `--...port=N` / `--...port N` flags at the pod's local ports (in argv and in shell strings)."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        previous = argv[i - 1] if i else ""
        if previous.startswith("--") and previous.endswith("port") and arg.isdigit():
            out.append(str(ports.get(int(arg), int(arg))))
            continue
        out.append(_PORT_FLAG.sub(lambda m: m.group(1) + m.group(2) + str(ports.get(int(m.group(3)),
                                                                                     int(m.group(3)))), arg))
    return out


def container_ports(container: Mapping[str, Any]) -> dict[str, int]:
    """The container's declared ports by name (unnamed ones by their number as a string)."""
    return {str(p.get("name") or p["containerPort"]): int(p["containerPort"]) for p in container.get("ports") or []}


def plan_ports(container: Mapping[str, Any], fixed: Mapping[int, int], allocate: Callable[[], int]) -> dict[int, int]:
    """A local port for every declared container port: the fixed one if given, else a fresh free one."""
    return {port: fixed.get(port) or allocate() for port in container_ports(container).values()}


def service_endpoint(service: Mapping[str, Any], pod: Mapping[str, Any], pod_endpoint: Endpoint) -> Endpoint:
    """The Service's ports translated through the selected pod's local ports."""
    containers = (pod.get("spec") or {}).get("containers") or []
    named = {name: port for c in containers for name, port in container_ports(c).items()}
    ports: dict[int, int] = {}
    for port in (service.get("spec") or {}).get("ports") or []:
        target = port.get("targetPort", port["port"])
        target_port = named.get(target, 0) if isinstance(target, str) and not target.isdigit() else int(target)
        if target_port:
            ports[int(port["port"])] = pod_endpoint.local_port(target_port)
    return Endpoint(pod_endpoint.ip, ports)


def selector_matches(selector: Mapping[str, str] | None, labels: Mapping[str, str] | None) -> bool:
    """A Service's equality-based selector; an empty selector selects nothing (endpoints are managed by hand)."""
    if not selector:
        return False
    labels = labels or {}
    return all(labels.get(key) == value for key, value in selector.items())
