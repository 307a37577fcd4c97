"""Where results go besides results.jsonl: TensorBoard event files and MLflow runs."""
