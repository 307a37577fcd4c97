"""Turn on Kueue's `pod` integration in a release's manifests.yaml (edited in place): the manager's
ConfigMap holds its configuration as embedded YAML, whose integrations.frameworks gets "pod"."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"


def enable_pod_integration(docs: list[dict]) -> list[dict]:
    (config_map,) = [d for d in docs if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == CONFIG_MAP]
    config = yaml.safe_load(config_map["data"][CONFIG_KEY])
    frameworks = config.setdefault("integrations", {}).setdefault("frameworks", [])
    if "pod" not in frameworks:
        frameworks.append("pod")
    config_map["data"][CONFIG_KEY] = yaml.safe_dump(config, sort_keys=False)
    return docs


def main(path: str) -> None:
    file = Path(path)
    docs = list(yaml.safe_load_all(file.read_text()))
    file.write_text(yaml.safe_dump_all([d for d in enable_pod_integration(docs) if d], sort_keys=False))


if __name__ == "__main__":
    main(sys.argv[1])
