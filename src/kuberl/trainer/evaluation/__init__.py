"""Evaluation: whole episodes with the learner's policy, in the learner's process or on Ray actors,
summarised for results.jsonl, optionally with a video of one episode; during a run (when, where,
reported how: `evaluator`, `run_evaluations`) and of a saved checkpoint (`kuberl evaluate`: `checkpoint`)."""
