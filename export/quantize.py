"""Quantized precisions (`export --precision int8|int4`) of validated fp32 graphs: int8 dynamic
(MatMulInteger) or in blocks, and int4 weight-only (MatMulNBits), each measured against the fp32
graph (`quantize_graph`, `compare_outputs`) before it takes the fp32 graph's place.

Everything here fails with `ttscore.contract.errors.ExportError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from export.tracing import (
    INLINE_BYTES,
    ExternalData,
    check,
    file_size,
    fits_inline,
    max_abs,
    ort_session,
    remove_graph,
    replace_graph,
    save_onnx,
    scratch_dir,
)
from ttscore.contract.errors import ExportError, InvalidRequest
from ttscore.contract.kv import past_key, past_value

logger = logging.getLogger(__name__)


def fp32_int8_int4(display: str, precision: str) -> None:
    """Refuse any precision but fp32, int8 and int4 for a family that quantizes (400 naming `precision`)."""
    if precision not in ("fp32", "int8", "int4"):
        raise InvalidRequest(f"{display} exports fp32, int8 or int4 (got --precision {precision})", "precision")


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


def quantize_int8(onnx_path: Path, out_path: Path | None = None, *, block_size: int | None = None,
                  only: Callable[[str], bool] | None = None, gemm: bool = False) -> Path:
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
            quantize_matmuls(optimized, out_path, block_size=block_size, only=only, gemm=gemm)
        except ExportError:
            raise
        except Exception as exc:
            raise ExportError(f"int8 quantization of {onnx_path.name} failed: {exc}") from exc
    if data.exists() and fits_inline(data.stat().st_size):
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


def quantize_matmuls(src: Path, dst: Path, *, block_size: int | None = None,
                     only: Callable[[str], bool] | None = None, gemm: bool = False) -> Path:
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

    `gemm`: each Gemm with a constant 2-D weight (a Linear on a 2-D input; alpha = beta = 1, transA = 0)
    becomes a MatMul (its weight transposed where transB) and an Add of its bias first, so it is quantized
    too; off by default (the graphs quantized before it was added keep their Gemms float).
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

    source_nodes = list(graph.node)
    if gemm:
        source_nodes = _gemms_as_matmuls(source_nodes, inits, read)
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
        if only is not None and not only(node.name):
            return None
        return weight

    # Blocks: the MatMuls of one activation (q/k/v, gate/up) become ONE MatMulNBits over their
    # weights side by side, then a Split: the activation is quantized once and one kernel call
    # streams all their weights (columns are quantized independently, so the result is the same).
    siblings: dict[str, list[Any]] = {}
    if block_size is not None:
        for node in source_nodes:
            if quantizable(node) is not None and len(inits[node.input[1]].dims) == 2:
                siblings.setdefault(node.input[0], []).append(node)
    emitted: set[int] = set()
    for node in source_nodes:
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
    with data_path.open("wb") as data:
        external = ExternalData(graph, data, data_path.name)
        for name, value in pending:
            if isinstance(value, np.ndarray):
                arr = value
            elif value.data_location == TensorProto.EXTERNAL or value.ByteSize() >= INLINE_BYTES:
                arr = read(value)
            else:
                graph.initializer.append(value)
                continue
            external.add(name, arr)
            del arr
    dst.write_bytes(model.SerializeToString())
    return dst


def _gemms_as_matmuls(nodes: list[Any], inits: dict[str, Any], read: Callable[[Any], np.ndarray]) -> list[Any]:
    """`nodes` with each Gemm of a constant 2-D float weight (alpha = beta = 1, transA = 0) as a MatMul of the
    same name, its weight transposed where transB (a new initializer in `inits`), and an Add of the bias C."""
    from onnx import TensorProto, helper, numpy_helper

    out: list[Any] = []
    for node in nodes:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = inits.get(node.input[1]) if node.op_type == "Gemm" else None
        if (weight is None or weight.data_type != TensorProto.FLOAT or len(weight.dims) != 2
                or node.input[0] in inits or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0
                or attrs.get("beta", 1.0) != 1.0):
            out.append(node)
            continue
        w = weight.name
        if attrs.get("transB", 0):
            w = weight.name + "_transposed"
            if w not in inits:
                inits[w] = numpy_helper.from_array(np.ascontiguousarray(read(weight).T), w)
        y = node.output[0]
        bias = len(node.input) > 2 and node.input[2] != ""
        out.append(helper.make_node("MatMul", [node.input[0], w], [y + "_matmul" if bias else y], node.name))
        if bias:
            out.append(helper.make_node("Add", [y + "_matmul", node.input[2]], [y], node.name + "_bias"))
    return out


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
                   int8_block_size: int | None = None, only: tuple[str, str] | None = None,
                   gemm: bool = False) -> dict[str, Any]:
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
    MatMulInteger until measured. int4: MatMulNBits 4-bit, block 32. `only` (int8): (a regular expression, what
    it names): only the MatMuls whose node name it matches are quantized, the rest stay fp32; the manifest's
    method says which (e.g. a codec whose stage projections lose the SNR its transformer layers keep). `gemm`
    (int8 dynamic): its Gemms of a constant weight too (`quantize_matmuls`)."""
    path = Path(path)
    check(precision in ("int8", "int4"), f"cannot quantize to {precision!r}")
    logger.info("quantizing %s to %s", path.name, precision)
    if precision == "int8" and int8_block_size:
        q = quantize_int8(path, block_size=int8_block_size)
        method = int8_block_method(int8_block_size)
    elif precision == "int8" and only:
        import re

        pattern = re.compile(only[0])
        q = quantize_int8(path, only=lambda name: pattern.search(name) is not None)
        method = f"{INT8_METHOD}, {only[1]} only"
    elif precision == "int8":
        q, method = quantize_int8(path, gemm=gemm), INT8_METHOD
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


def random_step_feeds(rng: Any, shapes: Sequence[tuple[int, int, int]], *, hidden: int, layers: int, kv_heads: int,
                      head_dim: int, mask: bool = True, positions: bool = True) -> list[dict[str, np.ndarray]]:
    """Random feeds of a decoder step with an explicit past (ttscore.contract.kv) for comparing a quantized graph
    with its fp32 form: per (batch, past, new) of `shapes`, inputs_embeds, the attention mask and the positions
    where the graph takes them, and a random past."""
    feeds = []
    for b, p, t in shapes:
        feed: dict[str, np.ndarray] = {"inputs_embeds": rng.standard_normal((b, t, hidden)).astype(np.float32)}
        if mask:
            feed["attention_mask"] = np.ones((b, p + t), np.int64)
        if positions:
            feed["position_ids"] = np.tile(np.arange(p, p + t, dtype=np.int64), (b, 1))
        for i in range(layers):
            for name in (past_key(i), past_value(i)):
                feed[name] = rng.standard_normal((b, kv_heads, p, head_dim)).astype(np.float32)
        feeds.append(feed)
    return feeds


def compare_outputs(fp32_path: Path, quant_path: Path, feeds: list[dict[str, Any]],
                    argmax: Sequence[str] = ()) -> dict[str, Any]:
    """Run both graphs on the same feeds: per output the max abs error and the SNR (dB) of the
    quantized output against fp32's, worst over the feeds (`snr_db`: the worst output's). `argmax`:
    outputs that are logits over their last axis: `argmax_changed` counts, over all the feeds, the
    positions whose argmax the quantized graph changes, out of how many (`[changed, positions]`)."""
    t0 = time.perf_counter()
    a, b = ort_session(Path(fp32_path)), ort_session(Path(quant_path))
    names = [o.name for o in a.get_outputs()]
    err: dict[str, float] = {}
    snr: dict[str, float] = {}
    changed = {n: [0, 0] for n in argmax}
    for feed in feeds:
        try:
            want, got = a.run(names, feed), b.run(names, feed)
        except Exception as exc:
            raise ExportError(f"quantized {Path(fp32_path).name} does not run: {exc}") from exc
        for n, fp32, quant in zip(names, want, got, strict=True):
            # Entries non-finite and equal on both sides (masked logits: -inf) agree: compared as zeros.
            agree = ~np.isfinite(fp32) & (fp32 == quant)
            w, g = (np.where(agree, 0, fp32), np.where(agree, 0, quant)) if agree.any() else (fp32, quant)
            err[n] = max(err.get(n, 0.0), max_abs(g, w))
            snr[n] = min(snr.get(n, np.inf), snr_db(w, g))
            if n in changed:
                changed[n][0] += int((np.argmax(w, axis=-1) != np.argmax(g, axis=-1)).sum())
                changed[n][1] += int(np.prod(w.shape[:-1]))
    return {
        "max_abs_err": {n: float(f"{v:.3g}") for n, v in err.items()},
        "snr_db_per_output": snr,
        "snr_db": min(snr.values()),
        **({"argmax_changed": changed} if changed else {}),
        "validate_seconds": round(time.perf_counter() - t0, 2),
    }
