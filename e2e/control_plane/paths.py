"""Files and names the real-server tests share."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".tools" / "bin" / "kubectl"
CRD_FILE = ROOT / "crds" / "rlexperiment.yaml"
CRD_NAME = "rlexperiments.kuberl.io"
EXAMPLE = ROOT / "examples" / "cartpole-ppo.yaml"
NAMESPACE = "kuberl-smoke"  # the bare control plane's namespace for experiments no operator reconciles
