"""Any family's floor on this machine against what its exported pipeline achieves (issue 39's method).

    .venv/bin/python perf/floor.py --artifacts ART [--text ...] [--ref-audio clip.wav --ref-text ...] \
        [--max-new-tokens N] --out perf/results/floor-FAMILY.json

One request, offline, one stream, greedy, the way `triton-tts say` runs it (the family's `offline.say`, the shared
engine, the family's vocoder inline). Two passes over the same request:
1. timed: the wall time and each graph's own time inside ONNX Runtime (`OnnxGraph.spent`), per audio second;
2. counted: every session opened with ONNX Runtime's profiler on; from its per-node events (shapes of inputs and
   outputs) the multiply-adds of every MatMul-like and convolution node (`flops`), split by whether the node runs
   in int8 (MatMulInteger and friends, MatMulNBits) or float; and per call the bytes the call must at least read:
   the graph's weights (its initializers) and its inputs (K/V pasts, states).
Measured here with the same 2 threads: the memory bandwidth (numpy `dot` of a float32 vector with an 800 MB
matrix: the Qwen3-TTS table's measurement) and ONNX Runtime's best GEMM rate in fp32 and in int8
(MatMul / dynamic MatMulInteger, [512, 2048] x [2048, 2048]).

Each call's floor is the larger of its bytes / bandwidth and its FLOPs / the GEMM rate of their precision (a
roofline per call: an autoregressive step at batch 1 is bound by its reads, a vocoder or a solver step over a
whole clip by its arithmetic); a graph's floor is the sum over its calls; the family's is the sum over graphs.
Graphs that only encode the reference clip (`--prompt-graphs`, a regular expression; default: codec, audio, speaker,
DAC and VAE encoders) are a voice's one-time cost (an uploaded voice skips them): they are reported apart and left
out of both the floor and the achieved time. It is optimistic on purpose (weights read once per call even where they could stay in cache, GEMM at its best
shape, every other operator free), so achieved / floor says how far the pipeline is from this CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

INT8_OPS = {"MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits", "QGemm",
            "QLinearMatMul", "QAttention"}
MATMUL_OPS = {"MatMul", "FusedMatMul", "Gemm", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
              "MatMulNBits", "QGemm", "QLinearMatMul"}
CONV_OPS = {"Conv", "FusedConv", "NhwcFusedConv", "QLinearConv", "ConvInteger"}


# --- what this machine does -----------------------------------------------------------------------------------


def bandwidth(mb: int = 800, repeats: int = 7) -> float:
    """Bytes per second two threads read (a float32 matrix-vector product streamed from memory)."""
    a = np.ones((mb * 2**20 // 4 // 4096, 4096), np.float32)
    x = np.ones(4096, np.float32)
    a.dot(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a.dot(x)
        times.append(time.perf_counter() - t0)
    return a.nbytes / statistics.median(times)


def cpu() -> dict[str, Any]:
    """The CPU's model name, core count and the matrix extensions ONNX Runtime's int8 kernels use."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return {"model": model, "cpus": os.cpu_count(),
            "extensions": sorted(f for f in flags if f.startswith(("amx", "avx512_vnni", "avx_vnni", "avx512f")))}


def gemm_rates(threads: int, m: int = 512, k: int = 2048, n: int = 2048, repeats: int = 7) -> dict[str, float]:
    """ONNX Runtime's FLOP/s for one MatMul with constant weights, fp32 and dynamic int8."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.02).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(model, str(fp32))
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        x = rng.standard_normal((m, k)).astype(np.float32)
        for name, path in (("fp32", fp32), ("int8", int8)):
            s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            for _ in range(2):
                s.run(None, {"x": x})
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                s.run(None, {"x": x})
                times.append(time.perf_counter() - t0)
            rates[name] = 2 * m * k * n / statistics.median(times)
    return rates


# --- what a graph call costs -----------------------------------------------------------------------------------


def _shapes(arg: list[dict[str, list[int]]]) -> list[list[int]]:
    return [next(iter(d.values())) for d in arg]


def node_flops(op: str, inputs: list[list[int]], outputs: list[list[int]]) -> int:
    """Multiply-adds x 2 of one node from its profiled shapes; 0 for what is not a product or a convolution."""
    if not outputs or not inputs:
        return 0
    out = outputs[0]
    size = int(np.prod(out)) if out else 1
    if op in MATMUL_OPS:
        a = inputs[0]
        if op == "MatMulNBits" or len(inputs) < 2 or not inputs[1]:
            k = a[-1]
        else:
            b, n = inputs[1], out[-1]
            k = (b[-2] if b[-1] == n else b[-1]) if len(b) >= 2 else a[-1]
        return 2 * size * int(k)
    if op in CONV_OPS and len(inputs) >= 2:
        w = inputs[3] if op == "QLinearConv" else inputs[1]
        return 2 * size * int(np.prod(w[1:]))
    if op == "ConvTranspose" and len(inputs) >= 2:
        return 2 * int(np.prod(inputs[0])) * int(np.prod(inputs[1][1:]))
    return 0


def weight_bytes(path: Path) -> int:
    """Bytes of a graph's initializers, inline or external."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    total = 0
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += int(next(e.value for e in t.external_data if e.key == "length"))
        elif t.raw_data:
            total += len(t.raw_data)
        else:
            total += int(np.prod(t.dims)) * 4
    return total


def read_profile(path: Path) -> list[dict[str, Any]]:
    """Per model run: its node events' flops split into float and int8, and the unknown heavy ops seen."""
    events = json.loads(path.read_text())
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    starts = [r["ts"] for r in runs]
    per_run = [{"float": 0, "int8": 0} for _ in runs]
    for e in nodes:
        args = e.get("args", {})
        op = args.get("op_name", "")
        f = node_flops(op, _shapes(args.get("input_type_shape", [])), _shapes(args.get("output_type_shape", [])))
        if not f or not runs:
            continue
        i = max(0, int(np.searchsorted(starts, e["ts"], side="right")) - 1)
        per_run[i]["int8" if op in INT8_OPS else "float"] += f
    return per_run


# --- the two passes ---------------------------------------------------------------------------------------------


def _job(artifacts: Path, args: argparse.Namespace) -> Any:
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.family import SayOptions

    family = read_manifest(artifacts).family
    offline: Any = getattr(FAMILIES[family], "offline")  # noqa: B009 - the Family protocol does not declare it
    job = offline.say(artifacts, SayOptions(
        text=args.text, voice=args.voice, ref_audio=args.ref_audio, ref_text=args.ref_text, seed=0,
        max_new_tokens=args.max_new_tokens, greedy=not args.sampled))
    info = getattr(job.model, "info", None)
    if args.no_stop and hasattr(info, "stop_threshold"):  # random weights' stop head fires at random
        object.__setattr__(info, "stop_threshold", 2.0)  # a probability never passes it: max_new_tokens ends it
    return job


def _synthesize(job: Any) -> tuple[float, float]:
    """(wall seconds, audio seconds) of the job's request through the shared engine."""
    from ttscore.runtime.engine import Generator

    gen = Generator(job.model, max_batch=1, chunk_policy="fixed")
    t0 = time.perf_counter()
    samples = sum(int(ev.pcm.shape[0]) for ev in gen.synthesize(job.request))
    return time.perf_counter() - t0, samples / job.sample_rate


@contextlib.contextmanager
def opened_graphs() -> Iterator[list[Any]]:
    """Every OnnxGraph constructed inside the block, in order."""
    from ttscore.runtime.onnx import OnnxGraph

    graphs: list[Any] = []
    init = OnnxGraph.__init__

    def register(self: Any, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        graphs.append(self)

    OnnxGraph.__init__ = register  # type: ignore[method-assign]
    try:
        yield graphs
    finally:
        OnnxGraph.__init__ = init  # type: ignore[method-assign]


def timed_pass(artifacts: Path, args: argparse.Namespace, repeats: int = 2) -> dict[str, Any]:
    """The best of `repeats` runs after a warm one; the prompt graphs' time taken out of the wall time."""
    with opened_graphs() as graphs:  # the warm run included: a graph may open on first use
        job = _job(artifacts, args)
        _synthesize(job)  # warm
    best: dict[str, Any] = {}
    for _ in range(repeats):
        for g in graphs:
            g.spent, g.calls = 0.0, 0
        wall, audio = _synthesize(job)
        prompt = sum(g.spent for g in graphs if args.prompt_graphs.search(g.path.stem))
        run = {"wall_s": wall, "prompt_graphs_s": prompt, "audio_s": audio,
               "ms_per_audio_s": 1e3 * (wall - prompt) / audio,
               "graphs": {g.path.stem: {"calls": g.calls, "ms_per_audio_s": 1e3 * g.spent / audio}
                          for g in graphs if g.calls}}
        if not best or run["ms_per_audio_s"] < best["ms_per_audio_s"]:
            best = run
    return best


def counted_pass(artifacts: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every OnnxGraph opened with the profiler on; per graph: calls, flops (float, int8), bytes read."""
    import ttscore.runtime.onnx as rt_onnx

    plain = rt_onnx.session_options
    feeds_bytes: dict[str, int] = defaultdict(int)

    def profiled(threads: int | None = None) -> Any:
        opts = plain(threads)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(work / "profile")
        return opts

    def counting(run: Any) -> Any:
        def wrapped(self: Any, feeds: dict[str, Any]) -> Any:
            feeds_bytes[self.path.stem] += sum(int(getattr(v, "nbytes", 0)) for v in feeds.values())
            return run(self, feeds)
        return wrapped

    rt_onnx.session_options = profiled
    run, run_bound = rt_onnx.OnnxGraph.run, rt_onnx.OnnxGraph.run_bound
    rt_onnx.OnnxGraph.run, rt_onnx.OnnxGraph.run_bound = counting(run), counting(run_bound)  # type: ignore[method-assign]
    try:
        with opened_graphs() as graphs:
            job = _job(artifacts, args)
            _, audio = _synthesize(job)
    finally:
        rt_onnx.session_options = plain
        rt_onnx.OnnxGraph.run, rt_onnx.OnnxGraph.run_bound = run, run_bound  # type: ignore[method-assign]
    out: dict[str, Any] = {"audio_s": audio, "graphs": {}}
    for g in graphs:
        if not g.calls:
            continue
        runs = read_profile(Path(g.session.end_profiling()))
        wb = weight_bytes(g.path)
        out["graphs"][g.path.stem] = {
            "calls": g.calls, "weight_bytes": wb, "input_bytes": feeds_bytes[g.path.stem],
            "flops_float": [r["float"] for r in runs], "flops_int8": [r["int8"] for r in runs],
        }
    return out


def floor(counted: dict[str, Any], bw: float, rates: dict[str, float], prompt: Any) -> dict[str, Any]:
    """Per graph and in all: ms per audio second bound by reads, by arithmetic, and the per-call roofline (the
    prompt graphs reported with `prompt: true` and left out of the total)."""
    audio = counted["audio_s"]
    graphs, total = {}, 0.0
    for name, g in counted["graphs"].items():
        n = g["calls"]
        # ONNX Runtime's profiler stops recording at its event limit (a long run of a many-node graph): the calls it
        # recorded stand for the rest in proportion
        scale = n / max(1, len(g["flops_float"]))
        read_per_call = g["weight_bytes"] + g["input_bytes"] / n
        per_call = [max(read_per_call / bw, f / rates["fp32"] + q / rates["int8"])
                    for f, q in zip(g["flops_float"], g["flops_int8"], strict=True)]
        ms = 1e3 * sum(per_call) * scale / audio
        flops = (sum(g["flops_float"]) + sum(g["flops_int8"])) * scale
        graphs[name] = {
            "calls_per_audio_s": n / audio,
            "profiled_calls": len(g["flops_float"]),
            "gflop_per_audio_s": flops / audio / 1e9,
            "int8_share": sum(g["flops_int8"]) / max(1, sum(g["flops_float"]) + sum(g["flops_int8"])),
            "mb_read_per_audio_s": read_per_call * n / audio / 1e6,
            "read_ms_per_audio_s": 1e3 * read_per_call * n / bw / audio,
            "compute_ms_per_audio_s": 1e3 * scale * (sum(g["flops_float"]) / rates["fp32"]
                                                     + sum(g["flops_int8"]) / rates["int8"]) / audio,
            "floor_ms_per_audio_s": ms,
            "prompt": bool(prompt.search(name)),
        }
        total += 0.0 if graphs[name]["prompt"] else ms
    return {"graphs": graphs, "floor_ms_per_audio_s": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", required=True, type=Path, help="an export (manifest.json + graphs)")
    ap.add_argument("--text", default="The quick brown fox jumps over the lazy dog, and then it runs far away.")
    ap.add_argument("--voice")
    ap.add_argument("--ref-audio")
    ap.add_argument("--ref-text")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--thread-pool", choices=["session", "shared"], default="session",
                    help="as `triton-tts say --thread-pool`: a pool per graph (the served default) or one for all")
    ap.add_argument("--sampled", action="store_true",
                    help="the family's default sampling, seed 0 (for a family whose `say` takes no --greedy)")
    ap.add_argument("--no-stop", action="store_true",
                    help="a family whose stop head is a probability with a threshold runs to --max-new-tokens")
    ap.add_argument("--prompt-graphs", type=re.compile, default=re.compile(r"(codec|audio|speaker|dac|vae)_?encode"),
                    help="graphs that only encode the reference clip: reported apart, outside the floor")
    ap.add_argument("--machine", type=Path, help="reuse bandwidth and GEMM rates from an earlier --out")
    ap.add_argument("--counts", type=Path, help="reuse the counted pass of an earlier --out (same export and request)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    os.environ["TTS_ORT_THREADS"] = str(args.threads)
    load = [os.getloadavg()[0]]
    if args.thread_pool == "shared":
        from ttscore.runtime.onnx import share_thread_pool

        share_thread_pool(args.threads)
    if args.machine:
        machine = json.loads(args.machine.read_text())["machine"]
    else:
        rates = gemm_rates(args.threads)
        machine = {"cpu": cpu(), "bandwidth_gb_s": bandwidth() / 1e9,
                   "gemm_gflop_s": {k: v / 1e9 for k, v in rates.items()}}
    timed = timed_pass(args.artifacts, args)
    load.append(os.getloadavg()[0])
    if args.counts:
        counted = json.loads(args.counts.read_text())["counted"]
    else:
        with tempfile.TemporaryDirectory() as work:
            counted = counted_pass(args.artifacts, args, Path(work))
    bound = floor(counted, machine["bandwidth_gb_s"] * 1e9, {k: v * 1e9 for k, v in machine["gemm_gflop_s"].items()},
                  args.prompt_graphs)
    from ttscore.contract.manifest import read_manifest

    m = read_manifest(args.artifacts)
    result = {"family": m.family, "precision": m.precision, "artifacts": str(args.artifacts), "machine": machine,
              "thread_pool": args.thread_pool,
              "request": {"text": args.text, "max_new_tokens": args.max_new_tokens, "voice": args.voice,
                          "greedy": not args.sampled,
                          "ref_audio": args.ref_audio}, "prompt_graphs": args.prompt_graphs.pattern,
              "achieved": timed, "floor": bound, "counted": counted,
              "load_average_1min": {"start": load[0], "after_timed_pass": load[1]},
              "achieved_over_floor": timed["ms_per_audio_s"] / bound["floor_ms_per_audio_s"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"{m.family} {m.precision}: {timed['audio_s']:.2f} s of audio; achieved {timed['ms_per_audio_s']:.0f} ms "
          f"per audio s, floor {bound['floor_ms_per_audio_s']:.0f} ({result['achieved_over_floor']:.2f}x)")
    for name, g in bound["graphs"].items():
        got = timed["graphs"].get(name, {}).get("ms_per_audio_s", float("nan"))
        mark = " (prompt: outside the floor)" if g["prompt"] else ""
        print(f"  {name:24s} {g['calls_per_audio_s']:8.1f} calls/s  {g['gflop_per_audio_s']:8.2f} GFLOP/s "
              f"(int8 {g['int8_share']:.0%})  {g['mb_read_per_audio_s']:8.1f} MB/s  floor {g['floor_ms_per_audio_s']:7.1f}"
              f"  achieved {got:7.1f} ms per audio s{mark}")


if __name__ == "__main__":
    main()
