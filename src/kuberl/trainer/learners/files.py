"""The names of the learners' checkpoint files, one place for all of them."""

MODEL_FILE = "model.pt"
OPTIMIZER_FILE = "optimizer.pt"
LEARNER_FILE = "learner.json"
