"""Per-graph micro-benchmark of Qwen3-TTS quantization variants and ONNX Runtime session knobs (issue 29).

    PYTHONPATH=. .venv/bin/python perf/qwen3_tts_int8_graphs.py --artifacts ART_0.6B_FP32 --checkpoint CKPT_0.6B --work /tmp/q \
        --variants fp32 dyn nb8 nb4 --threads 2 --spin 0 --batch 1 --reps 5 --out perf/results/int8-graphs.json

Takes an fp32 export (`triton-tts export --precision fp32`), builds each variant of the talker and the
code predictor next to it in `--work` (cached: a variant already there is reused), and times one decode
call of each graph (talker: one new position after `--past` cached ones; code predictor: one frame,
greedy, its 15 passes unrolled in the graph; code2wav_stream: one frame, fp32 in every variant) per
variant and session setting, alternating round-robin so machine load hits every variant alike: each
repetition runs every (variant, setting) `--calls` times and keeps the mean; the table is the median
over `--reps` repetitions. Each variant's error against fp32 is measured as the export does
(export.qwen3_tts.talker.validate_int8's cases: greedy agreement and max abs error).

Variants (graph file `<graph>.<variant>.onnx` in `--work`):
  fp32   the exported graph
  dyn    export.quantize.quantize_int8: DynamicQuantizeLinear + MatMulInteger, per-tensor int8 weights
         (Qwen3-TTS `--precision int8` before issue 29; still the other families')
  dynpc  onnxruntime.quantization.quantize_dynamic, per-channel int8 weights
  nb8    MatMulNBits 8-bit, block 32, accuracy_level 4 (int8 activations per block)
  nb8b   MatMulNBits 8-bit, block 128
  nb8k256  MatMulNBits 8-bit, block 256 (onnxruntime's quantizer)
  blk    export.quantize.quantize_int8(block_size=256): nb8k256 with the MatMuls of one activation
         merged into one node (what Qwen3-TTS `--precision int8` exports since issue 29)
  nb4    MatMulNBits 4-bit, block 32 (what `--precision int4` exports)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRAPHS = ("talker", "code_predictor")


def build(variant: str, fp32: Path, work: Path) -> Path:
    from export.quantize import optimize_basic, quantize_int8, quantize_weights
    from export.tracing import scratch_dir

    out = work / f"{fp32.stem}.{variant}.onnx"
    if variant == "fp32":
        return fp32
    if out.exists():
        return out
    t0 = time.perf_counter()
    if variant == "dyn":
        quantize_int8(fp32, out)
    elif variant in ("nb8", "nb8b", "nb8k256", "nb4"):
        block = {"nb8b": 128, "nb8k256": 256}.get(variant, 32)
        quantize_weights(fp32, 4 if variant == "nb4" else 8, out, block_size=block)
    elif variant == "blk":
        quantize_int8(fp32, out, block_size=256)
    elif variant == "dynpc":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with scratch_dir(work) as tmp:
            basic = optimize_basic(fp32, tmp / "basic.onnx")
            quantize_dynamic(basic, out, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
                             extra_options={"MatMulConstBOnly": True})
    else:
        raise SystemExit(f"unknown variant {variant}")
    print(f"built {out.name} in {time.perf_counter() - t0:.0f}s", flush=True)
    return out


def session(path: Path, threads: int, spin: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", str(spin))
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feeds(graph: str, sess: Any, batch: int, past: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    ins = {i.name: i for i in sess.get_inputs()}
    if graph == "talker":
        hidden = int(ins["inputs_embeds"].shape[2])
        kv = next(i for n, i in ins.items() if n.startswith("past_key"))
        heads, hd = int(kv.shape[1]), int(kv.shape[3])
        f = {"inputs_embeds": rng.standard_normal((batch, 1, hidden)).astype(np.float32),
             "attention_mask": np.ones((batch, past + 1), np.int64),
             "position_ids": np.full((batch, 1), past, np.int64)}
        for n in ins:
            if n.startswith("past_"):
                f[n] = rng.standard_normal((batch, heads, past, hd)).astype(np.float32)
        return f
    if graph == "code_predictor":
        hidden, g = int(ins["hidden"].shape[1]), int(ins["noise"].shape[1])
        return {"hidden": rng.standard_normal((batch, hidden)).astype(np.float32),
                "code0": rng.integers(0, 1024, size=batch).astype(np.int64),
                "noise": rng.random((batch, g), dtype=np.float32), "do_sample": np.zeros(batch, bool),
                "temperature": np.ones(batch, np.float32), "top_k": np.zeros(batch, np.int64),
                "top_p": np.ones(batch, np.float32)}
    groups, state = int(ins["codes"].shape[2]), int(ins["state"].shape[1])
    return {"codes": rng.integers(0, 1024, size=(batch, 1, groups)).astype(np.int64),
            "state": np.zeros((batch, state), np.float32), "position": np.full(batch, 8, np.int64)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts", type=Path, required=True, help="an fp32 Qwen3-TTS export")
    ap.add_argument("--checkpoint", type=Path, required=True, help="its checkpoint (config.json, for the error cases)")
    ap.add_argument("--work", type=Path, required=True, help="where the variants are built (cached)")
    ap.add_argument("--variants", nargs="+", default=["fp32", "dyn", "nb8", "nb4"])
    ap.add_argument("--graphs", nargs="+", default=[*GRAPHS, "code2wav_stream"])
    ap.add_argument("--threads", nargs="+", type=int, default=[2])
    ap.add_argument("--spin", nargs="+", type=int, default=[0])
    ap.add_argument("--batch", nargs="+", type=int, default=[1])
    ap.add_argument("--past", type=int, default=64, help="cached talker positions")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--no-error", action="store_true", help="skip the error-vs-fp32 measurement")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    args.work.mkdir(parents=True, exist_ok=True)

    rows: list[dict[str, Any]] = []
    errors: dict[str, Any] = {}
    model = None
    for graph in args.graphs:
        fp32 = args.artifacts / f"{graph}.onnx"
        variants = args.variants if graph in GRAPHS else ["fp32"]
        paths = {v: build(v, fp32, args.work) for v in variants}
        if graph in GRAPHS and not args.no_error:
            from export.qwen3_tts.talker import validate_int8

            if model is None:
                model = _config_model(args.checkpoint)
            for v, p in paths.items():
                if v != "fp32":
                    rep = validate_int8(model, fp32, p)
                    errors[f"{graph}.{v}"] = {k: rep[k] for k in ("greedy_agreement", "max_abs_err", "bytes")}
                    print(graph, v, errors[f"{graph}.{v}"], flush=True)
        combos = [(v, t, s) for v in variants for t in args.threads for s in args.spin]
        sessions = {c: session(paths[c[0]], c[1], c[2]) for c in combos}
        for batch in args.batch:
            rng = np.random.default_rng(0)
            feed = {c: feeds(graph, sessions[c], batch, args.past, rng) for c in combos[:1]}
            f = feed[combos[0]]
            times: dict[tuple[str, int, int], list[float]] = {c: [] for c in combos}
            for c in combos:  # warm-up
                sessions[c].run(None, f)
            for _ in range(args.reps):
                for c in combos:
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        sessions[c].run(None, f)
                    times[c].append((time.perf_counter() - t0) / args.calls * 1000)
            for c in combos:
                row = {"graph": graph, "variant": c[0], "threads": c[1], "spin": c[2], "batch": batch,
                       "ms": round(statistics.median(times[c]), 2),
                       "min_ms": round(min(times[c]), 2), "runs_ms": [round(x, 2) for x in times[c]]}
                rows.append(row)
                print(json.dumps(row), flush=True)
        del sessions
    result = {"machine": _machine(), "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "errors": errors}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(_table(rows, errors))


def _config_model(checkpoint: Path) -> Any:
    """Just enough of the reference model for validate_int8 (it reads configs only)."""
    from types import SimpleNamespace

    cfg = json.loads((checkpoint / "config.json").read_text())["talker_config"]
    talker_cfg = SimpleNamespace(**{k: v for k, v in cfg.items() if not isinstance(v, dict)})
    cp = SimpleNamespace(config=SimpleNamespace(vocab_size=cfg["code_predictor_config"]["vocab_size"]))
    talker = SimpleNamespace(config=talker_cfg, code_predictor=cp, parameters=lambda: [])
    return SimpleNamespace(talker=talker, eval=lambda: None)


def _machine() -> dict[str, Any]:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")
    return {"cpu": model, "cores": os.cpu_count(), "load_avg_at_end": os.getloadavg()}


def _table(rows: list[dict[str, Any]], errors: dict[str, Any]) -> str:
    out = ["| graph | variant | threads | spin | batch | ms per call (median) | min | agreement | max abs err |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = errors.get(f"{r['graph']}.{r['variant']}", {})
        out.append(f"| {r['graph']} | {r['variant']} | {r['threads']} | {r['spin']} | {r['batch']} | {r['ms']} | {r['min_ms']} | "
                   f"{e.get('greedy_agreement', '-')} | {list(e.get('max_abs_err', {}).values()) or '-'} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
