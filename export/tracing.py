"""Tracing a torch module to ONNX and checking the graph against it: `trace_graph` (the only
torch.onnx.export call, behind `export_inline` and `export_bound`), saving ONNX (external data when
large, `bind_weights`), ONNX Runtime sessions (`ort_session`, `ort_run`), validation against the
PyTorch reference (`check_close`, `ErrorTracker`) and moving graph files with their data.

Everything here fails with `ttscore.contract.errors.ExportError`, the one error type export surfaces.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ttscore.contract.errors import ExportError
from ttscore.contract.kv import past_key, past_value

logger = logging.getLogger(__name__)

# protobuf cannot hold more than 2 GiB; stay well below it before switching to external data.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ExportError(message)


OPSET = 18


EXPORTER_INLINE = "torch.onnx.export(dynamo=False) (legacy TorchScript exporter)"


EXPORTER_BOUND = "torch.onnx.export(dynamo=False, export_params=False) (legacy TorchScript exporter) + bind_weights"


def versions(opset: int = OPSET) -> dict[str, Any]:
    """The manifest's `versions`: the opset and the exporting stack's versions."""
    import platform

    import onnx
    import onnxruntime
    import torch

    return {"onnx_opset": opset, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "torch": torch.__version__, "python": platform.python_version()}


def max_abs(a: Any, b: Any) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ExportError(f"shape mismatch: {a.shape} vs {b.shape}")
    if a.size == 0:
        return 0.0
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    return float(np.max(np.abs(a - b)))


def check_close(what: str, got: Any, want: Any, atol: float) -> float:
    """The max abs error of an ONNX Runtime output against the PyTorch reference's; ExportError
    naming `what` when the shapes differ or the error is above `atol` (or not finite)."""
    got_shape, want_shape = np.shape(got), np.shape(want)
    if got_shape != want_shape:
        raise ExportError(f"{what}: shape {got_shape} != reference {want_shape}")
    err = max_abs(got, want)
    if not err <= atol:
        raise ExportError(f"{what}: max abs error {err:.3g} > {atol:g}")
    return err


def check_relative(what: str, got: Any, want: Any, rtol: float) -> dict[str, dict[str, float]]:
    """max |got - want| / max(1, max |want|) <= rtol (ExportError otherwise: check_close on both scaled), for
    outputs whose scale varies (logits, audio); the validation report: that relative error and the absolute one."""
    want = np.asarray(want, dtype=np.float32)
    got = np.asarray(got, dtype=np.float32)
    scale = max(1.0, float(np.abs(want).max()))
    rel = check_close(what, got / scale, want / scale, rtol)
    return {"max_rel_error": {what: rel}, "max_abs_error": {what: max_abs(got, want)}}


class ErrorTracker:
    """Max abs error per output name over many cases, with the case that produced it."""

    def __init__(self) -> None:
        self.max: dict[str, float] = {}
        self.where: dict[str, str] = {}

    def add(self, name: str, got: Any, want: Any, case: str) -> float:
        err = max_abs(got, want)
        if err > self.max.get(name, -1.0):
            self.max[name] = err
            self.where[name] = case
        return err

    def enforce(self, tolerances: dict[str, float] | float, graph: str) -> None:
        """ExportError when an output's worst error is above its tolerance (a float: every output's)."""
        if not isinstance(tolerances, dict):
            tolerances = dict.fromkeys(self.max, tolerances)
        bad = [
            f"{name}: {err:.3g} > {tolerances[name]:.1g} (case {self.where[name]})"
            for name, err in self.max.items()
            if name in tolerances and not err <= tolerances[name]
        ]
        if bad:
            raise ExportError(f"{graph}: ONNX Runtime disagrees with PyTorch: " + "; ".join(bad))

    def report(self) -> dict[str, float]:
        return {k: float(f"{v:.3g}") for k, v in sorted(self.max.items())}

    def finish(self, graph: str, path: Path, tolerance: dict[str, float] | float) -> dict[str, Any]:
        """The validation report of the graph file `path` (the manifest's `validation`): ExportError when an
        output's worst error is above its tolerance, else the file, the worst errors, the tolerance and its
        bytes on disk."""
        self.enforce(tolerance, graph)
        return {"file": path.name, "max_abs_error": self.report(), "tolerance": tolerance, "bytes": file_size(path)}


def empty_past(layers: int, kv_heads: int, head_dim: int, batch: int = 1) -> list[np.ndarray]:
    """The empty past of a decoder step (ttscore.contract.kv): key and value of each layer, [batch, kv_heads, 0,
    head_dim] float32."""
    return [np.zeros((batch, kv_heads, 0, head_dim), np.float32) for _ in range(2 * layers)]


def random_codes(rng: Any, batch: int, frames: int, codebooks: Sequence[tuple[int, int]]) -> np.ndarray:
    """Random codec codes [batch, rows, frames] int64 for validation: per (codebook size, rows) of `codebooks` in
    turn (e.g. one semantic row, then the acoustic rows), that many rows drawn from `rng`."""
    return np.concatenate([rng.integers(0, size, (batch, rows, frames)) for size, rows in codebooks],
                          axis=1).astype(np.int64)


def run_in_chunks(session: Any, codes: np.ndarray, state_size: int, chunks: Sequence[int], axis: int = -1,
                  input_name: str = "codes") -> np.ndarray:
    """A streaming vocoder graph ((codes, state) -> (pcm, state), its frames input named `input_name`) run over
    `codes` in chunks of `chunks` frames along `axis` from a zero state: its pcm pieces joined, for comparing with
    a whole decode."""
    state = np.zeros((codes.shape[0], state_size), np.float32)
    pieces, a = [], 0
    for n in chunks:
        frames = np.take(codes, np.arange(a, a + n), axis=axis)
        pcm, state = ort_run(session, {input_name: frames, "state": state})
        pieces.append(pcm)
        a += n
    return np.concatenate(pieces, axis=1)


def validation_audio(seconds: float, seed: int = 0, rate: int = 24000) -> np.ndarray:
    """Noise plus a few sines, peak ~0.5, `seconds` at `rate`: a deterministic, non-trivial validation signal
    (an exporter's reference clips)."""
    rng = np.random.default_rng(seed)
    n = round(seconds * rate)
    t = np.arange(n) / rate
    x = 0.05 * rng.standard_normal(n)
    for f, a in ((220.0, 0.2), (530.0, 0.1), (1870.0, 0.05)):
        x += a * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    return x.astype(np.float32)


def with_past(feeds: dict[str, Any], past: Sequence[Any]) -> dict[str, Any]:
    """`feeds` with a decoder step's past (key and value of each layer in turn) under its past input names."""
    for i in range(len(past) // 2):
        feeds[past_key(i)], feeds[past_value(i)] = past[2 * i], past[2 * i + 1]
    return feeds


@contextmanager
def torch_threads(n: int | None = None) -> Iterator[None]:
    """Run the PyTorch reference with few intra-op threads, restoring the setting afterwards.

    Validation feeds the reference a handful of short sequences; on a shared 2-core machine torch's
    OpenMP threads then spend their time waiting for each other (measured: 91 s with 2 threads vs
    15 s with 1 for the 0.6B talker validation under load). Override with TTS_EXPORT_TORCH_THREADS.
    """
    import torch

    if n is None:
        n = int(os.environ.get("TTS_EXPORT_TORCH_THREADS", "1"))
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def ort_session(path: Path, *, threads: int | None = None, basic_only: bool = False) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads is None:
        threads = int(os.environ.get("TTS_EXPORT_ORT_THREADS", "1"))
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if basic_only:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ExportError(f"onnxruntime cannot load {path}: {exc}") from exc


def ort_run(session: Any, feeds: dict[str, Any]) -> list[Any]:
    """Run every output of `session` on the `feeds` it takes (extra feeds are left out)."""
    names = {i.name for i in session.get_inputs()}
    out: list[Any] = session.run(None, {k: v for k, v in feeds.items() if k in names})
    return out


def save_onnx(model: Any, path: Path) -> Path:
    """Save an onnx ModelProto, with all weights in one `<file>.data` when the model is large."""
    import onnx

    path = Path(path)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()
    size = sum(t.ByteSize() for t in model.graph.initializer)
    if not fits_inline(size):
        onnx.save_model(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
            location=data.name, size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))
    return path


@contextmanager
def scratch_dir(near: Path) -> Iterator[Path]:
    """A temporary directory next to `near` (same filesystem; big exports avoid /tmp)."""
    near.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=".export-", dir=near))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def stamp_io(model: Any, spec: Any) -> None:
    """Declare the graph inputs/outputs exactly as the GraphSpec does (names, dtypes, dims).

    The legacy exporter's shape inference loses static dims that pass through dynamic Reshapes
    (e.g. head_dim shows up as 'Addnew_key_0_dim_3'); the spec is the contract, so write it.
    """
    import onnx

    for kind, values, tensors in (("input", model.graph.input, spec.inputs), ("output", model.graph.output, spec.outputs)):
        names = [v.name for v in values]
        if kind == "input":
            # initializers may be listed as inputs by old exporters; only the real inputs matter
            names = [n for n in names if n in {t.name for t in tensors}]
        if names != [t.name for t in tensors]:
            raise ExportError(f"{spec.name}: graph {kind}s {names} != spec {[t.name for t in tensors]}")
        by_name = {v.name: v for v in values}
        for t in tensors:
            v = by_name[t.name]
            want = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
            if v.type.tensor_type.elem_type != want:
                raise ExportError(f"{spec.name}: {kind} {t.name} has ONNX type {v.type.tensor_type.elem_type}, spec {t.dtype}")
            shape = v.type.tensor_type.shape
            while len(shape.dim) > len(t.dims):
                shape.dim.pop()
            while len(shape.dim) < len(t.dims):
                shape.dim.add()
            for d, want_dim in zip(shape.dim, t.dims, strict=True):
                if isinstance(want_dim, str):
                    d.dim_param = want_dim
                else:
                    if d.HasField("dim_value") and d.dim_value != int(want_dim):
                        raise ExportError(f"{spec.name}: {kind} {t.name} dim {d.dim_value} != spec {want_dim}")
                    d.dim_value = int(want_dim)


# Offsets of external tensors are page aligned so that a runtime may memory-map them.
ALIGN = 4096
# Tensors smaller than this stay inline in the graph file (onnx's own default threshold).
INLINE_BYTES = 1024


def fits_inline(nbytes: int) -> bool:
    """Whether a graph of `nbytes` of weights is saved as one self-contained protobuf."""
    return nbytes <= EXTERNAL_DATA_THRESHOLD


class ExternalData:
    """A graph's initializers written one at a time: each of `INLINE_BYTES` or more goes to the open
    `<file>.data` at a page-aligned offset, smaller ones stay inline in the graph."""

    def __init__(self, graph: Any, data: BinaryIO, location: str) -> None:
        self.graph, self.data, self.location, self.offset = graph, data, location, 0

    def add(self, name: str, arr: np.ndarray) -> None:
        import onnx
        from onnx import numpy_helper

        if arr.nbytes < INLINE_BYTES:
            self.graph.initializer.append(numpy_helper.from_array(arr, name))
            return
        self.offset = -(-self.offset // ALIGN) * ALIGN
        self.data.seek(self.offset)
        self.data.write(np.ascontiguousarray(arr).data)
        tensor = onnx.TensorProto(name=name, data_type=onnx.helper.np_dtype_to_tensor_dtype(arr.dtype), dims=arr.shape)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(self.offset)), ("length", str(arr.nbytes))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self.graph.initializer.append(tensor)
        self.offset += arr.nbytes


def bind_weights(
    traced: Path, out_file: Path, weights: Callable[[str], np.ndarray], metadata: dict[str, str], spec: Any
) -> Path:
    """Turn a graph traced with `export_params=False` into a self-describing model, one weight at a time.

    Tracing without parameters leaves each weight as a graph input named like its module
    parameter, and no weight bytes anywhere. Here each such input becomes an initializer read from
    `weights(name)`; a weight consumed by a Transpose (nn.Linear on 3-D inputs) is stored
    transposed under the Transpose's output name and the node dropped, which is what the
    exporter's constant folding did. Every weight goes to `<file>.data` as it is read (page-aligned,
    so a runtime may memory-map it), whatever the graph's size: building the graph inline needs the
    protobuf copy plus its serialization, measured at 4x the weights (a 0.6B talker: 7.5 GB for
    1.8 GB of weights), while this holds the graph structure and one weight. Then the spec's I/O
    and `metadata` are stamped on and the onnx checker runs on the file.
    """
    import onnx

    try:
        model = onnx.load(str(traced))
    except Exception as exc:
        raise ExportError(f"exported graph {traced.name} does not load: {exc}") from exc
    graph = model.graph
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node for a in n.attribute):
        raise ExportError(f"{spec.name}: bind_weights does not rewrite subgraphs (If/Loop bodies)")
    real_inputs = {t.name for t in spec.inputs}
    params = {v.name: v for v in graph.input if v.name not in real_inputs}
    consumers: dict[str, list[Any]] = {name: [] for name in params}
    for node in graph.node:
        for name in node.input:
            if name in consumers:
                consumers[name].append(node)

    # (initializer name, source weight, permutation or None), in the order the graph lists the weights.
    plan: list[tuple[str, str, list[int] | None]] = []
    folded: list[Any] = []
    # A weight used at several places (the code predictor runs its layers once per code group) has
    # a Transpose at each: all of them share one stored copy.
    alias: dict[str, str] = {}
    for name, users in consumers.items():
        if not users:
            continue
        keep = False
        stored: dict[tuple[int, ...], str] = {}
        for node in users:
            if node.op_type == "Transpose" and len(node.input) == 1:
                rank = len(params[name].type.tensor_type.shape.dim)
                perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None) or list(
                    reversed(range(rank))
                )
                first = stored.setdefault(tuple(perm), node.output[0])
                if first == node.output[0]:
                    plan.append((first, name, perm))
                else:
                    alias[node.output[0]] = first
                folded.append(node)
            else:
                keep = True
        if keep:
            plan.append((name, name, None))
    for node in folded:
        graph.node.remove(node)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in alias:
                node.input[i] = alias[name]
    for value in graph.output:
        if value.name in alias:
            raise ExportError(f"{spec.name}: graph output {value.name} is a transposed weight")
    kept = [v for v in graph.input if v.name in real_inputs]
    del graph.input[:]
    graph.input.extend(kept)

    dtypes = {name: params[name].type.tensor_type.elem_type for name in params}
    data_path = out_file.with_name(out_file.name + ".data")
    with data_path.open("wb") as data:
        external = ExternalData(graph, data, data_path.name)
        for init_name, src, axes in plan:
            arr = np.asarray(weights(src))
            if axes is not None:
                arr = np.transpose(arr, axes)
            arr = np.ascontiguousarray(arr)
            want = onnx.helper.tensor_dtype_to_np_dtype(dtypes[src])
            if arr.dtype != want:
                raise ExportError(f"{spec.name}: weight {src} is {arr.dtype}, the traced graph expects {want}")
            external.add(init_name, arr)
            del arr
    stamp_io(model, spec)
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    out_file.write_bytes(model.SerializeToString())
    del model
    try:
        onnx.checker.check_model(str(out_file))
    except Exception as exc:
        raise ExportError(f"{out_file.name} fails onnx.checker: {exc}") from exc
    return out_file


def trace_graph(module: Any, args: tuple[Any, ...], spec: Any, path: Path, *, opset: int = OPSET,
                export_params: bool = True, constant_folding: bool = True) -> Path:
    """The one torch.onnx.export call: the legacy TorchScript exporter with the spec's input and
    output names and dynamic axes, writing `path` (callers post-process and check it).

    Legacy tracing rather than dynamo: for these explicit wrappers it is 3-4x faster (tiny code2wav:
    4 s vs 13-19 s; real dims: 17 s vs 46 s for both graphs; dynamo's optimizer took minutes for the
    unrolled code predictor) and its shapes stay symbolic where the wrappers read them from
    tensors. Every graph is validated against the reference afterwards, so a shape the tracer baked
    in fails export, not serving."""
    import warnings

    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings on static Python ints; deprecation notice
        try:
            torch.onnx.export(
                module, args, str(path), input_names=spec.input_names, output_names=spec.output_names,
                dynamic_axes=spec.dynamic_axes(), opset_version=opset, do_constant_folding=constant_folding,
                export_params=export_params, dynamo=False,
            )
        except Exception as exc:
            raise ExportError(f"torch.onnx.export of {spec.name} failed: {exc}") from exc
    return Path(path)


def export_inline(module: Any, args: tuple[Any, ...], spec: Any, out_dir: Path, *, opset: int = OPSET,
                  exporter: str = EXPORTER_INLINE) -> Path:
    """Trace `module` with its weights in the graph (constant folding on) and write
    `<out_dir>/<spec.filename>` (weights in `<file>.data` only past protobuf's limit): the spec's
    I/O stamped on (names, dtypes, dims), `graph` and `exporter` in its metadata, onnx.checker run.
    For graphs whose weights fit in memory twice over (vocoders, encoders); big ones go through
    `export_bound`."""
    import onnx

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / spec.filename
    t0 = time.perf_counter()
    trace_graph(module, args, spec, path, opset=opset)
    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise ExportError(f"exported graph {path.name} does not load: {exc}") from exc
    stamp_io(model, spec)
    onnx.helper.set_model_props(model, {"graph": spec.name, "exporter": exporter})
    save_onnx(model, path)
    del model
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:
        raise ExportError(f"{spec.name}: exported graph fails onnx.checker: {exc}") from exc
    logger.info("exported %s in %.1f s (%.1f MB)", path.name, time.perf_counter() - t0, file_size(path) / 2**20)
    return path


def export_checked(module: Any, spec: Any, cases: Sequence[dict[str, np.ndarray]], out_dir: Path,
                   tolerance: dict[str, float] | float, example: int = 0) -> dict[str, Any]:
    """`export_inline` of `module` (traced on `cases[example]`), then every output of the graph checked against
    the module's over every case (feeds by the spec's input names); the graph's validation report."""
    import torch

    with torch_threads(), torch.inference_mode():
        want = []
        for case in cases:
            res = module(*(torch.from_numpy(case[k]) for k in spec.input_names))
            want.append([r.numpy() for r in (res if isinstance(res, tuple) else (res,))])
        path = export_inline(module, tuple(torch.from_numpy(cases[example][k]) for k in spec.input_names), spec, out_dir)
    session = ort_session(path)
    tr = ErrorTracker()
    for i, (case, refs) in enumerate(zip(cases, want, strict=True)):
        for name, got, ref in zip(spec.output_names, ort_run(session, case), refs, strict=True):
            tr.add(name, got, ref, f"case {i} {tuple(case[spec.input_names[0]].shape)}")
    del session
    return tr.finish(spec.name, path, tolerance)


def export_bound(module: Any, args: tuple[Any, ...], spec: Any, out_dir: Path, opset: int = OPSET,
                 exporter: str = EXPORTER_BOUND) -> Path:
    """Trace `module` without its parameters (no weight is copied while tracing) and write the graph
    with them bound one at a time (`bind_weights`): `<spec.filename>` plus `<spec.filename>.data`.

    Constant folding stays off: with parameters left out of the trace the exporter would fold a
    Transpose of a weight into an anonymous graph input whose values it never writes. bind_weights
    folds those Transposes itself; the remaining constant arithmetic (shapes, masks) is folded by
    onnxruntime when a session loads the graph. `exporter` goes into the graph's metadata."""
    out_dir = Path(out_dir)
    out_file = out_dir / spec.filename
    state = module.state_dict(keep_vars=True)

    def weight(name: str) -> np.ndarray:
        if name not in state:
            raise ExportError(f"{spec.name}: the traced graph wants {name!r}, which the module does not have")
        return state[name].detach().numpy()

    with scratch_dir(out_dir) as tmp:
        tmp_file = trace_graph(module, args, spec, tmp / spec.filename, opset=opset, export_params=False,
                               constant_folding=False)
        bind_weights(tmp_file, out_file, weight, {"graph": spec.name, "exporter": exporter}, spec)
    return out_file


def file_size(path: Path) -> int:
    path = Path(path)
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


def remove_graph(path: Path) -> None:
    """Delete an ONNX file and its `<file>.data`, if any."""
    path = Path(path)
    path.with_name(path.name + ".data").unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def replace_graph(src: Path, dst: Path) -> Path:
    """Move the ONNX file `src` (with its `<file>.data`, if any) to `dst`, replacing `dst` and its data.

    A graph's external data file is named in the graph itself, so when `src` has one it is renamed
    to `<dst>.data` and the graph rewritten to point at it; an old `<dst>.data` (e.g. the fp32 weights
    of a graph replaced by its int8 version) is deleted rather than left behind.
    """
    import onnx

    src, dst = Path(src), Path(dst)
    src_data = src.with_name(src.name + ".data")
    dst_data = dst.with_name(dst.name + ".data")
    if dst_data.exists():
        dst_data.unlink()
    if not src_data.exists():
        os.replace(src, dst)
        return dst
    model = onnx.load(str(src), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                if entry.value != src_data.name:
                    raise ExportError(f"{src.name}: tensor {tensor.name} is stored in {entry.value}, not {src_data.name}")
                entry.value = dst_data.name
    os.replace(src_data, dst_data)
    dst.write_bytes(model.SerializeToString())
    src.unlink()
    return dst


@dataclass
class CodeStream:
    """A streaming codes -> audio graph, exported and checked (`export_code_stream`)."""

    path: Path
    spec: Any  # its GraphSpec
    state_size: int
    layout: list[list[Any]]  # [part name, its shape] of the flat state, in order
    want: list[np.ndarray]  # each case's whole decode by the torch module
    session: Any  # the graph's ONNX Runtime session, for the family's further checks
    tracker: ErrorTracker  # the checks so far ("pcm")


def export_code_stream(whole: Callable[[], Any], stream: Callable[[], Any], make_spec: Callable[[int], Any],
                       cases: Sequence[np.ndarray], chunks: Sequence[Sequence[int]], out: Path) -> CodeStream:
    """Export the exact streaming decoder `stream()` (in eval mode; a module of (codes [B, groups, n], state
    [B, S]) -> (pcm, new_state), with its `state_size` and `layout`) as `make_spec(state_size)` into `out`, and
    check each case's codes [B, groups, T] run through the graph in its `chunks` against the whole decode
    `whole()` of them."""
    import torch

    with torch_threads(), torch.inference_mode():
        decoder = whole().eval()
        want = [decoder(torch.from_numpy(c)).numpy() for c in cases]
        del decoder
        module = stream().eval()
        size = module.state_size
        layout = [[name, list(shape)] for name, shape in module.layout]
        gspec = make_spec(size)
        path = export_inline(module, (torch.from_numpy(cases[0][:, :, :3]), torch.zeros(2, size)), gspec, out)
        del module
    sess = ort_session(path)
    tr = ErrorTracker()
    for c, w, ch in zip(cases, want, chunks, strict=True):
        tr.add("pcm", run_in_chunks(sess, c, size, ch), w, f"chunks {'+'.join(map(str, ch))} vs whole")
    return CodeStream(path, gspec, size, layout, want, sess, tr)
