"""Moved to qlower.reference.onnx_types (the reference ONNX kernels use it too); re-exported for one release."""

from qlower.reference.onnx_types import dtype_to_onnx, graph_dtype, narrow_ints, numpy_to_onnx, onnx_to_numpy

__all__ = ["dtype_to_onnx", "graph_dtype", "narrow_ints", "numpy_to_onnx", "onnx_to_numpy"]
