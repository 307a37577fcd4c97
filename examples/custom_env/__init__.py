"""A user's own environment package, for examples/custom-env.yaml."""
