"""The one ONNX helper stack every family's exporter uses: tracing a module to ONNX (`trace_graph`,
the only torch.onnx.export call, behind `export_inline` and `export_bound`), saving ONNX (external
data when large), ONNX Runtime sessions (`ort_session`, `ort_run`), validation against the PyTorch
reference (`check_close`, `ErrorTracker`) and int8/int4 quantization.

Everything here fails with `ttscore.contract.errors.ExportError`, the one error type export surfaces.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import CheckpointError, ExportError, InvalidRequest

logger = logging.getLogger(__name__)

# protobuf cannot hold more than 2 GiB; stay well below it before switching to external data.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


def fail(message: str) -> None:
    raise ExportError(message)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ExportError(message)


OPSET = 18
EXPORTER_INLINE = "torch.onnx.export(dynamo=False) (legacy TorchScript exporter)"
EXPORTER_BOUND = "torch.onnx.export(dynamo=False, export_params=False) (legacy TorchScript exporter) + bind_weights"


def only_fp32(display: str, precision: str) -> None:
    """Refuse any other precision for a family that exports fp32 only so far (400 naming `precision`)."""
    if precision != "fp32":
        raise InvalidRequest(f"{display} exports fp32 only so far (got --precision {precision})", "precision")


def stage_announcer(stages: list[str], progress: Callable[[int, int, str], None] | None) -> Callable[[str], None]:
    """What an exporter calls as each of its `stages` begins: logged, and reported as "step i of n"
    to `progress` (the CLI's progress line) when one is given."""

    def stage(label: str) -> None:
        logger.info("export stage: %s", label)
        if progress is not None:
            progress(stages.index(label) + 1, len(stages), label)

    return stage


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
    if size > EXTERNAL_DATA_THRESHOLD:
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
_ALIGN = 4096
# Tensors smaller than this stay inline in the graph file (onnx's own default threshold).
_INLINE_BYTES = 1024


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
    from onnx import numpy_helper

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
    offset = 0
    with data_path.open("wb") as data:
        for init_name, src, axes in plan:
            arr = np.asarray(weights(src))
            if axes is not None:
                arr = np.transpose(arr, axes)
            arr = np.ascontiguousarray(arr)
            want = onnx.helper.tensor_dtype_to_np_dtype(dtypes[src])
            if arr.dtype != want:
                raise ExportError(f"{spec.name}: weight {src} is {arr.dtype}, the traced graph expects {want}")
            if arr.nbytes < _INLINE_BYTES:
                graph.initializer.append(numpy_helper.from_array(arr, init_name))
            else:
                offset = -(-offset // _ALIGN) * _ALIGN
                data.seek(offset)
                data.write(arr.data)
                tensor = onnx.TensorProto(name=init_name, data_type=dtypes[src], dims=arr.shape)
                tensor.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", data_path.name), ("offset", str(offset)), ("length", str(arr.nbytes))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, value
                graph.initializer.append(tensor)
                offset += arr.nbytes
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


def load_tensors(model: Any, names: list[str], files: dict[str, tuple[Path, str]], where: Path) -> None:
    """Materialize the parameters (or persistent buffers) `names` of `model` from safetensors, one
    tensor at a time; floating tensors are cast to float32, others keep their dtype.

    `files` maps a state-dict name to (safetensors file, key in that file). Each tensor opens its
    own mapping: every page read stays resident while a mapping is open, so one mapping for a whole
    stage would hold the stage's on-disk (e.g. bf16) bytes on top of their float32 copies. The
    lazy-loading half of bounded export memory (export/qwen3_tts/reference.py StagedReference for Qwen3-TTS,
    export/voxcpm2/reference.py StagedVoxCPM2): the model is built on the meta device and each
    export stage loads only what it traces, then `unload_tensors` puts it back.
    """
    import torch
    from safetensors import safe_open

    missing = [n for n in names if n not in files]
    if missing:
        raise CheckpointError(f"{where}: {len(missing)} weights missing from the safetensors files, e.g. {missing[0]}")
    for n in names:
        module, leaf = _owner(model, n)
        is_param = leaf in module._parameters
        want = module._parameters[leaf] if is_param else module._buffers.get(leaf)
        if want is None:
            raise CheckpointError(f"{where}: {n} is neither a parameter nor a buffer of the model")
        path, key = files[n]
        with safe_open(str(path), framework="pt") as fh:
            tensor = fh.get_tensor(key)
        if tensor.is_floating_point():
            tensor = tensor.to(torch.float32)
        if tuple(tensor.shape) != tuple(want.shape):
            raise CheckpointError(f"{where}: {n} has shape {tuple(tensor.shape)}, the config says {tuple(want.shape)}")
        if is_param:
            module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=False)
        else:
            module._buffers[leaf] = tensor


def unload_tensors(model: Any, names: list[str]) -> None:
    """Put the parameters `names` back on the meta device (their memory is freed once no one else
    holds them); buffers are left as they are."""
    import torch

    for n in names:
        module, leaf = _owner(model, n)
        p = module._parameters.get(leaf)
        if p is not None and not p.is_meta:
            module._parameters[leaf] = torch.nn.Parameter(
                torch.empty(p.shape, dtype=p.dtype, device="meta"), requires_grad=False
            )


def _owner(model: Any, name: str) -> tuple[Any, str]:
    path, _, leaf = name.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf


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


def quantize_weights(onnx_path: Path, bits: int, out_path: Path | None = None, block_size: int = 32) -> Path:
    """Weight-only quantization of the constant-weight MatMuls to MatMulNBits (`bits` 4 or 8,
    symmetric, one scale per `block_size` weights along K) with accuracy_level 4: activations are
    quantized to int8 per block at run time, the int8 GEMM/GEMV kernels of ONNX Runtime's MLAS.
    Activations x activations MatMuls (attention) stay float32. Returns `<stem>.int{bits}.onnx`.
    Unlike `quantize_int8` this loads the whole (basic-optimized) float graph: a 1.7B talker needs
    its weights' size in memory a few times over."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    check(bits in (4, 8), f"weight-only quantization supports 4 or 8 bits, not {bits}")
    onnx_path = Path(onnx_path)
    out_path = out_path or onnx_path.with_name(f"{onnx_path.stem}.int{bits}.onnx")
    t0 = time.perf_counter()
    with scratch_dir(out_path.parent) as tmp:
        # Basic (semantics-preserving) optimization first: it folds the Identity nodes the legacy
        # exporter puts in front of shared weights, which the quantizer would not see through.
        optimized = optimize_basic(onnx_path, tmp / "basic.onnx")
        try:
            config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, accuracy_level=4, bits=bits)
            quantizer = MatMulNBitsQuantizer(onnx.load(str(optimized)), algo_config=config)
            quantizer.process()
            model = quantizer.model.model
        except Exception as exc:
            raise ExportError(f"int{bits} weight-only quantization of {onnx_path.name} failed: {exc}") from exc
        save_onnx(model, out_path)
        del model, quantizer
    ort_session(out_path)  # loads = validated structurally; callers compare outputs
    logger.info("quantized %s -> %s in %.1fs", onnx_path.name, out_path.name, time.perf_counter() - t0)
    return out_path


def quantize_int8(onnx_path: Path, out_path: Path | None = None, *, block_size: int | None = None) -> Path:
    """Dynamic int8 quantization of the MatMul weights (CPU), as onnxruntime's `quantize_dynamic`
    does it, one weight at a time.

    The legacy exporter routes weights used more than once through Identity nodes, which the
    quantizer does not see through; onnxruntime's basic (semantics-preserving, provider
    independent) optimization removes them first. Then `quantize_matmuls` rewrites each MatMul with
    a constant weight (see there; `block_size`: 8-bit MatMulNBits instead). Returns the new path
    (`<stem>.int8.onnx`) after checking that onnxruntime loads it.
    """
    onnx_path = Path(onnx_path)
    if out_path is None:
        out_path = onnx_path.with_name(onnx_path.stem + ".int8.onnx")
    t0 = time.perf_counter()
    data = out_path.with_name(out_path.name + ".data")
    with scratch_dir(out_path.parent) as tmp:
        optimized = optimize_basic(onnx_path, tmp / "basic.onnx")
        try:
            quantize_matmuls(optimized, out_path, block_size=block_size)
        except ExportError:
            raise
        except Exception as exc:
            raise ExportError(f"int8 quantization of {onnx_path.name} failed: {exc}") from exc
    if data.exists() and data.stat().st_size < EXTERNAL_DATA_THRESHOLD:
        # The int8 graph fits in one protobuf (e.g. the 1.7B talker: 5.7 GB fp32 -> ~1.4 GB): keep
        # it a single self-contained file.
        import onnx

        model = onnx.load(str(out_path), load_external_data=True)
        data.unlink()
        save_onnx(model, out_path)
        del model
    ort_session(out_path)  # loads = validated structurally; callers compare outputs
    logger.info("quantized %s -> %s in %.1fs", onnx_path.name, out_path.name, time.perf_counter() - t0)
    return out_path


def optimize_basic(src: Path, dst: Path) -> Path:
    """onnxruntime's basic graph optimizations of `src` written to `dst`, weights in `<dst>.data`."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", dst.name + ".data")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ExportError(f"onnxruntime cannot optimize {Path(src).name} for quantization: {exc}") from exc
    return dst


def quantize_blocks(w: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 8-bit block quantization of a MatMul weight [K, N] in MatMulNBits' layout, by
    onnxruntime's own MLAS routine (what MatMulNBitsQuantizer calls): K padded to whole blocks,
    returns (packed uint8 [N, blocks, block_size], scales float32 [N, blocks])."""
    from onnxruntime.capi._pybind_state import quantize_matmul_8bits

    w = np.asarray(w, np.float32)
    k, n = w.shape
    blocks = -(-k // block_size)
    if blocks * block_size != k:
        w = np.pad(w, ((0, blocks * block_size - k), (0, 0)))
    packed = np.zeros((n, blocks, block_size), np.uint8)
    scales = np.zeros((n, blocks), np.float32)
    zero_points = np.zeros((n, blocks), np.uint8)  # unused when symmetric
    quantize_matmul_8bits(packed, np.ascontiguousarray(w), scales, zero_points, block_size, n, k, True)
    return packed, scales


def quantize_matmuls(src: Path, dst: Path, *, block_size: int | None = None) -> Path:
    """Rewrite every float MatMul whose weight (B) is an initializer into onnxruntime's dynamic int8
    pattern, writing `dst` with all of its weights in `<dst>.data`.

    The result is what `onnxruntime.quantization.quantize_dynamic(weight_type=QInt8,
    op_types_to_quantize=["MatMul"], per_channel=False, extra_options={"MatMulConstBOnly": True})`
    makes of the same graph (tests/export_tests/test_export_memory.py compares the two), with the same names so
    that onnxruntime's load-time fusions (DynamicQuantizeMatMul) apply: the activation goes through
    one DynamicQuantizeLinear per tensor (uint8), the weight is quantized by the quantizer's own
    `quantize_data` (symmetric int8, one scale), and MatMulInteger -> Cast -> Mul by the product of
    the two scales gives the original output. quantize_dynamic loads the whole float model into
    protobuf and keeps copies while it works: 16 GiB for the 1.7B talker (5.7 GB of weights); here
    one weight is in memory at a time.


    `block_size` (16 .. 256): instead, 8-bit weight-only `MatMulNBits` (com.microsoft), with the
    packed weights and scales onnxruntime's MatMulNBitsQuantizer(bits=8, block_size,
    is_symmetric=True, accuracy_level=4) writes (the same MLAS routine, `quantize_blocks`): one
    scale per `block_size` weights of a column, the activations quantized to int8 per row and block
    at run time. The MatMuls that share an activation (q/k/v, gate/up) become one node and a Split.
    On the Qwen3-TTS 0.6B code predictor with block 256: as fast or up to 9% faster than
    MatMulInteger at batch 1 and 8; at many rows (a prefill) 1.5x slower (perf/README.md, issue 29).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.quant_utils import quantize_data

    src, dst = Path(src), Path(dst)
    model = onnx.load(str(src), load_external_data=False)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    del graph.initializer[:]

    def read(t: Any) -> np.ndarray:
        if t.data_location != TensorProto.EXTERNAL:
            return numpy_helper.to_array(t)
        info = {e.key: e.value for e in t.external_data}
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
        count = int(np.prod(t.dims, dtype=np.int64))
        with (src.parent / info["location"]).open("rb") as fh:
            fh.seek(int(info.get("offset", 0)))
            arr = np.fromfile(fh, dtype=dtype, count=count)
        return arr.reshape(tuple(t.dims))

    nodes: list[Any] = []
    scale_products: set[str] = set()
    quantized_weights: dict[str, tuple[str, str, str]] = {}  # weight -> (q, zero point, scale)
    quantized_inputs: dict[str, tuple[str, str, str]] = {}  # activation -> (q, scale, zero point)
    pending: list[tuple[str, Any]] = []  # (name, TensorProto or int8 array) to write, in order
    pending_names: set[str] = set()  # MatMulNBits weights already in `pending` (one per shared weight)

    def quantizable(node: Any) -> Any:
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if weight is None or weight.data_type != TensorProto.FLOAT or node.input[0] in inits:
            return None
        return weight

    # Blocks: the MatMuls of one activation (q/k/v, gate/up) become ONE MatMulNBits over their
    # weights side by side, then a Split: the activation is quantized once and one kernel call
    # streams all their weights (columns are quantized independently, so the result is the same).
    siblings: dict[str, list[Any]] = {}
    if block_size is not None:
        for node in graph.node:
            if quantizable(node) is not None and len(inits[node.input[1]].dims) == 2:
                siblings.setdefault(node.input[0], []).append(node)
    emitted: set[int] = set()
    for node in graph.node:
        weight = quantizable(node)
        if weight is None:
            nodes.append(node)
            continue
        x = node.input[0]
        if block_size is not None and x in siblings:
            if id(node) in emitted:
                continue
            group = siblings[x]
            emitted.update(id(n) for n in group)
            weights = [inits[n.input[1]] for n in group]
            stem = weights[0].name if len(weights) == 1 else f"{weights[0].name}_and_{len(weights) - 1}"
            w_q, w_scale = stem + "_Q8", stem + "_scales"
            if w_q not in pending_names:
                parts = [quantize_blocks(read(w), block_size) for w in weights]
                pending += [(w_scale, np.concatenate([p[1] for p in parts])),
                            (w_q, np.concatenate([p[0] for p in parts]))]
                pending_names.add(w_q)
            k, widths = int(weights[0].dims[0]), [int(w.dims[1]) for w in weights]
            name = group[0].name + "_Q8" if group[0].name else ""
            y = group[0].output[0] if len(group) == 1 else group[0].output[0] + "_siblings"
            nodes.append(helper.make_node("MatMulNBits", [x, w_q, w_scale], [y], name, domain="com.microsoft",
                                          K=k, N=sum(widths), bits=8, block_size=block_size, accuracy_level=4))
            if len(group) > 1:
                split = "split_" + "_".join(map(str, widths))
                if split not in pending_names:
                    pending.append((split, np.asarray(widths, np.int64)))
                    pending_names.add(split)
                nodes.append(helper.make_node("Split", [y, split], [n.output[0] for n in group],
                                              name + "_split" if name else "", axis=-1))
            continue
        if x not in quantized_inputs:
            quantized_inputs[x] = (x + "_quantized", x + "_scale", x + "_zero_point")
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(quantized_inputs[x]), x + "_QuantizeLinear"))
        if weight.name not in quantized_weights:
            w_q, w_zp, w_scale = weight.name + "_quantized", weight.name + "_zero_point", weight.name + "_scale"
            zero_point, scale, q = quantize_data(read(weight).flatten(), TensorProto.INT8, True, reduce_range=False)
            pending.append((w_scale, helper.make_tensor(w_scale, weight.data_type, [], scale.reshape(-1).tolist())))
            pending.append((w_zp, helper.make_tensor(w_zp, TensorProto.INT8, [], zero_point.reshape(-1).tolist())))
            pending.append((w_q, np.asarray(q, dtype=np.int8).reshape(tuple(weight.dims))))
            quantized_weights[weight.name] = (w_q, w_zp, w_scale)
        x_q, x_scale, x_zp = quantized_inputs[x]
        w_q, w_zp, w_scale = quantized_weights[weight.name]
        y = node.output[0]
        name = node.name + "_quant" if node.name else ""
        nodes += [
            helper.make_node("MatMulInteger", [x_q, w_q, x_zp, w_zp], [y + "_output_quantized"], name),
            helper.make_node("Cast", [y + "_output_quantized"], [y + "_output_quantized_cast_output"],
                             y + "_output_quantized_cast", to=TensorProto.FLOAT),
        ]
        scales = name + "_scales_mul" if name else f"{x_scale}_{w_scale}_mul"
        if scales not in scale_products:  # unnamed MatMuls of one (input, weight) pair share it
            scale_products.add(scales)
            nodes.append(helper.make_node("Mul", [x_scale, w_scale], [scales + ":0"], scales))
        nodes.append(helper.make_node("Mul", [y + "_output_quantized_cast_output", scales + ":0"], [y],
                                      name + "_output_scale_mul" if name else ""))
    used = {i for n in nodes for i in n.input}
    pending = [(n, t) for n, t in inits.items() if n in used] + pending
    del graph.node[:]
    graph.node.extend(nodes)
    if block_size is not None and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))

    data_path = dst.with_name(dst.name + ".data")
    offset = 0
    with data_path.open("wb") as data:
        for name, value in pending:
            if isinstance(value, np.ndarray):
                arr = value
            elif value.data_location == TensorProto.EXTERNAL or value.ByteSize() >= _INLINE_BYTES:
                arr = read(value)
            else:
                graph.initializer.append(value)
                continue
            if arr.nbytes < _INLINE_BYTES:
                graph.initializer.append(numpy_helper.from_array(arr, name))
                continue
            offset = -(-offset // _ALIGN) * _ALIGN
            data.seek(offset)
            data.write(np.ascontiguousarray(arr).data)
            tensor = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype), dims=arr.shape)
            tensor.data_location = TensorProto.EXTERNAL
            for key, val in (("location", data_path.name), ("offset", str(offset)), ("length", str(arr.nbytes))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, val
            graph.initializer.append(tensor)
            offset += arr.nbytes
            del arr
    dst.write_bytes(model.SerializeToString())
    return dst


# --- Quantized precisions (`export --precision int8|int4`), shared by every family's exporter ----

# A vocoder (or any graph whose output is audio) keeps a quantized graph only while its audio stays
# this close to fp32's (SNR, dB); otherwise it stays fp32 and the manifest says why.
VOCODER_MIN_SNR_DB = 30.0
QUANTIZED_OPS = ("MatMulInteger", "MatMulNBits")
INT8_METHOD = "int8 dynamic (MatMulInteger, per-tensor weights)"
# int8 in blocks along K (`quantize_graph(int8_block_size=...)`): what Qwen3-TTS exports.
INT8_BLOCK = 256
INT4_METHOD = "int4 weight-only MatMulNBits (block 32, symmetric, int8 activations)"

# Compares a validated fp32 graph with its quantized form: (fp32 path, quantized path) -> the
# manifest's `vs_fp32` report (for an audio graph it has `snr_db`, in dB).
Measure = Callable[[Path, Path], dict[str, Any]]


def snr_db(ref: Any, got: Any) -> float:
    """Signal-to-noise ratio of `got` against `ref`, in dB (one decimal)."""
    ref, err = np.asarray(ref, np.float64), np.asarray(got, np.float64) - np.asarray(ref, np.float64)
    return round(float(10 * np.log10(float((ref**2).sum()) / max(float((err**2).sum()), 1e-30))), 1)


def int8_block_method(block_size: int) -> str:
    """The manifest's `quantized` for int8 in blocks (`quantize_graph(int8_block_size=...)`)."""
    return f"int8 weight-only MatMulNBits (block {block_size}, symmetric, int8 activations)"


def quantized_ops(path: Path) -> set[str]:
    """The quantized operators (MatMulInteger, MatMulNBits) a graph contains."""
    import onnx

    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node} & set(QUANTIZED_OPS)


def quantize_graph(path: Path, precision: str, measure: Measure, *, audio: bool = False,
                   int8_block_size: int | None = None) -> dict[str, Any]:
    """Quantize one validated fp32 graph, measure it against the fp32 graph and put it in its place;
    returns the manifest fields `quantized` (the method, or None where the graph stays fp32) and
    `vs_fp32`. An `audio` graph (a vocoder) keeps its quantized form only at `VOCODER_MIN_SNR_DB`
    or more; a graph with no constant-weight MatMul stays fp32 as it is.

    int8: dynamic quantization (MatMulInteger, one scale per tensor), or with `int8_block_size`
    8-bit MatMulNBits with one scale per block of that many weights of a column. On the 2-vCPU
    development machine, idle, Qwen3-TTS 0.6B (perf/README.md, issue 29), blocks of 256 were as
    fast or faster than MatMulInteger per decode step with a smaller error, but 1.5x slower on a
    prefill of many rows; blocks of 32 were slower (2.3 s vs 1.1 s at batch 8 under load). So only
    graphs that never prefill (the Qwen3-TTS code predictor) use blocks; other families keep
    MatMulInteger until measured. int4: MatMulNBits 4-bit, block 32."""
    path = Path(path)
    check(precision in ("int8", "int4"), f"cannot quantize to {precision!r}")
    logger.info("quantizing %s to %s", path.name, precision)
    if precision == "int8" and int8_block_size:
        q = quantize_int8(path, block_size=int8_block_size)
        method = int8_block_method(int8_block_size)
    elif precision == "int8":
        q, method = quantize_int8(path), INT8_METHOD
    else:
        q, method = quantize_weights(path, 4), INT4_METHOD
    if not quantized_ops(q):
        remove_graph(q)
        return {"quantized": None, "vs_fp32": {"kept": "fp32 (no constant-weight MatMul to quantize)"}}
    vs = measure(path, q)
    vs.pop("file", None)
    if audio and vs["snr_db"] < VOCODER_MIN_SNR_DB:
        remove_graph(q)
        vs["kept"] = f"fp32 (SNR {vs['snr_db']} dB < {VOCODER_MIN_SNR_DB} dB)"
        return {"quantized": None, "vs_fp32": vs}
    vs.setdefault("bytes", file_size(q))
    replace_graph(q, path)  # the quantized graph serves under the fp32 graph's name
    return {"quantized": method, "vs_fp32": vs}


def compare_outputs(fp32_path: Path, quant_path: Path, feeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Run both graphs on the same feeds: per output the max abs error and the SNR (dB) of the
    quantized output against fp32's, worst over the feeds (`snr_db`: the worst output's)."""
    t0 = time.perf_counter()
    a, b = ort_session(Path(fp32_path)), ort_session(Path(quant_path))
    names = [o.name for o in a.get_outputs()]
    err: dict[str, float] = {}
    snr: dict[str, float] = {}
    for feed in feeds:
        try:
            want, got = a.run(names, feed), b.run(names, feed)
        except Exception as exc:
            raise ExportError(f"quantized {Path(fp32_path).name} does not run: {exc}") from exc
        for n, w, g in zip(names, want, got, strict=True):
            err[n] = max(err.get(n, 0.0), max_abs(g, w))
            snr[n] = min(snr.get(n, np.inf), snr_db(w, g))
    return {
        "max_abs_err": {n: float(f"{v:.3g}") for n, v in err.items()},
        "snr_db_per_output": snr,
        "snr_db": min(snr.values()),
        "validate_seconds": round(time.perf_counter() - t0, 2),
    }
