"""Offline pipeline vs the reference PyTorch `generate`, side by side in one run.

    triton-tts bench offline --size 0.6b --frames 40 --out perf/results/offline-0.6b.json

Builds (or reuses) a random-weight checkpoint of the requested size of a family with a PyTorch
reference (its bench package, triton_tts/bench/<family>/; --family, default the first), exports it
at fp32 and int8, then times, in this order and alternating over --repeats rounds: the reference's
greedy generate and our exported pipeline (greedy, same text/speaker), each producing the same number
of frames. Reports per-frame time and real-time factor
(RTF = processing seconds / audio seconds; < 1 is faster than real time) and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from triton_tts.progress import Stages, add_quiet

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."


def _time_reference(ref: Any, frames: int, fields: dict[str, Any]) -> tuple[float, int]:
    t0 = time.perf_counter()
    made = ref.generate(TEXT, frames, **fields)
    return time.perf_counter() - t0, made


def _time_ours(pipe: Any, family: str, frames: int, fields: dict[str, Any]) -> tuple[float, int]:
    from triton_tts.bench import common
    from ttscore.runtime.engine import Generator

    gen = Generator(pipe, max_batch=1)
    req = common.request(family, text=TEXT, max_new_tokens=frames, do_sample=False, subtalker_do_sample=False,
                         chunk_frames=25, **fields)
    t0 = time.perf_counter()
    n = 0
    for ev in gen.synthesize(req):
        n += ev.frames
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", help="a family with a bench package (default: the first)")
    ap.add_argument("--size", default="0.6b", help="a random-weight size of the family (0.6b, ...)")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default="build/bench")
    ap.add_argument("--out", default="perf/results/offline.json")
    add_quiet(ap)
    args = ap.parse_args()

    os.environ.setdefault("TTS_ORT_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    from triton_tts.artifacts import ensure_artifacts
    from triton_tts.bench import common
    from ttscore.contract.manifest import read_manifest

    bench = common.bench_family(args.family)
    if args.size not in bench.SIZES:
        raise SystemExit(f"--size {args.size}: {bench.FAMILY} has {', '.join(bench.SIZES)}")
    work = Path(args.work)
    ckpt = work / f"ckpt-{bench.CHECKPOINT}-{args.size}"
    if not (ckpt / "model.safetensors").is_file():
        bench.make_checkpoint(ckpt, args.size)
    arts = {}
    for precision in ("fp32", "int8"):  # (an export shows its own stages)
        art = work / f"art-{bench.CHECKPOINT}-{args.size}-{precision}"
        arts[precision] = ensure_artifacts(ckpt, precision, out=art, quiet=args.quiet)
    manifest = read_manifest(arts["fp32"])
    fields = dict(bench.REQUEST)

    runs: dict[str, list[tuple[float, int]]] = {"reference": [], "fp32": [], "int8": []}
    with Stages(f"bench offline {args.size}", total=2 + args.repeats, quiet=args.quiet) as stages:
        stages.stage("loading the reference and the exported pipelines")
        ref = bench.Reference(ckpt)
        pipes = {p: common.load_model(a, threads=args.threads) for p, a in arts.items()}
        stages.stage("warm-up")  # first-run allocations, lazy inits
        _time_reference(ref, 2, fields)
        for pipe in pipes.values():
            _time_ours(pipe, bench.FAMILY, 2, fields)
        for repeat in range(args.repeats):
            stages.stage(f"run {repeat + 1}/{args.repeats}: reference, fp32, int8 x {args.frames} frames")
            runs["reference"].append(_time_reference(ref, args.frames, fields))
            for p, pipe in pipes.items():
                runs[p].append(_time_ours(pipe, bench.FAMILY, args.frames, fields))

    spf_sec = common.frame_seconds(manifest)
    result: dict[str, object] = {
        "family": bench.FAMILY,
        "size": args.size,
        "frames": args.frames,
        "threads": args.threads,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "text": TEXT,
    }
    per_frame = {}
    for name, rs in runs.items():
        pf = [dt / max(n, 1) for dt, n in rs]
        per_frame[name] = statistics.median(pf)
        result[name] = {
            "frames": [n for _, n in rs],
            "seconds": [round(dt, 3) for dt, _ in rs],
            "ms_per_frame": round(per_frame[name] * 1000, 1),
            "rtf": round(per_frame[name] / spf_sec, 3),
        }
    result["speedup_fp32_vs_reference"] = round(per_frame["reference"] / per_frame["fp32"], 2)
    result["speedup_int8_vs_reference"] = round(per_frame["reference"] / per_frame["int8"], 2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    assert np.isfinite(per_frame["fp32"])


if __name__ == "__main__":
    main()
