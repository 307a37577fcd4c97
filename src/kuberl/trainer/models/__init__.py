"""Torch networks (MLP bodies, actor-critic, Q-network), the numpy fast path and weight helpers."""
