"""Hyperparameter sweeps: the search as pure functions over a durable state (search.py, pbt.py),
shared by `kuberl sweep` (local.py) and the operator's RLSweep handlers.

Nothing here keeps state between calls: Optuna's study is rebuilt from the recorded trials each
time (search.py), so the same code continues a sweep after a process or operator restart.
"""
