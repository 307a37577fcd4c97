"""Algorithm hyperparameters: what `spec.config` may hold for each algorithm.

The same models back the Python API's `.training(...)`, so YAML and Python use
the same names (camelCase in YAML, snake_case in Python). Defaults solve
CartPole-v1, Acrobot-v1 and Pendulum-v1 without tuning; a manifest run by `kuberl train` gets, over
them, the set for its kind of task (continuous control, images: `kuberl.api.defaults`).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from kuberl.api.base import StrictModel

# Units per hidden layer; the bound keeps a typo (1000000) from asking for terabytes of weights.
LayerWidth = Annotated[int, Field(ge=1, le=4096)]
# One conv layer: [output channels, kernel size, stride].
ConvLayer = Annotated[list[Annotated[int, Field(ge=1, le=1024)]], Field(min_length=3, max_length=3)]
NATURE_CONV: list[list[int]] = [[32, 8, 4], [64, 4, 2], [64, 3, 1]]


class ModelParams(StrictModel):
    """The encoder for image observations (uint8 Box [C, H, W] or [H, W, C], such as stacked frames)."""

    conv: list[ConvLayer] = Field(
        default_factory=lambda: [list(layer) for layer in NATURE_CONV], min_length=1, max_length=8,
        description="Conv layers as [channels, kernel, stride], each followed by ReLU; default the Nature DQN stack.",
    )
    hidden: list[LayerWidth] = Field(
        default_factory=lambda: [512], max_length=4, description="Dense ReLU layers after the conv stack."
    )


# annealLr's horizon apart from the run's own budget: a PBT member's run covers one round, its schedule the sweep.
ANNEAL_TIMESTEPS = ("The env steps annealLr decays the rate over, counted from the run's first step (a run restored "
                    "from a checkpoint counts on from its steps); default stop.timesteps. A PBT sweep sets it to "
                    "its budget (template.stop.timesteps), so a member's rate falls once over all its rounds.")


class CommonParams(StrictModel):
    # A manifest name an algorithm inherits but replaces with others: the key is refused with this hint.
    not_read: ClassVar[dict[str, str]] = {}

    seed: int | None = Field(None, ge=0, description="Seeds envs, torch and numpy; runs with one seed repeat.")
    lr: float = Field(3e-4, gt=0, le=1.0, description="The optimizer's (Adam's) learning rate.")
    gamma: float = Field(0.99, ge=0, le=1.0, description="Discount factor of future rewards.")
    hidden: list[LayerWidth] = Field(default_factory=lambda: [64, 64], min_length=1, max_length=8,
                                     description="MLP widths for vector observations.")
    model: ModelParams = Field(default_factory=ModelParams,
                               description="The conv encoder, chosen for image observations; vectors use hidden.")
    activation: Literal["tanh", "relu"] = Field("tanh", description="The MLP's activation function.")
    grad_clip: float | None = Field(0.5, gt=0, description="Global-norm clip of the gradients; null: none.")
    observation_filter: Literal["none", "mean_std"] = Field(
        "none", description="mean_std: running mean/std normalisation, synced from workers each iteration."
    )


class PPOParams(CommonParams):
    lr: float = Field(2e-3, gt=0, le=1.0)
    gae_lambda: float = Field(0.95, ge=0, le=1.0, description="GAE's lambda: 0 is one-step TD, 1 the Monte Carlo "
                              "return.")
    clip_param: float = Field(0.2, gt=0, description="PPO's surrogate clip of the probability ratio.")
    vf_clip_param: float | None = Field(10.0, gt=0, description="Value clipping range; null disables it.")
    vf_coeff: float = Field(0.5, ge=0, description="Weight of the value loss in the total loss.")
    entropy_coeff: float = Field(0.0, ge=0, description="Weight of the entropy bonus in the total loss.")
    num_epochs: int = Field(8, ge=1, le=100, description="Passes over each sample batch.")
    minibatch_size: int = Field(256, ge=1, description="Transitions per gradient step within an epoch.")
    normalize_advantages: bool = Field(True, description="Normalise the advantages of each minibatch to mean 0, "
                                       "std 1.")
    normalize_rewards: bool = Field(
        False, description="Divide each reward by the running std of the discounted return and clip it to +-10, as "
        "CleanRL's continuous-control PPO does; the statistics are the learner's, kept in checkpoints, and episode "
        "returns stay raw. On in the continuous-control defaults."
    )
    anneal_lr: bool = Field(
        True, description="Linear learning-rate decay to 0 over annealTimesteps (default stop.timesteps; none "
        "without either), as CleanRL's PPO does. On by default: on Acrobot-v1 the worst of two seeds ended at -80.2 "
        "annealed, -82.9 held constant."
    )
    anneal_timesteps: int | None = Field(None, ge=1, description=ANNEAL_TIMESTEPS)
    target_kl: float | None = Field(None, gt=0, description="Stop the epoch loop early past this KL.")


class DQNParams(CommonParams):
    # CleanRL dqn.py's settings (its MSE loss, target sync every 500 env steps = 50 updates, uniform replay),
    # with epsilon reaching 0.05 in 10k env steps: they hold CartPole at 500 to the end of 500k steps, where
    # double Q, dueling, 3-step returns and prioritized replay reached 500 by 130k and then fell (docs/benchmarks.md).
    lr: float = Field(2.5e-4, gt=0, le=1.0)
    activation: Literal["tanh", "relu"] = "relu"
    hidden: list[LayerWidth] = Field(default_factory=lambda: [120, 84], min_length=1, max_length=8)
    grad_clip: float | None = Field(None, gt=0)
    loss: Literal["huber", "mse"] = Field(
        "mse",
        description="The TD loss: mse (CleanRL's) or huber (delta 1, the Nature DQN's error clipping). Measured "
        "on CartPole with the target synced every 50 updates: huber's Q-values ran away (mean Q 1.2k by 30k env "
        "steps, where returns bound them by 100) and mse's stayed bounded; with syncs 200 updates apart both hold.",
    )
    n_step: int = Field(1, ge=1, le=100, description="n-step returns in the TD target; 1 is one-step TD.")
    double_q: bool = Field(False, description="Double Q-learning: the online network picks the next action, "
                           "the target network values it.")
    dueling: bool = Field(False, description="Dueling heads: separate state-value and advantage streams.")
    train_batch_size: int = Field(128, ge=1, description="Transitions sampled from replay per learner update.")
    learning_starts: int = Field(10_000, ge=0, description="Env steps before the first update.")
    replay_ratio: float = Field(
        0.1, gt=0, description="Learner updates per env step (times train_batch_size samples per update)."
    )
    target_update_interval: int = Field(50, ge=1, description="Learner updates between target-network syncs.")
    epsilon_start: float = Field(1.0, ge=0, le=1, description="Epsilon-greedy exploration: the random-action "
                                  "probability at the start.")
    epsilon_end: float = Field(0.05, ge=0, le=1, description="The random-action probability after "
                                "epsilonTimesteps.")
    epsilon_timesteps: int = Field(10_000, ge=1, description="Env steps over which epsilon falls linearly from "
                                   "epsilonStart to epsilonEnd.")
    priority_alpha: float = Field(
        0.0, ge=0, le=1,
        description="Prioritization exponent: 0 samples replay uniformly (DQN; with 0.6 one CartPole seed of two fell "
        "from 500 to 306 at 430k steps), 0.6 is Ape-X's.",
    )
    priority_beta: float = Field(0.4, ge=0, le=1, description="Prioritized replay's importance-sampling "
                                 "exponent at the start.")
    priority_beta_timesteps: int = Field(
        100_000, ge=1, description="Anneal beta to priorityBetaFinal over this many env steps."
    )
    priority_beta_final: float = Field(1.0, ge=0, le=1, description="The importance-sampling exponent beta ends at.")
    priority_eps: float = Field(1e-6, gt=0, description="Added to |TD error| so no transition gets priority 0.")


class ShardReplayParams(StrictModel):
    """The replay-shard topology's settings (`kuberl.trainer.algorithms.sharded`): Ape-X, SAC with replay.shards."""

    weight_sync_interval: int = Field(
        20, ge=1, description="With replay shards: learner updates between weight broadcasts to the rollout "
        "workers.")
    prefetch: int = Field(4, ge=1, le=64,
                          description="With replay shards: outstanding sample requests per shard.")
    max_replay_ratio: float | None = Field(
        8.0, gt=0, description="With replay shards: upper bound on sampled/added transitions, so the learner "
        "cannot overfit a small buffer."
    )
    min_iteration_seconds: float = Field(
        1.0, gt=0, le=3600, description="With replay shards: wall time one train() iteration (one results line) covers."
    )


class ApexDQNParams(ShardReplayParams, DQNParams):
    # DQN's final epsilon is not a field here (so refused, and not in the reference), but stays an attribute:
    # the DQN code Ape-X shares takes DQNParams.
    epsilon_end: ClassVar[float] = 0.05  # type: ignore[misc]
    not_read: ClassVar[dict[str, str]] = {
        "epsilonEnd": "each worker explores with its own final epsilon, workerEpsilonBase ** (1 + "
                      "workerEpsilonExponent * i/(N-1)): set workerEpsilonBase or workerEpsilonExponent "
                      "instead",
    }
    lr: float = Field(5e-4, gt=0, le=1.0)
    # Ape-X keeps the learner it was measured with (docs/benchmarks.md), not DQN's CleanRL settings.
    hidden: list[LayerWidth] = Field(default_factory=lambda: [128, 128], min_length=1, max_length=8)
    grad_clip: float | None = Field(10.0, gt=0)
    loss: Literal["huber", "mse"] = Field("huber", description="The TD loss: huber (delta 1) or mse.")
    double_q: bool = True
    dueling: bool = True
    priority_alpha: float = Field(0.6, ge=0, le=1, description="Prioritization exponent (the paper's 0.6).")
    n_step: int = Field(
        10, ge=1, le=100,
        description="Ape-X: n-step returns; 10 bootstraps through gamma^10, which keeps Q from running away on "
        "the narrow data of few, nearly greedy workers (Atari: 3, as in the paper).",
    )
    train_batch_size: int = Field(256, ge=1)
    replay_ratio: float = Field(
        1 / 32, gt=0, description="Ape-X: learner updates per env step that sampling waits for (8 samples per step)."
    )
    learning_starts: int = Field(5_000, ge=0)
    target_update_interval: int = Field(250, ge=1)
    priority_beta_final: float = Field(
        0.4, ge=0, le=1,
        description="Ape-X keeps beta at priorityBeta (0.4), as in the paper. Annealed to 1, the importance "
        "weights (normalised by the shard's smallest priority) spread over orders of magnitude, a few "
        "transitions carry each batch, and on CartPole the Q-values ran away and the return collapsed.",
    )
    epsilon_timesteps: int = Field(
        10_000, ge=1,
        description="Ape-X: each worker's epsilon falls from epsilonStart to its own over the run's first this many "
        "env steps, so that replay does not start with one action's transitions.",
    )
    worker_epsilon_base: float = Field(
        0.05, gt=0, le=1,
        description="Ape-X: eps_i = base ** (1 + exponent * i/(N-1)); the paper's 0.4 suits many workers, "
        "while with few its most exploring worker's short episodes dominate the return mean. 0.05 is DQN's "
        "final epsilon in CleanRL and RL Zoo: on CartPole-v1 one worker at 0.1 ended at 474.1 (worst of two "
        "seeds), at 0.05 at 489.4.",
    )
    worker_epsilon_exponent: float = Field(7.0, ge=0, description="Ape-X: the exponent of the workers' epsilons "
                                           "(see workerEpsilonBase); the paper's 7.")


class IMPALAParams(CommonParams):
    lr: float = Field(1e-3, gt=0, le=1.0)
    grad_clip: float | None = Field(
        40.0, gt=0, description="Global-norm clip of the policy's and the critic's gradients, each on its own; "
        "together where they share the conv encoder (image observations)."
    )
    vf_coeff: float = Field(0.5, ge=0, description="Weight of the value loss in the total loss.")
    entropy_coeff: float = Field(0.01, ge=0, description="Weight of the entropy bonus in the total loss.")
    anneal_lr: bool = Field(False, description="Linear learning-rate decay to 0 over annealTimesteps (default "
                             "stop.timesteps).")
    anneal_timesteps: int | None = Field(None, ge=1, description=ANNEAL_TIMESTEPS)
    rho_bar: float | None = Field(1.0, gt=0, description="V-trace: clip of the importance ratio in the value targets.")
    c_bar: float | None = Field(1.0, gt=0, description="V-trace: clip of the trace-cutting coefficients c_i.")
    pg_rho_bar: float | None = Field(1.0, gt=0, description="V-trace: clip of the ratio in the policy-gradient advantage.")
    train_batch_size: int = Field(
        512, ge=1, description="Env steps per learner update, rounded up to whole fragments of rollouts.fragmentLength."
    )
    buffer_batches: int = Field(1, ge=1, le=256, description="Train batches the learner keeps to learn from.")
    batch_reuse: int = Field(1, ge=1, le=100, description="Updates each train batch is used for before it leaves.")
    broadcast_interval: int = Field(1, ge=1, description="Learner updates between weight broadcasts to the workers.")
    learner_queue_size: int = Field(
        16, ge=1, le=1024, description="Fragments waiting for the learner; when full, workers get no new sample calls."
    )
    requests_per_worker: int = Field(
        2, ge=1, le=16, description="Sample calls queued on each rollout worker, so it never waits between fragments."
    )
    min_iteration_seconds: float = Field(
        1.0, gt=0, le=3600, description="Wall time one train() iteration (one results line) covers."
    )


class APPOParams(IMPALAParams):
    lr: float = Field(1e-3, gt=0, le=1.0)
    entropy_coeff: float = Field(
        0.0, ge=0, description="No bonus by default, as RLlib's tuned CartPole APPO: once every episode reaches a "
        "task's cap the advantages vanish and a bonus alone moves the policy toward uniform play (images: 0.01)."
    )
    anneal_lr: bool = Field(
        True, description="Linear learning-rate decay to 0 over annealTimesteps (default stop.timesteps; none "
        "without either). On by default: "
        "with a constant rate, CartPole held 500 for 1.5M steps and then fell (images: off, as RLlib's Pong APPO)."
    )
    clip_param: float = Field(0.4, gt=0, description="PPO's surrogate clip of the ratio to the target policy.")
    target_worker_clipping: float = Field(
        2.0, gt=0, description="Clip of mu / pi_target, the behaviour-to-target part of the ratio (IMPACT)."
    )
    target_update_interval: int = Field(16, ge=1, description="Learner updates between target-policy syncs.")
    buffer_batches: int = Field(4, ge=1, le=256, description="Train batches the learner keeps to learn from.")
    batch_reuse: int = Field(2, ge=1, le=100, description="Updates each train batch is used for before it leaves.")


class SACParams(ShardReplayParams, CommonParams):
    lr: float = Field(3e-4, gt=0, le=1.0, description="The actor's (policy's) learning rate.")
    critic_lr: float = Field(1e-3, gt=0, le=1.0, description="The twin Q-networks' learning rate.")
    alpha_lr: float = Field(1e-3, gt=0, le=1.0, description="The entropy temperature's (log alpha's) learning rate.")
    activation: Literal["tanh", "relu"] = "relu"
    hidden: list[LayerWidth] = Field(default_factory=lambda: [256, 256], min_length=1, max_length=8,
                                     description="MLP widths of the actor and of each Q-network.")
    grad_clip: float | None = Field(None, gt=0, description="Global-norm clip of each network's gradients; null: none.")
    tau: float = Field(0.005, gt=0, le=1.0, description="Polyak step of the target Q-networks after each update.")
    n_step: int = Field(1, ge=1, le=100, description="n-step returns in the critic's target; 1 is SAC's own.")
    train_batch_size: int = Field(256, ge=1, description="Transitions sampled from replay per learner update.")
    learning_starts: int = Field(
        1_000, ge=0, description="Env steps before the first update; until then actions are uniform in the Box."
    )
    replay_ratio: float = Field(
        1.0, gt=0, description="Learner updates per env step (times train_batch_size samples per update)."
    )
    initial_alpha: float = Field(1.0, gt=0, description="The entropy temperature alpha before any tuning.")
    target_entropy: float | None = Field(
        None, description="The entropy alpha is tuned towards; null: -(action dimensions) (Haarnoja et al. 2018)."
    )
    priority_alpha: float = Field(
        0.6, ge=0, le=1, description="Prioritized replay (spec.replay.prioritized): P(i) ~ (|TD error| + eps)^alpha."
    )
    priority_beta: float = Field(0.4, ge=0, le=1, description="Importance-weight exponent of the critic's loss.")
    priority_beta_timesteps: int = Field(
        100_000, ge=1, description="Anneal beta to priorityBetaFinal over this many env steps."
    )
    priority_beta_final: float = Field(1.0, ge=0, le=1, description="The importance-sampling exponent beta ends at.")
    priority_eps: float = Field(1e-6, gt=0, description="Added to |TD error| so no transition gets priority 0.")
    max_replay_ratio: float | None = Field(
        256.0, gt=0,
        description="With replay shards: upper bound on sampled/added transitions; the default is replay_ratio x "
        "train_batch_size at their defaults, so a fast learner stays at the ratio asked for.",
    )
