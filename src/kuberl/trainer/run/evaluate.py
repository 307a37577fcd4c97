"""`kuberl evaluate`: run a checkpoint's greedy policy, locally, from a local or S3 checkpoint."""

from __future__ import annotations

from kuberl.api.validation import fail, load_manifest


def evaluate_checkpoint(uri: str, *, episodes: int = 10, endpoint: str | None = None, seed: int | None = None) -> str:
    """Load the checkpoint (a run root or one checkpoint directory), play `episodes`, and describe the returns."""
    from kuberl.trainer.algorithms.config import algorithm_config_for
    from kuberl.trainer.storage.checkpoints import load_checkpoint

    if episodes < 1:
        raise fail("--episodes", "must be >= 1")
    files, info = load_checkpoint(uri, endpoint=endpoint)
    if "experiment.yaml" not in files:
        raise fail("CHECKPOINT", f"{info.uri} has no experiment.yaml; it was not written by kuberl train")
    overrides = ["rollouts.workers=0"]
    if seed is not None:
        overrides.append(f"config.seed={seed}")
    experiment = load_manifest(files["experiment.yaml"].decode(), overrides=overrides, source=f"{info.uri}/experiment.yaml")
    algo = algorithm_config_for(experiment).build()
    try:
        algo.set_state(files)
        stats = algo.evaluate(episodes=episodes)
    finally:
        algo.stop()
    returns = stats.get("returns") or []
    lines = [
        f"checkpoint {info.uri} (iteration {info.iteration}, {info.timesteps:,} steps)",
        f"{experiment.spec.algorithm} on {experiment.spec.env.id}: {len(returns) or episodes} episodes, greedy policy",
        f"return mean {stats.get('episodeReturnMean', float('nan')):.2f}"
        + (f", min {min(returns):.2f}, max {max(returns):.2f}" if returns else ""),
    ]
    if "episodeLengthMean" in stats:
        lines.append(f"length mean {stats['episodeLengthMean']:.1f}")
    return "\n".join(lines)
