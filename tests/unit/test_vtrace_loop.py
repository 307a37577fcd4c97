"""IMPALA's and APPO's learner loop is one loop, for one agent and for each policy of many: train batches of
trainBatchSize env steps (whole columns of fragmentLength steps), bufferBatches of them kept while the rest wait
in the queue, each learnt from batchReuse times and then dropped."""

from __future__ import annotations

import itertools

import pytest

from kuberl.api.validation import validate_document
from kuberl.trainer.algorithms import vtrace_loop
from kuberl.trainer.algorithms.config import AlgorithmConfig
from kuberl.trainer.algorithms.vtrace_loop import VTraceLoop

BUFFER, REUSE, QUEUED, LENGTH = 2, 3, 3, 8
POLICIES = [{"name": "runners", "agents": ["runner_*"]}, {"name": "late", "agents": ["late_0"]}]


def build(multi_agent: bool):
    spec = {"algorithm": "appo",
            "env": {"id": "kuberl_testing.multi_agent_envs:relay_env" if multi_agent else "CartPole-v1"},
            # A train batch per column: one env's (one agent's) fragment of LENGTH steps.
            "config": {"seed": 1, "bufferBatches": BUFFER, "batchReuse": REUSE, "trainBatchSize": LENGTH,
                       "minIterationSeconds": 0.5},
            "rollouts": {"workers": 0, "envsPerWorker": 2, "fragmentLength": LENGTH}, "stop": {"iterations": 10}}
    if multi_agent:
        spec["multiAgent"] = {"policies": POLICIES}
    experiment = validate_document({"apiVersion": "kuberl.io/v1alpha1", "kind": "RLExperiment",
                                    "metadata": {"name": "loop"}, "spec": spec})
    return AlgorithmConfig.from_experiment(experiment).build()


def learner_figures(algo, result: dict) -> dict[str, dict]:
    """Each trained policy's learner figures: the run's own for one agent."""
    if hasattr(algo, "policy_map"):
        return {name: result["policies"][name]["learner"] for name in algo.trained}
    return {"": result["learner"]}


def loops(algo) -> dict[str, VTraceLoop]:
    return {name: algo.loops[name] for name in algo.trained} if hasattr(algo, "policy_map") else {"": algo.loop}


def widths(algo, fragment) -> dict[str, int]:
    """The columns each loop gets of a fragment."""
    if hasattr(algo, "policy_map"):
        return {name: fragment.policy_batches[name].data["rewards"].shape[1] for name in algo.trained}
    return {"": fragment.data["rewards"].shape[1]}


@pytest.mark.parametrize("multi_agent", [False, True], ids=["one-agent", "per-policy"])
def test_appo_keeps_buffer_batches_and_learns_from_each_batch_reuse_times(multi_agent: bool, monkeypatch) -> None:
    # Each reading of the loop's clock is a second on: every iteration is one pass of the loop, one update.
    monkeypatch.setattr(vtrace_loop, "perf_counter", itertools.count().__next__)
    with build(multi_agent) as algo:
        for _ in range(QUEUED):
            algo.sampler.poll(timeout=1.0)  # in-process: a fragment each
        queued = list(algo.sampler.queue)
        assert len(queued) == QUEUED and all(min(widths(algo, f).values()) >= BUFFER for f in queued)
        # Each column is a batch of REUSE updates: the buffer never runs dry, so nothing more is sampled.
        for iteration in range(1, 2 * REUSE + 1):
            figures = learner_figures(algo, algo.train())
            taken = queued[:QUEUED - len(algo.sampler.queue)]
            for name, loop in loops(algo).items():
                assert figures[name]["updates"] == 1 and figures[name]["updatesTotal"] == iteration
                assert figures[name]["bufferBatches"] == len(loop.buffer) <= BUFFER
                if iteration == 1:  # one fragment filled the buffer; the others wait in the queue
                    assert len(taken) == 1 and len(loop.buffer) == BUFFER
                # A batch leaves after REUSE updates, and every update used a batch of the columns taken.
                batches = sum(widths(algo, f)[name] for f in taken) - loop.pending_width
                assert all(batch.uses < REUSE and batch.tensors["rewards"].shape == (LENGTH, 1) for batch in loop.buffer)
                assert iteration == REUSE * (batches - len(loop.buffer)) + sum(batch.uses for batch in loop.buffer)


def test_multi_agent_impala_and_appo_run_the_single_agent_loop_with_each_policys_settings() -> None:
    with build(multi_agent=True) as algo:
        assert set(algo.loops) == {"runners", "late"}
        for name, loop in algo.loops.items():
            assert isinstance(loop, VTraceLoop) and loop.learner is algo.learners[name]
            assert (loop.params.buffer_batches, loop.params.batch_reuse) == (BUFFER, REUSE)
            assert loop.learner.target_policy is not None  # APPO's learner: its loss and target policy
