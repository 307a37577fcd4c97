"""No storage credential ever appears outside its Secret.

Distinctive fake S3 credentials go into a Secret, and a distinctive W&B API key into another (W&B in
offline mode, so nothing leaves the machine, with its run files copied into the run's S3 storage); the real
Kopf operator (at debug verbosity, which
logs every body it handles) builds the experiment's children from it, and a real `kuberl train` of the
ConfigMap's experiment.yaml runs with those credentials in its environment against moto's S3 server.
Then everything a user or an attacker could read is searched for the values (and their base64):
the RLExperiment (spec, status, metadata), every event, the operator's log, every child object but
the Secret itself, the trainer's output, and every object the run wrote to S3 (results.jsonl,
experiment.yaml, checkpoint manifests and files, gzip episode traces, the run record, W&B's run files). The
Secret itself is searched too, as the control that proves the search finds what it looks for.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kuberl_testing.fault_figures import report_figures
from kuberl_testing.operator_harness import OperatorHarness, experiment_body, wait_for
from kuberl_testing.s3server import S3Server

NAMESPACE = "creds"
BUCKET = "kuberl-leak-test"


class VerboseOperatorHarness(OperatorHarness):
    def start_operator(self) -> None:
        from kopf.testing import KopfRunner

        self.runner = KopfRunner(["run", "--standalone", "--verbose", "-m", "kuberl.operator.handlers",
                                  "-n", NAMESPACE], timeout=120, reraise=False)
        self.runner.__enter__()


def secrets() -> dict[str, str]:
    tag = uuid.uuid4().hex
    return {"AWS_ACCESS_KEY_ID": f"AKIALEAK{tag[:12].upper()}",
            "AWS_SECRET_ACCESS_KEY": f"leak/{tag}/secret+key",
            "AWS_SESSION_TOKEN": f"leak-session-{tag[::-1]}"}


def wandb_key() -> str:
    return f"wandbleak{uuid.uuid4().hex}"[:40]


def needles(values: dict[str, str]) -> list[bytes]:
    """Each value as text and as base64 (how a Secret's data, or a careless dump of it, would carry it)."""
    out = []
    for value in values.values():
        out += [value.encode(), base64.b64encode(value.encode())]
    return out


def found(blob: bytes, values: dict[str, str]) -> list[str]:
    return [n.decode() for n in needles(values) if n in blob]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_credentials_appear_nowhere_but_their_secret(s3_server: S3Server, tmp_path: Path):
    if not s3_server.running:
        s3_server.start()
    s3_server.create_bucket(BUCKET)
    s3_creds, api_key = secrets(), wandb_key()
    creds = {**s3_creds, "WANDB_API_KEY": api_key}
    with VerboseOperatorHarness([NAMESPACE]) as harness:
        # Unparsed: the client logs parsed response bodies at debug level, and this process's log is the operator's.
        harness.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "s3-credentials"}, "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in s3_creds.items()}}, _preload_content=False)
        harness.core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "wandb"}, "data": {
            "api-key": base64.b64encode(api_key.encode()).decode()}}, _preload_content=False)
        body = experiment_body(
            "leak", workers={"replicas": 0}, rollouts={"workers": 0, "envsPerWorker": 4, "fragmentLength": 64},
            stop={"timesteps": 512}, checkpoint={"everyIterations": 1}, traces={"enabled": True, "steps": True},
            storage={"uri": f"s3://{BUCKET}/runs", "endpoint": s3_server.endpoint,
                     "secretRef": {"name": "s3-credentials"}},
            tracking={"wandb": {"project": "leak", "mode": "offline",
                                "apiKeySecretRef": {"name": "wandb", "key": "api-key"}}})
        harness.apply(NAMESPACE, body)
        head = wait_for(lambda: harness.pods(NAMESPACE).get("leak-head"), what="the head pod")
        env = {e["name"]: e for e in head["spec"]["containers"][0]["env"]}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "s3-credentials"
        assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}

        # The trainer, as the head pod would run it, with the Secret's values in its environment.
        (config_map,) = harness.objects(NAMESPACE, "configmaps")
        manifest = tmp_path / "experiment.yaml"
        manifest.write_text(config_map["data"]["experiment.yaml"])
        trainer_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        trainer_env.update(creds, AWS_REGION="us-east-1", OMP_NUM_THREADS="1", KUBERL_LOG_LEVEL="debug",
                           WANDB_BASE_URL="http://127.0.0.1:9", WANDB__DISABLE_STATS="true",
                           WANDB__DISABLE_MACHINE_INFO="true", WANDB_DATA_DIR=str(tmp_path / "wandb-data"),
                           WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"),
                           WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"))
        trainer = subprocess.run([sys.executable, "-m", "kuberl.cli", "train", "-f", str(manifest)],
                                 capture_output=True, timeout=180, env=trainer_env, cwd=tmp_path)
        assert trainer.returncode == 0, trainer.stderr.decode()[-3000:]

        summary = {"result": "Succeeded", "reason": "StopCriterion", "message": "stop.timesteps reached"}
        harness.set_pod_status(NAMESPACE, "leak-head", "Succeeded", exit_code=0, message=summary)
        wait_for(lambda: harness.status(NAMESPACE, "leak").get("phase") == "Succeeded", what="Succeeded")

        runner = harness.runner
        harness.stop_operator()  # Kopf's runner hands over its log once stopped
        operator_log = runner.output
        places: dict[str, bytes] = {
            "rlexperiment": json.dumps(harness.get(NAMESPACE, "leak")).encode(),
            "events": json.dumps(harness.events(NAMESPACE)).encode(),
            "operator log": operator_log.encode(),
            "trainer output": trainer.stdout + trainer.stderr,
        }
        for group, plural in (("", "pods"), ("", "configmaps"), ("", "services"),
                              ("networking.k8s.io", "networkpolicies")):
            places[plural] = json.dumps(harness.objects(NAMESPACE, plural, group)).encode()
        token_secret = [s for s in harness.objects(NAMESPACE, "secrets") if s["metadata"]["name"] == "leak-ray-token"]
        places["ray token secret"] = json.dumps(token_secret).encode()
        credentials_secret = json.dumps([s for s in harness.objects(NAMESPACE, "secrets")
                                         if s["metadata"]["name"] in ("s3-credentials", "wandb")]).encode()

    client = s3_server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    for key in keys:
        data = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        places[f"s3://{BUCKET}/{key}"] = gzip.decompress(data) if key.endswith(".gz") else data

    # The run really happened, with those credentials, and every kind of artifact is among the places.
    assert any(k.endswith("results.jsonl") for k in keys), keys
    assert any(k.endswith("manifest.json") for k in keys) and any("/traces/" in k for k in keys), keys
    assert any("/run-record/" in k for k in keys) and any(k.endswith(".wandb") for k in keys), keys
    assert "leak" in operator_log and len(operator_log) > 1000  # the debug log was captured
    assert found(credentials_secret, creds), "control: the search must find the values in their own Secret"

    leaks = {place: found(blob, creds) for place, blob in places.items() if found(blob, creds)}
    assert leaks == {}, f"credentials leaked into: {sorted(leaks)}"
    report_figures("credentials in a Secret", places_searched=len(places), s3_objects=len(keys),
                   bytes_searched=sum(len(b) for b in places.values()), leaks=0)
