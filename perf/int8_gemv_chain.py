"""How fast each ONNX Runtime weight format streams a decoder's weights at batch 1 (issue 29).

    PYTHONPATH=. .venv/bin/python perf/int8_gemv_chain.py --work /tmp/gemv --out perf/results/int8-gemv-chain.md

A chain of `--pairs` x (MatMul H->I, MatMul I->H) with distinct random weights (default 32 pairs of
1024x3072: 201 M weights, the 0.6B talker's MLP shapes, 200 MB even at int8, far more than the L3),
so every call reads every weight from memory once, as a decode step does. Each weight format is
built from the same fp32 graph, every session has `--threads` intra-op threads, the formats run
one call each in turn for `--reps` rounds (median), at 1 row and each `--batch` (a decode batch, a
prefill burst). Reports ms per call,
weights streamed per second and the output's max error relative to fp32's largest value.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (label, how): "dyn" MatMulInteger per tensor, "dynpc" per channel (onnxruntime's quantize_dynamic),
# "blk<B>" this project's quantize_matmuls(block_size=B), "nb<bits>-<block>-a<level>" MatMulNBitsQuantizer.
FORMATS = ["fp32", "dyn", "dynpc", "nb8-32-a4", "nb8-128-a4", "blk256", "nb8-128-a1", "nb4-32-a4", "nb4-128-a4"]


def build(fmt: str, fp32: Path, work: Path) -> Path:
    import onnx

    from export.quantize import quantize_matmuls
    from export.tracing import save_onnx

    out = work / f"{fmt}.onnx"
    if fmt == "fp32" or out.exists():
        return fp32 if fmt == "fp32" else out
    if fmt == "dyn":
        quantize_matmuls(fp32, out)
    elif fmt == "dynpc":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], extra_options={"MatMulConstBOnly": True})
    elif fmt.startswith("blk"):
        quantize_matmuls(fp32, out, block_size=int(fmt[3:]))
    else:
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            MatMulNBitsQuantizer,
        )

        bits, block, level = fmt[2:].split("-")
        config = DefaultWeightOnlyQuantConfig(block_size=int(block), is_symmetric=True, accuracy_level=int(level[1:]),
                                              bits=int(bits))
        quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), algo_config=config)
        quantizer.process()
        save_onnx(quantizer.model.model, out)
    return out


def chain(path: Path, hidden: int, inner: int, pairs: int) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    from export.tracing import save_onnx

    if path.exists():
        return path
    rng = np.random.default_rng(0)
    nodes, weights, prev = [], [], "x"
    for p in range(pairs):
        for j, (k, n) in enumerate(((hidden, inner), (inner, hidden))):
            name = f"w{p}_{j}"
            weights.append(numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), name))
            nodes.append(helper.make_node("MatMul", [prev, name], [f"y{p}_{j}"]))
            prev = f"y{p}_{j}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 1, hidden])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], weights)
    save_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="where the graphs are built (cached)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--inner", type=int, default=3072)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 80], help="rows besides 1 (decode batch, prefill burst)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--formats", nargs="+", default=FORMATS)
    ap.add_argument("--out", type=Path, help="write the table (Markdown)")
    args = ap.parse_args()
    import onnxruntime as ort

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    args.work.mkdir(parents=True, exist_ok=True)
    fp32 = chain(args.work / "fp32.onnx", args.hidden, args.inner, args.pairs)
    sessions = {}
    for fmt in args.formats:
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        sessions[fmt] = ort.InferenceSession(str(build(fmt, fp32, args.work)), so, providers=["CPUExecutionProvider"])
    weights = 2 * args.pairs * args.hidden * args.inner
    rows = {fmt: {} for fmt in sessions}
    for batch in (1, *args.batch):
        x = np.random.default_rng(1).standard_normal((batch, 1, args.hidden)).astype(np.float32)
        ref = sessions["fp32"].run(None, {"x": x})[0] if "fp32" in sessions else None
        times: dict[str, list[float]] = {fmt: [] for fmt in sessions}
        for s in sessions.values():
            s.run(None, {"x": x})
        for _ in range(args.reps):
            for fmt, s in sessions.items():
                t0 = time.perf_counter()
                s.run(None, {"x": x})
                times[fmt].append(1000 * (time.perf_counter() - t0))
        for fmt, s in sessions.items():
            ms = statistics.median(times[fmt])
            rows[fmt][batch] = ms
            if batch == 1 and ref is not None:
                out = s.run(None, {"x": x})[0]
                rows[fmt]["err"] = float(np.abs(out - ref).max() / np.abs(ref).max())
    lines = [f"{args.pairs} x (MatMul {args.hidden}x{args.inner}, {args.inner}x{args.hidden}), {weights / 1e6:.0f} M weights, "
             f"{args.threads} threads, median of {args.reps}",
             "", "| format | 1 row: ms | G weights/s | " + " | ".join(f"{b} rows: ms" for b in args.batch)
             + " | max error / max fp32 |", "|---|---|---|" + "---|" * len(args.batch) + "---|"]
    for fmt, r in rows.items():
        lines.append(f"| {fmt} | {r[1]:.2f} | {weights / r[1] / 1e6:.1f} | "
                     + " | ".join(f"{r[b]:.2f}" for b in args.batch) + f" | {r.get('err', 0):.3f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
