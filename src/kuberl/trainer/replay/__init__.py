"""Replay memory: buffers over segment trees, n-step transitions, and the replay shard actor."""
