"""kuberl: distributed reinforcement learning on Kubernetes, and on a laptop."""

__version__ = "0.1.0"
