"""Exported policies: self-contained ONNX and TorchScript files that compute actions from observations."""
