"""Manifest text as kuberl reads and writes it: one bounded YAML document (no alias bombs, no megabyte
manifests), numbers in exponent form read as YAML 1.2 and kubectl read them, and `--set` overrides."""

from __future__ import annotations

import re
from typing import Any

import yaml

from kuberl.api.field_errors import fail

MAX_MANIFEST_BYTES = 1_000_000
MAX_YAML_NODES = 100_000


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias bombs ("billion laughs") by counting expanded nodes, and reads numbers in
    exponent form as YAML 1.2 (and so kubectl) does: PyYAML's YAML 1.1 resolver takes `3e-4`, `1e5` and
    `1.0e5` for strings, as it wants a dot and a signed exponent."""

    def construct_document(self, node: yaml.Node) -> Any:
        _count_nodes(node, budget=[MAX_YAML_NODES])
        return super().construct_document(node)


class _NumberQuotingDumper(yaml.SafeDumper):
    """SafeDumper that quotes a string load_yaml would read back as a number (`"1e5"`, `"3e-4"`)."""


for _resolver_class in (_BoundedLoader, _NumberQuotingDumper):
    _resolver_class.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$"),
        list("-+.0123456789"))


def dump_yaml(document: Any, **options: Any) -> str:
    """YAML as kuberl writes it (a run's experiment.yaml, the operator's ConfigMap), read back the same by
    load_yaml."""
    text: str = yaml.dump(document, Dumper=_NumberQuotingDumper, **options)
    return text


def load_yaml(text: str) -> Any:
    """One YAML document (a manifest's, a --set value's) as kuberl reads every manifest; raises
    yaml.YAMLError."""
    return yaml.load(text, Loader=_BoundedLoader)


def _count_nodes(node: yaml.Node, budget: list[int]) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise fail("", f"manifest too large: more than {MAX_YAML_NODES} YAML nodes once aliases are expanded")
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.extend((key, value))


def parse_yaml(text: str, source: str = "manifest") -> dict[str, Any]:
    """Parse one YAML document into a mapping, with the line of any syntax error."""
    if len(text.encode("utf-8", errors="replace")) > MAX_MANIFEST_BYTES:
        raise fail("", f"{source}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        docs = [d for d in yaml.load_all(text, Loader=_BoundedLoader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise fail("", f"{source}: invalid YAML at {where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise fail("", f"{source}: invalid YAML: {exc}") from None
    except RecursionError:
        raise fail("", f"{source}: nested too deeply") from None
    if len(docs) != 1:
        raise fail("", f"{source}: expected exactly one YAML document, found {len(docs)}")
    if not isinstance(docs[0], dict):
        raise fail("", f"{source}: expected a mapping (apiVersion, kind, metadata, spec)")
    return docs[0]


def apply_overrides(doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set path=value` overrides; paths are relative to `spec` unless they start with a top-level key."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise fail("--set", f"{item!r}: expected key=value, such as rollouts.workers=2")
        parts = key.split(".")
        if parts[0] not in ("spec", "metadata", "apiVersion", "kind"):
            parts = ["spec", *parts]
        try:
            value = load_yaml(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = doc
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise fail(".".join(parts[: i + 1]), f"--set {key}: is not a mapping")
            node = child
        node[parts[-1]] = value
    return doc
