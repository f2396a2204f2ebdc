"""One ONNX Runtime session, fed and read by the tensor names its manifest entry declares."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from ttscore.contract.errors import ArtifactError


class OnnxGraph:
    """One ONNX Runtime session, fed and read by the names of its GraphSpec."""

    def __init__(self, path: Path, graph: dict[str, Any], threads: int | None = None) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise ArtifactError(f"missing graph {path}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or int(os.environ.get("TTS_ORT_THREADS", "0") or 0)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers: list[Any] = ["CPUExecutionProvider"]
        if os.environ.get("TTS_DEVICE", "cpu") == "gpu":
            device_id = int(os.environ.get("TTS_CUDA_DEVICE", "0"))
            providers = [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=providers)
        self.input_names = [t["name"] for t in graph["inputs"]]
        self.output_names = [t["name"] for t in graph["outputs"]]
        got = [i.name for i in self.session.get_inputs()]
        if sorted(got) != sorted(self.input_names):
            raise ArtifactError(f"{path.name}: inputs {got} do not match the manifest {self.input_names}")

    def run(self, feeds: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        outs = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, outs, strict=True))
