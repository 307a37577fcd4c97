"""Learners: one class per algorithm family that holds the networks, the optimizer and the update step
(PPO's, the V-trace learner of IMPALA and APPO, the Q-learner of DQN and Ape-X, SAC's). An algorithm in
`kuberl.trainer.algorithms` wires one of them to a sampler and, off-policy, to replay."""
