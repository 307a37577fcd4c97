"""What a run reports in each line of results.jsonl, as far as a manifest can name it: the metrics a sweep's
objective may read. Pure and light (the operator imports it).

Every run reports RESULT_FIGURES at the top level and, under `learner`, its algorithm's LEARNER_STATS;
`evaluation` holds EVALUATION_FIGURES with spec.evaluation. The other sections are keyed by what the run
has (`replay.shard_0`, `workers.worker_1`, `policies.NAME`, `agents.ID`), so only their names are known
here. `tests/integration/test_result_metrics.py` trains each algorithm and holds these names to what it
reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from kuberl.api.algorithms import REGISTRY
from kuberl.api.field_errors import nearest

RESULT_FIGURES = ("iteration", "timesteps", "episodes", "episodeReturnMean", "envStepsPerSecond", "timeSeconds",
                  "iterationSeconds", "policyVersion", "attempt")
MULTI_AGENT_FIGURES = ("agentSteps",)
EVALUATION_FIGURES = ("iteration", "timesteps", "episodes", "returnMean", "returnStd", "returnMin", "returnMax",
                      "lengthMean", "seconds")
EVALUATION_RETURN = "evaluationReturnMean"  # the latest evaluation's return mean, as the status names it
SECTIONS = ("learner", "sampler", "workers", "placement")
OFF_POLICY_SECTIONS = ("replay",)
MULTI_AGENT_SECTIONS = ("policies", "agents")

_Q = ("updates", "updatesTotal", "targetSyncs", "loss", "meanQ")
_SHARDED = ("updatesPerSecond", "weightSyncs", "queueDepthMean", "queueEmptyFraction", "throttledSeconds",
            "busyFraction", "samplesDropped", "emptyReplies", "replayAdds", "beta", "replayRatio")
_VTRACE = ("policyLoss", "valueLoss", "entropy", "gradNorm", "meanRho", "advantageAbsMean", "updates", "updatesTotal",
           "updatesPerSecond", "lr", "waitSeconds", "bufferBatches", "policyLagMean", "policyLagMax",
           "policyLagUpdatesMean", "policyLagUpdatesMax")
LEARNER_STATS: dict[str, tuple[str, ...]] = {
    "ppo": ("policyLoss", "valueLoss", "entropy", "approxKl", "clipFraction", "updates", "updatesTotal", "epochs",
            "lr", "batchSize", "updateSeconds"),
    "dqn": (*_Q, "epsilon", "updatesThisIteration"),
    "apex-dqn": (*_Q, *_SHARDED),
    "impala": _VTRACE,
    "appo": (*_VTRACE, "clipFraction"),
    "sac": ("criticLoss", "actorLoss", "alphaLoss", "meanQ", "entropy", "updates", "updatesTotal", "alpha",
            "targetEntropy", "updatesThisIteration", *_SHARDED),
}


def reported_metrics(algorithm: str, *, evaluation: bool, multi_agent: bool) -> list[str]:
    """The metrics a run names in full: top-level figures, learner.STAT, evaluation.FIGURE."""
    names = [*RESULT_FIGURES, *(MULTI_AGENT_FIGURES if multi_agent else ())]
    names += [f"learner.{stat}" for stat in LEARNER_STATS[algorithm]]
    if evaluation:
        names += [EVALUATION_RETURN, *(f"evaluation.{figure}" for figure in EVALUATION_FIGURES)]
    return names


def metric_error(metric: str, algorithm: str, *, evaluation: bool, multi_agent: bool) -> str | None:
    """Why `metric` is not something a run of `algorithm` reports (None: it is, or may be). `multi_agent`: the
    env may be a PettingZoo one (its runs add per-policy and per-agent sections)."""
    if metric == EVALUATION_RETURN and evaluation:
        return None
    head, _, rest = metric.partition(".")
    sections = [*SECTIONS, *(OFF_POLICY_SECTIONS if REGISTRY[algorithm].off_policy else ()),
                *(MULTI_AGENT_SECTIONS if multi_agent else ()), *(("evaluation",) if evaluation else ())]
    known = reported_metrics(algorithm, evaluation=evaluation, multi_agent=multi_agent)
    if head == "evaluation" and not evaluation or metric == EVALUATION_RETURN:
        return f"{metric!r} is reported only with spec.template.evaluation"
    if not rest and metric in known:
        return None
    if rest and head in sections:
        if head == "learner" and rest.rpartition(".")[2] not in LEARNER_STATS[algorithm]:
            return _unknown(metric, f"a statistic the {algorithm} learner reports", "learner.",
                            LEARNER_STATS[algorithm])
        if head == "evaluation" and rest not in EVALUATION_FIGURES:
            return _unknown(metric, "a figure of an evaluation", "evaluation.", EVALUATION_FIGURES)
        return None
    return _unknown(metric, f"a result that {algorithm} reports", "", known)


def _unknown(metric: str, what: str, prefix: str, names: Sequence[str]) -> str:
    """Why `metric` is refused, with the nearest of `names` (under `prefix`), or the names themselves."""
    match = nearest(metric.removeprefix(prefix), list(names))
    hint = f"did you mean {prefix + match!r}?" if match else f"it reports {', '.join(prefix + n for n in names)}"
    return f"{metric!r} is not {what} ({hint})"
