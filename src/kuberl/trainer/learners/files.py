"""The names of the learners' checkpoint files, one place for all of them."""

MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
LEARNER_FILE = "learner.json"
# The replay-shard learner's count of transitions added to replay over the run (its prioritized replay's beta
# anneals on it, through resumes).
SHARD_REPLAY_FILE = "shard_replay.json"
