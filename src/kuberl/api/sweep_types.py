"""The RLSweep resource: a hyperparameter search over RLExperiments.

`crds/rlsweep.yaml` is generated from these models (`make crds`), as the RLExperiment CRD is from
types.py. `template` is an RLExperiment spec; every trial is that spec with the sampled values set
at the parameters' paths. Cross-field checks (does a path exist in the template, does a sampled
value pass the template's own validation) live in sweep_validation.py.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import Field, WithJsonSchema

from kuberl.api.base import StrictModel
from kuberl.api.types import (
    API_VERSION,
    GROUP,
    VERSION,
    Condition,
    CustomResource,
    Phase,
    RLExperimentSpec,
)

__all__ = ["API_VERSION", "GROUP", "VERSION"]

KIND: Final = "RLSweep"
PLURAL = "rlsweeps"
SINGULAR = "rlsweep"
SHORT_NAMES = ["rls"]

# Paths a parameter may set, relative to the template: hyperparameters, rollouts, the env's kwargs.
PARAMETER_PATH_PATTERN = r"^(config|rollouts|env\.config)(\.[A-Za-z_][A-Za-z0-9_]*)+$"
METRIC_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
MAX_TRIALS = 1000  # the trials' records live in the sweep's status; 1000 of them stay far below etcd's limit

SearchAlgorithm = Literal["grid", "random", "tpe", "pbt"]
SEARCH_ALGORITHMS: tuple[str, ...] = SearchAlgorithm.__args__  # type: ignore[attr-defined]
# A categorical value: a scalar of any JSON type (the structural schema cannot say "any scalar").
Scalar = Annotated[str | bool | int | float, WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True})]


# A sweep's phases are the experiment's (one vocabulary, kuberl.api.types.Phase); a sweep is never Starting.
SweepPhase = Phase


class TrialState(StrEnum):
    """Optuna's trial states, named as a Katib or Ray Tune user reads them."""

    PENDING = "Pending"  # proposed and recorded; its run is not started yet
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    PRUNED = "Pruned"  # stopped early by the pruner: its intermediate results lagged
    FAILED = "Failed"


FINISHED_TRIAL_STATES = frozenset({TrialState.SUCCEEDED, TrialState.PRUNED, TrialState.FAILED})


class SweepParameter(StrictModel):
    path: str = Field(  # the pattern is the CRD's; validation says what a wrong path means, with the nearest right one
        max_length=253, json_schema_extra={"pattern": PARAMETER_PATH_PATTERN},
        description="Where the value goes in the template: config.NAME (hyperparameters), rollouts.NAME or "
        "env.config.NAME, in the manifest's camelCase.",
    )
    type: Literal["float", "int", "categorical"] = Field(
        description="float and int: a range (low, high, log, step); categorical: a list of values.")
    low: float | None = Field(None, description="float and int: the smallest value.")
    high: float | None = Field(None, description="float and int: the largest value (inclusive).")
    log: bool = Field(False, description="float and int: sample on a log scale (needs low > 0).")
    step: float | None = Field(
        None, gt=0, description="float and int: the grid's spacing; for int the default is 1. grid search needs it "
        "for float parameters.",
    )
    values: list[Scalar] | None = Field(None, min_length=1, max_length=1000,
                                        description="categorical: the values to choose from.")


class ObjectiveSpec(StrictModel):
    metric: str = Field(
        "episodeReturnMean", max_length=128, pattern=METRIC_PATTERN,
        description="A reported result: episodeReturnMean, evaluationReturnMean (needs template.evaluation) or any "
        "numeric key of results.jsonl (dots reach into nested ones: learner.entropy).",
    )
    goal: Literal["maximize", "minimize"] = Field("maximize", description="Whether a larger or a smaller "
                                                   "metric is better.")
    target: float | None = Field(None, description="End the sweep (Succeeded) once a finished trial reaches this.")


class PBTSpec(StrictModel):
    population_size: int = Field(4, ge=2, le=256, description="Trials trained side by side.")
    perturbation_interval: int = Field(
        ge=1, description="Env steps between exploit/explore steps: each trial trains this many, then the bottom "
        "quantile copies a top trial's checkpoint and perturbs its hyperparameters.",
    )
    quantile_fraction: float = Field(0.25, gt=0, le=0.5,
                                     description="The fraction of the population that exploits (and is copied).")
    resample_probability: float = Field(
        0.25, ge=0, le=1, description="Per parameter: resample from its range instead of multiplying by 0.8 or 1.2.")


class SearchSpec(StrictModel):
    algorithm: SearchAlgorithm = Field("tpe", description=" | ".join(SEARCH_ALGORITHMS))
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description="Seeds the sampler: the same sweep proposes the "
                             "same trials.")
    startup_trials: int = Field(5, ge=0, le=1000, description="tpe: random trials before the model takes over.")
    pbt: PBTSpec | None = Field(None, description="Population-based training (algorithm: pbt).")


class EarlyStoppingSpec(StrictModel):
    algorithm: Literal["none", "median", "asha"] = Field(
        "none", description="median: stop a trial whose best intermediate value is worse than the median of the "
        "others' at the same step (Optuna's MedianPruner); asha: asynchronous successive halving (Optuna's "
        "SuccessiveHalvingPruner): at each rung keep the top 1/reductionFactor.",
    )
    interval: int = Field(
        ge=1, description="Env steps between intermediate results: a trial reports its objective metric each time "
        "its timesteps cross a multiple of this.",
    )
    min_steps: int = Field(0, ge=0, description="No trial is stopped before this many env steps (median: "
                           "warm-up; asha: the first rung).")
    startup_trials: int = Field(2, ge=0, le=1000, description="median: no pruning until this many trials finished.")
    reduction_factor: int = Field(3, ge=2, le=100, description="asha: keep 1/reductionFactor at each rung.")


class RLSweepSpec(StrictModel):
    template: RLExperimentSpec = Field(description="The RLExperiment spec every trial starts from.")
    parameters: list[SweepParameter] = Field(
        min_length=1, max_length=64,
        description="The hyperparameters searched: each a path in the template and the values it may take.")
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec,
                                     description="The metric a trial is judged by, and which way is better.")
    search: SearchSpec = Field(default_factory=SearchSpec, description="How the next trials are proposed.")
    early_stopping: EarlyStoppingSpec | None = Field(None, description="Stop poor trials from their intermediate "
                                                     "results.")
    max_trials: int = Field(10, ge=1, le=MAX_TRIALS, description="Trials in all (pbt: the population size, "
                            "each trial a member).")
    parallelism: int = Field(1, ge=1, le=256, description="Trials running at once (pbt: members' runs of a round at "
                             "once).")
    seeds_per_trial: int = Field(
        1, ge=1, le=16, description="Runs per trial with config.seed = seed, seed+1, ...; the trial's value is "
        "their mean. A trial starts them all at once, each in a slot of parallelism, which must be at least "
        "this.",
    )
    max_failed_trials: int | None = Field(
        None, ge=0, le=MAX_TRIALS, description="End the sweep as Failed once more trials than this failed; unset: "
        "failures only count.")
    suspend: bool = Field(False, description="True suspends the running trials and proposes none; false resumes.")


class TrialRecord(StrictModel):
    """One trial as the sweep remembers it: enough to rebuild the search after a restart."""

    number: int = Field(ge=0)
    name: str = Field(description="The trial's run (an RLExperiment locally and in a cluster).")
    params: dict[str, Any] = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    state: TrialState = Field(strict=False)
    value: float | None = Field(None, description="The objective at the end (mean over the seeds).")
    intermediate: list[Annotated[list[float], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, description="[step, value] at each early-stopping interval, the last one kept at most "
        "every interval.")
    message: str | None = None
    pruner_state: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="What the pruner noted on this trial (Optuna's successive-halving rungs), kept to rebuild it.")
    restored_from: str | None = Field(None, description="pbt: the checkpoint this trial's latest segment started "
                                      "from.")
    seeds: list[int] = Field(default_factory=list, description="config.seed of the trial's runs: one per seed of "
                             "seedsPerTrial (the template's, if it sets one, for a single seed); pbt: one per round so "
                             "far, each member's and round's own.")


class BestTrial(StrictModel):
    number: int
    name: str
    params: dict[str, Any] = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    value: float


class RLSweepStatus(StrictModel):
    phase: SweepPhase | None = Field(None, strict=False)
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    trials_succeeded: int = 0
    trials_running: int = 0
    trials_pruned: int = 0
    trials_failed: int = 0
    best: BestTrial | None = None
    trials: list[TrialRecord] = Field(default_factory=list, description="Every trial proposed so far, in order: the "
                                      "durable search state.")
    pbt_round: int | None = Field(None, ge=0, description="pbt: the round the population trains now (its exploit/explore "
                           "steps done); each member's run in it is TRIAL-rNN.")
    message: str | None = None
    start_time: str | None = None
    completion_time: str | None = None


class RLSweep(CustomResource):
    kind: Literal["RLSweep"] = KIND
    spec: RLSweepSpec
    status: RLSweepStatus | None = None
