"""The bad-input table (kuberl_testing.bad_inputs.CASES) sent to a real kube-apiserver 1.20 with
`kubectl apply --dry-run=server`, against `kuberl validate --cluster` on the same manifests.

Where the schema can decide (`schema=True`), both refuse; the cases only code can decide
(`schema=False`: cross-field rules, hyperparameters in the open `spec.config` map, env checks, map
keys, int-or-string quantities given as numbers) pass the server and are refused by `kuberl
validate` alone. Three layers answer for kubectl: the JSON encoding (inf and nan cannot be sent),
kubectl's own check against the server's OpenAPI (1.20 has no server-side field validation: the
server prunes unknown fields, kubectl refuses them first), and the server's structural schema.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import KUBECTL, NAMESPACE

from kuberl import cli
from kuberl_testing.bad_inputs import CASES, BadInput
from kuberl_testing.controlplane import ControlPlane

# Not sent: kube-apiserver 1.20 spends more than its 34 s request timeout on 80 levels of nesting
# under spec.env.config and answers 504 (it never stores it); `kuberl validate` refuses it at once.
TOO_SLOW_FOR_THE_SERVER = {"hostile-env.config-a_a"}


def _name(index: int) -> str:
    return f"case-{index}"


def _kubectl(plane: ControlPlane, path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(plane.kubeconfig), "apply", "--dry-run=server",
                           "-n", NAMESPACE, *flags, "-f", str(path)], capture_output=True, text=True, timeout=300)


def _server_verdicts(plane: ControlPlane, tmp_path: Path, cases: dict[str, BadInput]) -> dict[str, str]:
    """Object name -> kubectl's output for it, every JSON-encodable case in one `kubectl apply` of a
    List (kubectl's client-side validation would stop the whole file at its first finding, so it is
    off here and asked separately below)."""
    documents = {name: case.manifest(name) for name, case in cases.items()}
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(documents.values())}))
    result = _kubectl(plane, path, "--validate=false")
    verdicts: dict[str, str] = {}
    for name, document in documents.items():
        stored_name = document["metadata"]["name"]
        created = f"rlexperiment.kuberl.io/{stored_name} created (server dry run)"
        refused = [line for line in result.stderr.splitlines() if f'"{stored_name}"' in line]
        verdicts[name] = created if created in result.stdout else "\n".join(refused) or "(no answer)"
    return verdicts


def _refused(verdict: str) -> bool:
    return "created (server dry run)" not in verdict


def _kuberl_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: BadInput) -> tuple[int, str]:
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(case.manifest(), allow_unicode=True, width=1 << 30))
    code = cli.main(["validate", "--cluster", "-f", str(path)])
    return code, capsys.readouterr().err


def _encodable(case: BadInput) -> bool:
    try:
        json.dumps(case.manifest(), allow_nan=False)
    except ValueError:
        return False
    return True


def test_kubectl_dry_run_on_the_server_agrees_with_kuberl_validate(
        control_plane: ControlPlane, crd_applied: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sent = {_name(i): c for i, c in enumerate(CASES) if c.id not in TOO_SLOW_FOR_THE_SERVER}
    encodable = {name: case for name, case in sent.items() if _encodable(case)}
    verdicts = _server_verdicts(control_plane, tmp_path, encodable)
    # Accepted by the server though the schema should refuse: unknown fields, which 1.20 prunes;
    # kubectl's check against the published schema refuses them (its default, --validate=true).
    for name in [n for n, case in encodable.items() if case.schema and not _refused(verdicts[n])]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(encodable[name].manifest(name)))
        result = _kubectl(control_plane, path)
        verdicts[name] = result.stdout if result.returncode == 0 else result.stderr.strip()
    for name in set(sent) - set(encodable):  # inf and nan: YAML only; kubectl cannot turn them into JSON
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(sent[name].manifest(name)))
        result = _kubectl(control_plane, path)
        verdicts[name] = result.stdout if result.returncode == 0 else result.stderr.strip()

    disagreements = []
    for name, case in sent.items():
        if _refused(verdicts[name]) != case.schema:
            disagreements.append(f"{case.id}: the table says schema={case.schema}, kubectl: {verdicts[name][:300]}")
        code, err = _kuberl_validate(tmp_path, capsys, case)
        if code != 2:
            disagreements.append(f"{case.id}: kuberl validate exited {code} (2 expected): {err[:300]}")
    assert not disagreements, "\n".join(disagreements)

    refused_by_server = [case.id for name, case in sent.items() if _refused(verdicts[name])]
    code_only = sorted(case.id for name, case in sent.items() if not _refused(verdicts[name]))
    print(f"\n{len(refused_by_server)} cases refused by kubectl/the server and kuberl validate; "
          f"{len(code_only)} only by kuberl validate: {', '.join(code_only)}")
    assert refused_by_server and code_only
    for name in sent:  # the refusals are the server's or kubectl's words, not a transport failure
        verdict = verdicts[name]
        assert not _refused(verdict) or re.search(r"invalid|Invalid|unknown field|ValidationError|error", verdict), \
            (name, verdict)
