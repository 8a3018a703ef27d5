"""Exporters (PyTorch → ONNX, always validated) and int8 quantizers."""
