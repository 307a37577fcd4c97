"""One module per algorithm (its config, loss and update step), the Algorithm loop and the config builder."""
