"""The whole comparison in one command, written as a table and a plot.

    triton-tts bench compare --size 0.6b --precisions fp32 int8 --concurrency 1 4 8 --frames 20 \
        --out perf/results/compare-0.6b

For one random-weight checkpoint of a family with a bench package (triton_tts/bench/<family>/;
--family, default the first; made there, or --checkpoint), in this order:
  1. export each precision (cached under --work, or given with --artifacts PRECISION=DIR);
  2. offline, single stream: the family's PyTorch reference, greedy (fp32), and the exported
     pipeline of each precision, greedy, the same frames each; ms per frame and RTF include
     vocoding, and each quantized pipeline's codes and audio are compared with fp32's;
  3. Triton: each precision served by the real tritonserver as `triton-tts serve` renders it, then
     `perf_analyzer --streaming` once per concurrency level (triton_tts.bench.perf_analyzer), its
     per-response timestamps summarised (TTFA, audio seconds per second, RTF, underruns after the
     first chunk). During each level the server's process tree is sampled for peak RSS, and its
     custom metrics (:8002) give the share of the step spent outside model calls.
Outputs in --out: results.json, table.md (the tables perf/README.md shows) and plot.png (TTFA
p50/p95 and audio seconds per second against concurrency, one line per precision).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

TEXTS = [
    "Hello from Triton. This is a short streaming test.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Streaming speech should start quickly and keep pace with playback.",
    "A calm voice reads the evening news while the city lights come on.",
]


# --- offline --------------------------------------------------------------------------------------


def _offline_ours(pipe: Any, family: str, text: str, frames: int, fields: dict[str, Any]
                  ) -> tuple[float, np.ndarray, np.ndarray]:
    from triton_tts.bench import common
    from ttscore.runtime.engine import Generator

    req = common.request(family, text=text, max_new_tokens=frames, do_sample=False, subtalker_do_sample=False,
                         **fields)
    t0 = time.perf_counter()
    events = list(Generator(pipe, max_batch=1).synthesize(req))
    dt = time.perf_counter() - t0
    return dt, np.concatenate([e.codes for e in events if e.codes is not None]), np.concatenate([e.pcm for e in events])


def offline(bench: Any, ckpt: Path, arts: dict[str, Path], frames: int, repeats: int, threads: int,
            reference: bool) -> dict[str, Any]:
    import torch

    from triton_tts.bench import common
    from ttscore.contract.manifest import read_manifest

    torch.set_num_threads(threads)
    text = TEXTS[1]
    manifest = read_manifest(arts[next(iter(arts))])
    frame_s = common.frame_seconds(manifest)
    fields = {**bench.REQUEST, "speaker": common.first_speaker(manifest)}
    rows: dict[str, Any] = {}
    if reference:
        ref = bench.Reference(ckpt)

        def run_ref(n: int) -> tuple[float, int]:
            t0 = time.perf_counter()
            made = ref.generate(text, n, **fields)
            return time.perf_counter() - t0, made

        run_ref(2)
        times = [run_ref(frames) for _ in range(repeats)]
        rows["reference"] = _offline_row(times, frame_s)
        del ref
        _give_back_memory()
    outputs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for precision, art in arts.items():
        pipe = common.load_model(art, threads=threads, encoders=False)
        _offline_ours(pipe, bench.FAMILY, text, 2, fields)
        times = []
        for _ in range(repeats):
            dt, codes, pcm = _offline_ours(pipe, bench.FAMILY, text, frames, fields)
            times.append((dt, codes.shape[0]))
        outputs[precision] = (codes, pcm)
        rows[precision] = _offline_row(times, frame_s)
        del pipe
        _give_back_memory()
    if "fp32" in outputs:
        base_codes, base_pcm = outputs["fp32"]
        for precision, (codes, pcm) in outputs.items():
            if precision == "fp32":
                continue
            n = min(len(codes), len(base_codes))
            m = min(len(pcm), len(base_pcm))
            rows[precision]["vs_fp32"] = {
                "code_agreement": round(float((codes[:n] == base_codes[:n]).mean()), 4),
                "first_code0_difference": int(np.argmax(codes[:n, 0] != base_codes[:n, 0]))
                if np.any(codes[:n, 0] != base_codes[:n, 0]) else None,
                "audio_max_abs": float(f"{np.abs(pcm[:m] - base_pcm[:m]).max():.3g}") if m else None,
            }
    return rows


def _give_back_memory() -> None:
    """Hand a freed model's memory back to the system before the next one loads (a real-size model
    is several GiB: the reference, the export and the Triton server it starts next must not add up)."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the allocator keeps what it keeps
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _offline_row(times: list[tuple[float, int]], frame_s: float) -> dict[str, Any]:
    per_frame = statistics.median(dt / max(n, 1) for dt, n in times)
    return {"frames": [n for _, n in times], "seconds": [round(dt, 3) for dt, _ in times],
            "ms_per_frame": round(per_frame * 1000, 1), "rtf": round(per_frame / frame_s, 3)}


# --- Triton ---------------------------------------------------------------------------------------


def speech_input(family: str, fields: dict[str, Any], frames: int) -> dict[str, Any]:
    """perf_analyzer --input-data: every request `frames` frames, default (sampled) decoding, seeded;
    `fields` (speaker, language) where the family takes them."""
    from triton_tts.bench import common

    return {"data": [{name: _input_value(value) for name, value in common.wire_fields(
        family, text=t, **fields, max_new_tokens=frames, seed=i + 1).items()} for i, t in enumerate(TEXTS)]}


def _input_value(value: Any) -> Any:
    """One input of perf_analyzer's --input-data: a scalar as a one-element list, an array (e.g. MOSS-TTS-Nano's
    reference codes [frames, 16]) as its flat content and shape."""
    if np.ndim(value) == 0:
        return [value]
    array = np.asarray(value)
    return {"content": array.reshape(-1).tolist(), "shape": list(array.shape)}


class RssSampler:
    """Peak resident memory of a process and its children (tritonserver + its python stubs)."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak_total = 0
        self.peak_by_name: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _tree(self) -> list[int]:
        pids, frontier = [self.pid], [self.pid]
        while frontier:
            p = frontier.pop()
            try:
                children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            except OSError:
                continue
            pids += [int(c) for c in children]
            frontier += [int(c) for c in children]
        return pids

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for p in self._tree():
                try:
                    status = Path(f"/proc/{p}/status").read_text()
                    cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                rss = int(next((ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS:")), "0")) * 1024
                total += rss
                # Stubs are told apart by the model they host (their command line names its model.py).
                name = next((Path(c.decode()).parts[-3] for c in cmd if c.endswith(b"/model.py")),
                            Path(cmd[0].decode()).name)
                self.peak_by_name[name] = max(self.peak_by_name.get(name, 0), rss)
            self.peak_total = max(self.peak_total, total)
            self._stop.wait(self.interval_s)


def scrape(url: str) -> dict[str, float]:
    """Sums of the step histograms on Triton's metrics port (all speech_generation instances)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    sums: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("tts_generation_step_seconds_sum", "tts_generation_step_outside_model_seconds_sum",
                     "tts_generation_step_seconds_count"):
            if line.startswith(name + "{") or line.startswith(name + " "):
                sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        if line.startswith("tts_generation_kv_arena_bytes"):
            sums["kv_arena_bytes"] = max(sums.get("kv_arena_bytes", 0.0), float(line.rsplit(" ", 1)[1]))
    return sums


def triton(bench: Any, art: Path, precision: str, levels: list[int], frames: int, threads: int, work: Path,
           requests_per_window: int, chunk_policy: str, thread_pool: str = "session",
           vocoder_overlap: str = "auto") -> list[dict[str, Any]]:
    from triton_tts.bench import common, perf_analyzer
    from triton_tts.serve import Served, plan_deployment
    from ttscore.backend import repository
    from ttscore.backend.triton_server import TritonServer
    from ttscore.contract.manifest import read_manifest

    manifest = read_manifest(art)
    served = [Served("bench", art, art, manifest)]
    plan = plan_deployment(served, max_active=max(levels))
    for name, entry in plan["settings"].items():
        entry.setdefault("parameters", {})["intra_op_threads"] = str(threads)
        if name == served[0].triton_model:
            entry["parameters"]["chunk_policy"] = chunk_policy
            entry["parameters"]["thread_pool"] = thread_pool
            entry["parameters"]["vocoder_overlap"] = vocoder_overlap
    pwork = work / f"triton-{precision}"
    repo = repository.render_repository(pwork / "model_repository", plan["settings"], models=plan["models"],
                                        aliases=plan["aliases"])
    data = pwork / "input.json"
    fields = {**bench.REQUEST, "speaker": common.first_speaker(manifest)}
    data.write_text(json.dumps(speech_input(manifest.family, fields, frames)))
    for old in pwork.glob("c*"):  # perf_analyzer refuses to overwrite a profile export
        shutil.rmtree(old)
    shutil.rmtree(pwork / "warmup", ignore_errors=True)
    rows = []
    with TritonServer(repo, log_file=pwork / "tritonserver.log", ready_timeout_s=900) as server:
        assert server.pid is not None
        rate = common.sample_rate(manifest)
        warm = argparse.Namespace(model=served[0].triton_model, url=server.grpc_url, input_data=data, sample_rate=rate,
                                  concurrency="1:1:1", requests_per_window=1, stability_percentage=999,
                                  max_trials=3, out=str(pwork / "warmup"), stages=None)
        perf_analyzer.cmd_speech(warm)
        for c in levels:
            before = scrape(server.metrics_url)
            ns = argparse.Namespace(model=served[0].triton_model, url=server.grpc_url, input_data=data, sample_rate=rate,
                                    concurrency=f"{c}:{c}:1", requests_per_window=max(requests_per_window, c),
                                    stability_percentage=999, max_trials=3, out=str(pwork / f"c{c}"), stages=None)
            load = os.getloadavg()[0]
            with RssSampler(server.pid) as rss:
                perf_analyzer.cmd_speech(ns)
            after = scrape(server.metrics_url)
            summary = json.loads((pwork / f"c{c}" / "summary.json").read_text())["speech_generation"][0]
            step = after.get("tts_generation_step_seconds_sum", 0) - before.get("tts_generation_step_seconds_sum", 0)
            outside = after.get("tts_generation_step_outside_model_seconds_sum", 0) - before.get(
                "tts_generation_step_outside_model_seconds_sum", 0)
            steps = after.get("tts_generation_step_seconds_count", 0) - before.get("tts_generation_step_seconds_count", 0)
            summary.update(
                precision=precision,
                load_average_before=round(load, 2),
                peak_rss_bytes=rss.peak_total,
                peak_rss_by_process=rss.peak_by_name,
                steps=int(steps),
                step_ms_mean=round(1000 * step / steps, 2) if steps else None,
                outside_model_share=round(outside / step, 4) if step else None,
                kv_arena_bytes=int(after.get("kv_arena_bytes", 0)),
            )
            print(json.dumps(summary), flush=True)
            rows.append(summary)
    return rows


# --- report ---------------------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    lines = ["| pipeline | ms per frame | RTF (incl. vocoding) | vs reference | vs fp32 |", "|---|---|---|---|---|"]
    off = result["offline"]
    ref = off.get("reference", {}).get("ms_per_frame")
    for name, row in off.items():
        speed = f"{ref / row['ms_per_frame']:.2f}x" if ref else "-"
        vs = row.get("vs_fp32")
        agree = f"codes {vs['code_agreement']:.0%} equal, audio max abs {vs['audio_max_abs']}" if vs else "-"
        lines.append(f"| {name} | {row['ms_per_frame']} | {row['rtf']} | {speed} | {agree} |")
    lines += ["", "| precision | concurrency | TTFA p50 / p95 ms | audio s per s | vs c=1 | RTF p50 / p95 | chunks per request "
              "| underrun requests | step ms | outside model | peak RSS GiB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for precision, rows in result["triton"].items():
        base = next((r for r in rows if r["concurrency"] == 1), rows[0])
        for r in rows:
            ratio_t = r["ttfa_ms"]["p50"] / base["ttfa_ms"]["p50"]
            ratio_a = r["audio_seconds_per_second"] / base["audio_seconds_per_second"]
            outside = f"{r['outside_model_share']:.1%}" if r["outside_model_share"] is not None else "-"
            lines.append(
                f"| {precision} | {r['concurrency']} | {r['ttfa_ms']['p50']:.0f} / {r['ttfa_ms']['p95']:.0f} "
                f"(x{ratio_t:.2f}) | {r['audio_seconds_per_second']} | x{ratio_a:.2f} | {r['rtf']['p50']} / {r['rtf']['p95']} | "
                f"{r['chunks_per_request']} | {r['underrun_requests']} / {r['requests']} | {r['step_ms_mean']} | "
                f"{outside} | {r['peak_rss_bytes'] / 2**30:.2f} |"
            )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for precision, rows in result["triton"].items():
        c = [r["concurrency"] for r in rows]
        line = ax1.plot(c, [r["ttfa_ms"]["p50"] for r in rows], marker="o", label=f"{precision} p50")[0]
        ax1.plot(c, [r["ttfa_ms"]["p95"] for r in rows], marker="x", linestyle="--", color=line.get_color(),
                 label=f"{precision} p95")
        ax2.plot(c, [r["audio_seconds_per_second"] for r in rows], marker="o", label=precision)
    ax1.set(xlabel="concurrent streams", ylabel="time to first audio (ms)", title="TTFA (perf_analyzer --streaming)")
    ax2.set(xlabel="concurrent streams", ylabel="audio seconds per second", title="Aggregate throughput")
    ax2.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    for ax in (ax1, ax2):
        ax.set_xticks(sorted({r["concurrency"] for rows in result["triton"].values() for r in rows}))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{result['size']} random weights, {result['frames']}-frame requests, {result['machine']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", help="a family with a bench package (default: the first)")
    ap.add_argument("--size", default="0.6b", help="a random-weight size of the family (0.6b, ...)")
    ap.add_argument("--checkpoint", help="a checkpoint of the family (default: its random-weight one of --size, "
                    "under --work)")
    ap.add_argument("--artifacts", nargs="*", default=[], help="PRECISION=DIR exports to reuse")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "int8"])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2, help="offline runs per pipeline (median)")
    ap.add_argument("--requests-per-window", type=int, default=2, help="at least the concurrency")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-policy", default="adaptive", choices=["adaptive", "ramp", "fixed"])
    ap.add_argument("--vocoder-overlap", default="auto", choices=["auto", "on", "off"],
                    help="speech_generation's vocoder_overlap: later chunks vocoded beside the next model step "
                         "(auto: where the family declares it safe)")
    ap.add_argument("--thread-pool", nargs="+", default=["session"], metavar="[PRECISION=]POOL",
                    help="speech_generation's thread_pool (shared or session), for all or per precision label")
    ap.add_argument("--no-reference", action="store_true", help="skip the PyTorch reference")
    ap.add_argument("--skip-triton", action="store_true")
    ap.add_argument("--triton-precisions", nargs="+", metavar="PRECISION",
                    help="serve only these of --precisions through Triton (default: every one)")
    ap.add_argument("--work", default="build/bench")
    ap.add_argument("--out", default="perf/results/compare")
    args = ap.parse_args(argv)

    os.environ["TTS_ORT_THREADS"] = str(args.threads)
    from export.exporter import export_checkpoint
    from triton_tts.bench import common
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.onnx import THREAD_POOLS

    bench = common.bench_family(args.family)
    if args.size not in bench.SIZES:
        raise SystemExit(f"--size {args.size}: {bench.FAMILY} has {', '.join(bench.SIZES)}")
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = Path(args.checkpoint) if args.checkpoint else work / f"ckpt-{bench.CHECKPOINT}-{args.size}"
    if not args.checkpoint and not (ckpt / "model.safetensors").is_file():
        bench.make_checkpoint(ckpt, args.size)
    given = dict(a.split("=", 1) for a in args.artifacts)
    arts: dict[str, Path] = {}
    for precision in args.precisions:
        art = Path(given.get(precision) or work / f"art-{bench.CHECKPOINT}-{args.size}-{precision}")
        try:
            read_manifest(art)
        except Exception:
            t0 = time.perf_counter()
            export_checkpoint(ckpt, art, precision=precision)
            print(f"exported {precision} in {time.perf_counter() - t0:.0f} s", flush=True)
        arts[precision] = art

    result: dict[str, Any] = {
        "family": bench.FAMILY, "size": args.size, "frames": args.frames, "threads": args.threads, "chunk_policy": args.chunk_policy, "vocoder_overlap": args.vocoder_overlap,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "load_average_start": os.getloadavg(),
        "artifacts": {p: str(a) for p, a in arts.items()},
        "quantization_vs_fp32": {p: {g: e.get("validation", {}).get("vs_fp32") for g, e in read_manifest(a).graphs.items()
                                     if e.get("validation", {}).get("vs_fp32")} for p, a in arts.items() if p != "fp32"},
    }
    print("offline ...", flush=True)
    result["offline"] = offline(bench, ckpt, arts, args.frames, args.repeats, args.threads, not args.no_reference)
    print(json.dumps(result["offline"]), flush=True)
    pools = dict.fromkeys(arts, "session")
    for item in args.thread_pool:
        label, _, pool = item.rpartition("=")
        if pool not in THREAD_POOLS or (label and label not in arts):
            raise SystemExit(f"--thread-pool {item!r}: expected [PRECISION=]shared|session")
        pools.update({label: pool} if label else dict.fromkeys(arts, pool))
    result["thread_pool"] = pools
    result["triton"] = {}
    if not args.skip_triton:
        for precision, art in arts.items():
            if args.triton_precisions and precision not in args.triton_precisions:
                continue
            print(f"triton {precision} ...", flush=True)
            result["triton"][precision] = triton(bench, art, precision, args.concurrency, args.frames, args.threads, work,
                                                 args.requests_per_window, args.chunk_policy, pools[precision],
                                                 args.vocoder_overlap)
    result["load_average_end"] = os.getloadavg()
    (out / "results.json").write_text(json.dumps(result, indent=2))
    (out / "table.md").write_text(table(result))
    if result["triton"]:
        plot(result, out / "plot.png")
    print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
