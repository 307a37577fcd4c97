"""The kuberl operator: reconciles RLExperiment resources into Ray clusters (never imports torch or ray)."""
