"""`kuberl evaluate`: a checkpoint's algorithm, rebuilt locally from a local or S3 checkpoint, plays
evaluation episodes. `load_algorithm` rebuilds it for `kuberl export` too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kuberl.api.field_errors import ManifestError, fail
from kuberl.api.validation import load_stored_manifest

if TYPE_CHECKING:
    from kuberl.api.types import RLExperiment

NO_STOP = 2**31 - 1  # the stop criterion a checkpoint's experiment without one is read with


def load_algorithm(uri: str, *, endpoint: str | None = None, seed: int | None = None) -> tuple[Any, Any]:
    """The algorithm of a checkpoint (a run root or one checkpoint directory) with its state, sampling in
    its own process; and the checkpoint's info. The caller stops the algorithm."""
    from kuberl.trainer.algorithms.config import algorithm_config_for
    from kuberl.trainer.storage.checkpoints import load_checkpoint
    from kuberl.trainer.storage.run import SPEC

    files, info = load_checkpoint(uri, endpoint=endpoint)
    if SPEC not in files:
        raise fail("CHECKPOINT", f"{info.uri} has no experiment.yaml, so its experiment is unknown (kuberl train and "
                                 "Algorithm.save() write one; an older kuberl's save() did not)")
    overrides = ["rollouts.workers=0"]
    if seed is not None:
        overrides.append(f"config.seed={seed}")
    experiment = _stored_experiment(files[SPEC].decode(), overrides, f"{info.uri}/{SPEC}")
    algo = algorithm_config_for(experiment).build()
    try:
        algo.set_state(files)
    except BaseException:
        algo.stop()
        raise
    return algo, info


def _stored_experiment(text: str, overrides: list[str], source: str) -> RLExperiment:
    """A checkpoint's experiment. One that `Algorithm.save()` wrote from a Python loop may have no stop criteria
    (the loop decided when to stop): it gets one here, as playing and exporting never train."""
    try:
        return load_stored_manifest(text, overrides=overrides, source=source)
    except ManifestError as exc:
        if any(error.path != "spec.stop" for error in exc.errors):
            raise
    return load_stored_manifest(text, overrides=[*overrides, f"stop.iterations={NO_STOP}"], source=source)


def evaluate_checkpoint(uri: str, *, episodes: int = 10, endpoint: str | None = None, seed: int | None = None) -> str:
    """Load the checkpoint (a run root or one checkpoint directory), play `episodes`, and describe the returns."""
    if episodes < 1:
        raise fail("--episodes", "must be >= 1")
    algo, info = load_algorithm(uri, endpoint=endpoint, seed=seed)
    try:
        stats = algo.evaluate(episodes=episodes)
    finally:
        algo.stop()
    returns = stats.get("returns") or []
    spec = algo.spec
    lines = [
        f"checkpoint {info.uri} (iteration {info.iteration}, {info.timesteps:,} steps)",
        f"{spec.algorithm} on {spec.env.id}: {len(returns) or episodes} episodes, greedy policy",
        f"return mean {stats.get('episodeReturnMean', float('nan')):.2f}"
        + (f", min {min(returns):.2f}, max {max(returns):.2f}" if returns else ""),
    ]
    if "episodeLengthMean" in stats:
        lines.append(f"length mean {stats['episodeLengthMean']:.1f}")
    if stats.get("agents"):  # a multi-agent run: the return above is the team's, the sum over its agents
        lines.append("agents: " + ", ".join(f"{agent} {value:.2f}" for agent, value in stats["agents"].items()))
    return "\n".join(lines)
