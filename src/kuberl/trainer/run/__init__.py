"""Running an experiment: the driver, the status server, metrics, evaluation, reports, callbacks and checks."""
