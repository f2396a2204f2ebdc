"""One ONNX Runtime session, fed and read by the tensor names its manifest entry declares; an export's graphs
and tables opened together, and its `tokenizers` tokenizer."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import ArtifactError
from ttscore.contract.manifest import Manifest, read_manifest

# `speech_generation`'s thread_pool parameter (and `triton-tts say/bench --thread-pool`): see share_thread_pool.
THREAD_POOLS = ("shared", "session")
# [threads] of the process-wide pool once `share_thread_pool` ran; empty: each session has its own.
_shared_pool: list[int] = []


def share_thread_pool(threads: int | None = None) -> None:
    """Run every ONNX Runtime session this process opens from now on on one shared intra-op pool of
    `threads` threads (None or 0: TTS_ORT_THREADS, else ONNX Runtime's default, one per physical
    core), whose idle threads spin.

    A speech generation process runs its graphs one after another (talker, code predictor,
    vocoder): with a pool per session, each graph's call wakes blocked threads op after op; with
    one pool the same threads go from graph to graph and stay hot. Measured on the 2-vCPU machine
    (Qwen3-TTS 0.6B int8, one stream, perf/README.md, issue 29): 114-116 ms per 80 ms frame shared,
    123-149 per-session blocking, 154-177 per-session spinning (three pools spinning against each
    other on two cores).

    Through Triton on the same 2 vCPUs, with tritonserver and perf_analyzer competing for the cores,
    the spinning pool is slower at 4-8 streams (1.21 against 1.42 audio seconds per second at c=8),
    so the speech_generation model's `thread_pool` defaults to "session".

    Process-wide and one-way: ONNX Runtime refuses a per-session pool once a global one exists, so
    only a process that opens every session through `session_options` asks for it (`triton-tts say`
    and `bench peer/breakdown --thread-pool shared`, a speech_generation model with `thread_pool:
    shared`), before its first session; everything else keeps a pool per session."""
    if not _shared_pool:
        import onnxruntime.capi._pybind_state as ort_c

        size = threads or int(os.environ.get("TTS_ORT_THREADS", "0") or 0)
        ort_c.set_global_thread_pool_sizes(size, 1)
        _shared_pool.append(size)


def session_options(threads: int | None = None) -> Any:
    """The SessionOptions every session of the runtime opens with: the shared pool after
    `share_thread_pool`, else its own pool of `threads` (None: TTS_ORT_THREADS, else ONNX Runtime's
    default) whose idle threads block (TTS_ORT_SPIN=1: spin), all graph optimizations on."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if _shared_pool:
        opts.use_per_session_threads = False
        return opts
    opts.intra_op_num_threads = threads or int(os.environ.get("TTS_ORT_THREADS", "0") or 0)
    opts.inter_op_num_threads = 1
    # Idle intra-op threads block instead of spinning: without a shared pool every Triton model
    # (generation, code2wav) and every graph has its own pool on the same cores, and on an
    # oversubscribed CPU spinning threads steal the cores the working ones need (tiny checkpoint,
    # 2 shared cores: 140-185 ms per frame spinning vs 25-50 ms blocking). TTS_ORT_SPIN=1 restores
    # spinning on dedicated cores.
    if os.environ.get("TTS_ORT_SPIN", "0") != "1":
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


_COUNT_LOCK = threading.Lock()


class OnnxGraph:
    """One ONNX Runtime session, fed and read by the names of its GraphSpec.

    `OnnxGraph.seconds` adds up the wall time spent inside ONNX Runtime by every graph of this
    process, so the engine can tell model time from its own per-step work; `spent` and `calls`
    are this graph's own share (where a frame's time goes: `triton-tts bench breakdown`)."""

    seconds: float = 0.0  # process-wide (graph calls that overlap add up)
    # time.monotonic() when a graph call last returned, process-wide: a long step's sign of life (the keep-alives
    # of ttscore.backend.generation stop when it stops)
    progressed: float = 0.0

    def __init__(self, path: Path, graph: dict[str, Any], threads: int | None = None) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise ArtifactError(f"missing graph {path}")
        opts = session_options(threads)
        providers: list[Any] = ["CPUExecutionProvider"]
        if os.environ.get("TTS_DEVICE", "cpu") == "gpu":
            device_id = int(os.environ.get("TTS_CUDA_DEVICE", "0"))
            providers = [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"]
        self.path = path
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

    def run_bound(self, feeds: dict[str, NDArray[Any]], into: dict[str, NDArray[Any]] | None = None
                  ) -> dict[str, NDArray[Any]]:
        """`run` through IO binding: each (C-contiguous) input is bound in place, never copied, so
        a view into a preallocated buffer (e.g. a KV arena) costs nothing to feed. Outputs named in `into`
        are written straight into those (C-contiguous, float32, of the output's shape) arrays, e.g. the
        next slots of such a buffer, and returned as them."""
        t0 = time.perf_counter()
        binding = self.session.io_binding()
        for name, value in feeds.items():
            if not value.flags.c_contiguous:
                raise ValueError(f"input {name} must be C-contiguous to be bound in place")
            binding.bind_cpu_input(name, value)
        into = into or {}
        for name in self.output_names:
            if name in into:
                a = into[name]
                if not a.flags.c_contiguous or a.dtype != np.float32:
                    raise ValueError(f"output {name} must go into a C-contiguous float32 array")
                binding.bind_output(name, "cpu", 0, np.float32, list(a.shape), a.ctypes.data)
            else:
                binding.bind_output(name)
        self.session.run_with_iobinding(binding)
        values = binding.get_outputs()
        outs = {name: into[name] if name in into else v.numpy() for name, v in zip(self.output_names, values, strict=True)}
        self._count(time.perf_counter() - t0)
        return outs

    def _count(self, seconds: float) -> None:
        with _COUNT_LOCK:  # the engine's vocoder thread runs graphs beside the step thread
            OnnxGraph.seconds += seconds
        OnnxGraph.progressed = time.monotonic()
        self.spent += seconds
        self.calls += 1


def open_graph(artifacts: Path, manifest: Manifest, name: str, threads: int | None = None) -> OnnxGraph:
    """The graph `name` of the export in `artifacts` (its manifest `manifest`); ArtifactError when it lists none."""
    if name not in manifest.graphs:
        raise ArtifactError(f"{artifacts}/manifest.json lists no {name} graph: re-export")
    entry = manifest.graphs[name]
    return OnnxGraph(artifacts / entry["file"], dict(entry), threads)


def open_table(artifacts: Path, name: str) -> NDArray[np.float32]:
    """The export's table `<name>.npy`, mapped read-only; ArtifactError when it is missing."""
    path = artifacts / f"{name}.npy"
    if not path.is_file():
        raise ArtifactError(f"missing table {path}")
    loaded: NDArray[np.float32] = np.load(path, mmap_mode="r")
    return loaded


def open_tokenizer(directory: Path) -> Any:
    """The `tokenizers` Tokenizer of `directory`/tokenizer.json; ArtifactError when it is missing."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise ArtifactError(f"missing {path}")
    return Tokenizer.from_file(str(path))


class ExportedGraphs:
    """An export opened for a run in this process: its manifest, its `sizes`, every graph it lists (`graphs`, by
    name) and the `.npy` tables beside them (`table`)."""

    def __init__(self, artifacts: Path, threads: int | None = None) -> None:
        self.root = Path(artifacts)
        self.manifest: Manifest = read_manifest(self.root)
        raw = self.manifest.raw
        self.sizes: dict[str, Any] = raw["sizes"]
        self.graphs = {name: open_graph(self.root, self.manifest, name, threads) for name in raw["graphs"]}

    def table(self, name: str, *, mmap: bool = False) -> NDArray[np.float32]:
        """The table `<name>.npy` (`mmap`: mapped read-only instead of read)."""
        out: NDArray[np.float32] = np.load(self.root / f"{name}.npy", mmap_mode="r" if mmap else None)
        return out
