"""Tensors as tritonclient's gRPC inputs, for the tests that talk to a real tritonserver."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as grpcclient


def to_inputs(tensors: dict[str, np.ndarray]) -> list[grpcclient.InferInput]:
    """One InferInput per tensor, its data set (object arrays as BYTES)."""
    inputs = []
    for name, value in tensors.items():
        dtype = "BYTES" if value.dtype == np.object_ else grpcclient.np_to_triton_dtype(value.dtype)
        inp = grpcclient.InferInput(name, list(value.shape), dtype)
        inp.set_data_from_numpy(value)
        inputs.append(inp)
    return inputs
