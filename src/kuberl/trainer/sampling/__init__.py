"""Sampling: envs, observation filters, the rollout worker, the worker set and the policies workers run."""
