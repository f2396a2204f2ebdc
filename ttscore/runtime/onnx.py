"""One ONNX Runtime session, fed and read by the tensor names its manifest entry declares."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from ttscore.contract.errors import ArtifactError


class OnnxGraph:
    """One ONNX Runtime session, fed and read by the names of its GraphSpec.

    `OnnxGraph.seconds` adds up the wall time spent inside ONNX Runtime by every graph of this
    process, so the engine can tell model time from its own per-step work; `spent` and `calls`
    are this graph's own share (where a frame's time goes: `triton-tts bench breakdown`)."""

    seconds: float = 0.0  # process-wide; only the step thread runs graphs

    def __init__(self, path: Path, graph: dict[str, Any], threads: int | None = None) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise ArtifactError(f"missing graph {path}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or int(os.environ.get("TTS_ORT_THREADS", "0") or 0)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle intra-op threads block instead of spinning: every Triton model (generation, code2wav)
        # has its own pool on the same cores, and on an oversubscribed CPU spinning threads steal
        # the cores the working ones need (tiny checkpoint, 2 shared cores: 140-185 ms per frame
        # spinning vs 25-50 ms blocking). TTS_ORT_SPIN=1 restores spinning on dedicated cores.
        if os.environ.get("TTS_ORT_SPIN", "0") != "1":
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers: list[Any] = ["CPUExecutionProvider"]
        if os.environ.get("TTS_DEVICE", "cpu") == "gpu":
            device_id = int(os.environ.get("TTS_CUDA_DEVICE", "0"))
            providers = [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=providers)
        self.spent = 0.0
        self.calls = 0
        self.input_names = [t["name"] for t in graph["inputs"]]
        self.output_names = [t["name"] for t in graph["outputs"]]
        got = [i.name for i in self.session.get_inputs()]
        if sorted(got) != sorted(self.input_names):
            raise ArtifactError(f"{path.name}: inputs {got} do not match the manifest {self.input_names}")

    def run(self, feeds: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        t0 = time.perf_counter()
        outs = self.session.run(self.output_names, feeds)
        self._count(time.perf_counter() - t0)
        return dict(zip(self.output_names, outs, strict=True))

    def run_bound(self, feeds: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """`run` through IO binding: each (C-contiguous) input is bound in place, never copied, so
        a view into a preallocated buffer (e.g. a KV arena) costs nothing to feed."""
        t0 = time.perf_counter()
        binding = self.session.io_binding()
        for name, value in feeds.items():
            if not value.flags.c_contiguous:
                raise ValueError(f"input {name} must be C-contiguous to be bound in place")
            binding.bind_cpu_input(name, value)
        for name in self.output_names:
            binding.bind_output(name)
        self.session.run_with_iobinding(binding)
        outs = binding.copy_outputs_to_cpu()
        self._count(time.perf_counter() - t0)
        return dict(zip(self.output_names, outs, strict=True))

    def _count(self, seconds: float) -> None:
        OnnxGraph.seconds += seconds
        self.spent += seconds
        self.calls += 1
