"""Where a frame's time goes: each exported graph's share of a decode step, by batch size.

    triton-tts bench breakdown --artifacts build/bench/art-custom_voice-0.6b-int8 \
        --batch 1 8 --frames 20 --out perf/results/breakdown-0.6b-int8.json

In this process (no Triton), for each batch size B: B identical greedy requests of `--frames`
frames run together through the engine (fixed chunk schedule, `--chunk-frames` per chunk) after
one warm-up round; reports wall time per step, the time inside each ONNX Runtime graph per step
(talker, code predictor, vocoder), the rest (the engine's and the family's Python/numpy work),
per-stream RTF and aggregate audio seconds per second. It tells which graph caps single-stream
speed and which one stops scaling with the batch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from triton_tts.bench import common
from triton_tts.progress import Stages, add_quiet

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."


def _graphs(pipe: Any) -> dict[str, Any]:
    from ttscore.runtime.onnx import OnnxGraph

    found = {name: g for name, g in vars(pipe).items() if isinstance(g, OnnxGraph)}
    if pipe.vocoder is not None:
        found["vocoder"] = pipe.vocoder.graph
    return found


def measure(pipe: Any, manifest: Any, batch: int, frames: int, chunk_frames: int, *, warm_up: bool = True) -> dict[str, Any]:
    from ttscore.runtime.engine import Generator

    graphs = _graphs(pipe)
    bench = common.bench_families().get(manifest.family)
    # A family's bench request fields (MOSS-TTS-Nano: reference codes), the export's own first speaker, as compare's.
    fields = {**getattr(bench, "REQUEST", {}), "speaker": common.first_speaker(manifest)}
    result: dict[str, Any] = {}
    for _round in ("warm-up", "measured") if warm_up else ("measured",):
        for g in graphs.values():
            g.spent, g.calls = 0.0, 0
        gen = Generator(pipe, max_batch=batch, chunk_policy="fixed")
        for i in range(batch):
            gen.submit(f"r{i}", common.request(manifest.family, text=TEXT, max_new_tokens=frames, do_sample=False,
                                               subtalker_do_sample=False, chunk_frames=chunk_frames, **fields))
        steps, made = 0, 0
        t0 = time.perf_counter()
        while gen.num_active:
            made += sum(ev.frames for ev in gen.step())
            steps += 1
        wall = time.perf_counter() - t0
        audio = made * pipe.frame_seconds
        inside = {name: g.spent for name, g in graphs.items()}
        result = {
            "batch": batch,
            "frames_per_stream": made / batch,
            "steps": steps,
            "step_ms": 1000 * wall / steps,
            "graph_ms_per_step": {name: 1000 * s / steps for name, s in inside.items()},
            "outside_ms_per_step": 1000 * (wall - sum(inside.values())) / steps,
            "rtf_per_stream": wall / (audio / batch),
            "audio_s_per_s": audio / wall,
        }
    return result


def table(rows: list[dict[str, Any]]) -> str:
    names = list(rows[0]["graph_ms_per_step"])
    head = ["batch", "step ms", *[f"{n} ms" for n in names], "outside ms", "RTF per stream", "audio s per s", "vs batch 1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = rows[0]["audio_s_per_s"]
    for r in rows:
        cells = [str(r["batch"]), f"{r['step_ms']:.1f}", *[f"{r['graph_ms_per_step'][n]:.1f}" for n in names],
                 f"{r['outside_ms_per_step']:.1f}", f"{r['rtf_per_stream']:.2f}", f"{r['audio_s_per_s']:.3f}",
                 f"x{r['audio_s_per_s'] / base:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", required=True, help="an exported artifacts directory (one with preset voices, "
                    "or a zero-shot family)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--chunk-frames", type=int, default=25, help="frames per vocoder call after the first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the results as JSON (and the table next to it as .md)")
    add_quiet(ap)
    common.add_thread_pool(ap)
    args = ap.parse_args()

    os.environ.setdefault("TTS_ORT_THREADS", str(args.threads))
    common.use_thread_pool(args)
    from ttscore.contract.manifest import read_manifest

    manifest = read_manifest(args.artifacts)
    with Stages("breakdown", total=1 + len(args.batch), quiet=args.quiet) as stages:
        stages.stage("load")
        pipe = common.load_model(args.artifacts, threads=args.threads, encoders=False)
        rows = []
        for b in args.batch:
            stages.stage(f"batch {b}")
            rows.append(measure(pipe, manifest, b, args.frames, args.chunk_frames))
    md = table(rows)
    print(md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"artifacts": str(args.artifacts), "family": manifest.family, "precision": manifest.precision, "threads": args.threads,
                "frames": args.frames, "chunk_frames": args.chunk_frames, "machine": platform.processor(),
                "cpus": os.cpu_count(), "load_average": os.getloadavg()}
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        out.with_suffix(".md").write_text(md + "\n")


if __name__ == "__main__":
    main()
