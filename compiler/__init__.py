"""Ahead-of-time compiler: a trained barrier (PyTorch or ONNX) -> one C++ header with exact Lie derivatives."""
__version__ = "0.1.0"
