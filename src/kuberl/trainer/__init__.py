"""The trainer: algorithms, rollout workers, learners, replay shards, storage and the `kuberl` commands."""
