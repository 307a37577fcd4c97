"""Multi-agent training on PettingZoo envs: env ids, the policy map, the rollout worker, the algorithms."""
