"""Offline pipeline vs the reference PyTorch `generate`, side by side in one run.

    triton-tts bench offline --size 0.6b --frames 40 --out perf/results/offline-0.6b.json

Builds (or reuses) a random-weight checkpoint of the requested size, exports it at fp32 and int8,
then times, in this order and alternating over --repeats rounds: the reference
`Qwen3TTSModel.generate_custom_voice` (greedy) and our exported pipeline (greedy, same text/speaker),
each producing the same number of frames. Reports per-frame time and real-time factor
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

import numpy as np

from ttscore.tools.progress import Stages, add_quiet

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."


def _time_reference(ref, frames: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    wavs, _sr = ref.generate_custom_voice(
        text=TEXT, speaker="vivian", language="English", max_new_tokens=frames + 1,
        do_sample=False, subtalker_dosample=False,
    )
    dt = time.perf_counter() - t0
    return dt, wavs[0].shape[0] // 1920


def _time_ours(pipe, frames: int) -> tuple[float, int]:
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

    gen = Generator(pipe, max_batch=1)
    req = Qwen3TTSRequest(text=TEXT, speaker="vivian", language="English", max_new_tokens=frames,
                           do_sample=False, subtalker_do_sample=False, chunk_frames=25)
    t0 = time.perf_counter()
    n = 0
    for ev in gen.synthesize(req):
        n += ev.frames
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="0.6b", choices=["tiny", "0.6b", "1.7b"])
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
    from export.reference import load_reference
    from export.tiny import make_tiny
    from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline
    from ttscore.tools.artifacts import ensure_artifacts

    work = Path(args.work)
    ckpt = work / f"ckpt-custom_voice-{args.size}"
    if not (ckpt / "model.safetensors").is_file():
        make_tiny("custom_voice", ckpt, seed=0, size=args.size)
    arts = {}
    for precision in ("fp32", "int8"):  # (an export shows its own stages)
        art = work / f"art-custom_voice-{args.size}-{precision}"
        arts[precision] = ensure_artifacts(ckpt, precision, out=art, quiet=args.quiet)

    runs: dict[str, list[tuple[float, int]]] = {"reference": [], "fp32": [], "int8": []}
    with Stages(f"bench offline {args.size}", total=2 + args.repeats, quiet=args.quiet) as stages:
        stages.stage("loading the reference and the exported pipelines")
        ref = load_reference(ckpt)
        pipes = {p: Qwen3TTSPipeline.load(a, threads=args.threads) for p, a in arts.items()}
        stages.stage("warm-up")  # first-run allocations, lazy inits
        _time_reference(ref, 2)
        for pipe in pipes.values():
            _time_ours(pipe, 2)
        for repeat in range(args.repeats):
            stages.stage(f"run {repeat + 1}/{args.repeats}: reference, fp32, int8 x {args.frames} frames")
            runs["reference"].append(_time_reference(ref, args.frames))
            for p, pipe in pipes.items():
                runs[p].append(_time_ours(pipe, args.frames))

    spf_sec = 1920 / 24000
    result: dict[str, object] = {
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
