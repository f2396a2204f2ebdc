"""VoxCPM2 prefill at concurrency c: batched (one call per graph for every prompt admitted in an
iteration, ttscore/runtime/families/voxcpm2/model.py) vs one request at a time (the runtime before
issue 28, emulated by handing the model's `prefill` one work item per call).

    .venv/bin/python perf/voxcpm2_prefill.py [--artifacts DIR] [--concurrency 4] [--repeats 3] \\
        [--out perf/results/voxcpm2-prefill-tiny.json]

Without --artifacts the tiny random-weight checkpoint is made and exported into a temporary folder.
c requests (different texts, one with a cloning prompt) are submitted together to one engine
(ttscore.runtime.engine.Generator, max_batch = c, default prefill budget) and run to the end. For
each request: when its prefill started and ended, in ms from the start of the engine iteration that
prefilled it, and its time to first frame from submission. "waits" = its prefill started after
another request's had (start > 0). Both modes run alternately in one process (this machine is
shared: compare within a run). The audio of each request is checked equal between the modes
(batched == alone, 1e-5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TEXTS = ("Hello world, this is a test.", "Short one.", "A somewhat longer sentence for the fourth request here.",
         "Streaming speech arrives.", "Another request joins the batch.", "Eight requests at once.",
         "The seventh prompt of the run.", "And the last one.")


def run_once(model: Any, c: int, batched: bool) -> tuple[dict[str, dict[str, float]], dict[str, np.ndarray]]:
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

    rng = np.random.default_rng(0)
    p, d = model.info.patch_size, model.info.feat_dim
    timing: dict[str, dict[str, float]] = {}
    real = model.prefill
    iteration = {"t0": 0.0}

    def prefill(work: list[Any]) -> None:
        ids = {id(s): k for k, s in seqs.items()}
        if batched:
            start = time.perf_counter()
            real(work)
            end = time.perf_counter()
            for s, _ in work:
                timing[ids[id(s)]].update(start_ms=1e3 * (start - iteration["t0"]), end_ms=1e3 * (end - iteration["t0"]))
            return
        for item in work:
            start = time.perf_counter()
            real([item])
            end = time.perf_counter()
            timing[ids[id(item[0])]].update(start_ms=1e3 * (start - iteration["t0"]),
                                            end_ms=1e3 * (end - iteration["t0"]))

    model.prefill = prefill
    try:
        gen = Generator(model, max_batch=c, chunk_policy="fixed")
        submitted = time.perf_counter()
        seqs: dict[str, Any] = {}
        for i in range(c):
            req = VoxCPM2Request(TEXTS[i % len(TEXTS)], seed=40 + i, max_new_tokens=6)
            if i == 1:
                req.ref_patches = rng.standard_normal((3, p, d)).astype(np.float32) * 0.5
            key = f"r{i}"
            gen.submit(key, req)
            seqs[key] = gen._active[key].seq  # the engine's sequence, to name the work items
            timing[key] = {"prompt_tokens": float(seqs[key].prompt_tokens)}
        pcm: dict[str, list[np.ndarray]] = {k: [] for k in seqs}
        while gen.num_active:
            iteration["t0"] = time.perf_counter()
            for ev in gen.step():
                if not pcm[ev.req_id]:
                    timing[ev.req_id]["first_frame_ms"] = 1e3 * (time.perf_counter() - submitted)
                pcm[ev.req_id].append(ev.pcm)
    finally:
        model.prefill = real
    return timing, {k: np.concatenate(v) for k, v in pcm.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifacts")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    from ttscore.runtime.families import load_model

    if args.artifacts:
        art = Path(args.artifacts)
    else:
        from export.exporter import export_checkpoint
        from export.voxcpm2.tiny import make_tiny_voxcpm2

        tmp = Path(tempfile.mkdtemp(prefix="voxcpm2-prefill-"))
        art = tmp / "artifacts"
        export_checkpoint(make_tiny_voxcpm2(tmp / "VoxCPM2-tiny", seed=0), art)
    model = load_model(art)
    run_once(model, args.concurrency, True)  # warm-up (ONNX Runtime's first calls)
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"batched": [], "one_at_a_time": []}
    audio_err = 0.0
    for _ in range(args.repeats):
        a_t, a_pcm = run_once(model, args.concurrency, True)
        b_t, b_pcm = run_once(model, args.concurrency, False)
        runs["batched"].append(a_t)
        runs["one_at_a_time"].append(b_t)
        for k in a_pcm:
            if a_pcm[k].shape != b_pcm[k].shape:
                audio_err = float("inf")
            else:
                audio_err = max(audio_err, float(np.abs(a_pcm[k] - b_pcm[k]).max()))
    summary: dict[str, Any] = {"concurrency": args.concurrency, "repeats": args.repeats,
                               "artifacts": str(art), "audio_max_abs_batched_vs_one_at_a_time": audio_err}
    lines = ["| mode | request | prompt tokens | prefill start (ms, median) | prefill end (ms) | "
             "first frame (ms) | waits for another's prefill |", "|---|---|---|---|---|---|---|"]
    for mode, rs in runs.items():
        per: dict[str, Any] = {}
        for key in rs[0]:
            med = {f: statistics.median(r[key][f] for r in rs) for f in ("start_ms", "end_ms", "first_frame_ms")}
            waits = sum(r[key]["start_ms"] > min(x["start_ms"] for x in r.values()) for r in rs)
            per[key] = {**med, "prompt_tokens": int(rs[0][key]["prompt_tokens"]), "waited_in_runs": waits}
            lines.append(f"| {mode} | {key} | {per[key]['prompt_tokens']} | {med['start_ms']:.1f} | "
                         f"{med['end_ms']:.1f} | {med['first_frame_ms']:.1f} | {waits}/{len(rs)} runs |")
        summary[mode] = per
    table = "\n".join(lines)
    print(table)
    print(f"audio max abs, batched vs one at a time: {audio_err:.2e}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({**summary, "table": table}, indent=2))
    return 0 if audio_err <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
