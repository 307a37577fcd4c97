"""Running an experiment: the driver and its settings, the training run and its observers (results,
live status, metrics, checkpoint cadence, progress, callbacks), the status server, reports, exports
of a checkpoint and the checks before training."""
