"""Throughput through Triton (continuous batching) vs the offline pipeline run sequentially.

    triton-tts bench triton --artifacts build/bench/art-custom_voice-0.6b-fp32 \
        --concurrency 1 4 8 --frames 40 --out perf/results/triton-0.6b-fp32.json

One run, same machine, same artifacts, in this order:
  1. offline: the requests one after another through ttscore's Generator in this process;
  2. Triton: the rendered repository served by the real tritonserver, N gRPC streams at a time.
Reports aggregate audio seconds per wall second, time to first audio (TTFA) p50/p95, inter-chunk
gaps, and the ratio to the sequential offline throughput. Every request is greedy with a fixed
frame budget, so each produces the same audio length in both modes.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np

from triton_tts.progress import Stages, add_quiet

TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Streaming speech synthesis lets applications start playing audio early.",
    "Continuous batching shares every model step across active requests.",
    "A calm voice reads the evening news while the city lights come on.",
    "Please remember to bring your umbrella, it might rain this afternoon.",
    "Numbers like three point one four are read aloud one digit at a time.",
    "The orchestra tuned their instruments before the concert began.",
    "Every morning the baker opens the shop at exactly six o'clock.",
]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def offline(artifacts: Path, n: int, frames: int, threads: int) -> dict:
    from triton_tts.bench import common
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.engine import Generator

    manifest = read_manifest(artifacts)
    family, speaker, rate = manifest.family, common.first_speaker(manifest), common.sample_rate(manifest)
    pipe = common.load_model(artifacts, threads=threads)
    gen = Generator(pipe, max_batch=1)
    list(gen.synthesize(common.request(family, text="warm up", speaker=speaker, max_new_tokens=2)))
    ttfa, audio = [], 0.0
    t0 = time.perf_counter()
    for i in range(n):
        req = common.request(family, text=TEXTS[i % len(TEXTS)], speaker=speaker, max_new_tokens=frames,
                             do_sample=False, subtalker_do_sample=False)
        ts = time.perf_counter()
        first = None
        for ev in gen.synthesize(req):
            if first is None and ev.pcm.size:
                first = time.perf_counter() - ts
            audio += ev.pcm.size / rate
        ttfa.append(first or float("nan"))
    wall = time.perf_counter() - t0
    return {"requests": n, "audio_s": round(audio, 2), "wall_s": round(wall, 2),
            "audio_s_per_s": round(audio / wall, 3), "ttfa_p50_s": round(pct(ttfa, 50), 3),
            "ttfa_p95_s": round(pct(ttfa, 95), 3)}


def one_stream(url: str, model: str, family: str, text: str, speaker: str | None, frames: int, out: dict) -> None:
    import tritonclient.grpc as grpcclient

    from triton_tts.bench import common

    q: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: q.put((result, error, time.perf_counter())))
    tensors = common.wire_inputs(family, text=text, speaker=speaker, max_new_tokens=frames,
                                 do_sample=False, subtalker_do_sample=False)
    dtypes = {"int64": "INT64", "int32": "INT32", "float32": "FP32", "bool": "BOOL", "object": "BYTES"}
    inputs = []
    for name, arr in tensors.items():
        t = grpcclient.InferInput(name, list(arr.shape), dtypes[arr.dtype.name])
        t.set_data_from_numpy(arr)
        inputs.append(t)
    t0 = time.perf_counter()
    client.async_stream_infer(model, inputs, request_id=text[:16], enable_empty_final_response=True)
    stamps, samples, error = [], 0, None
    while True:
        result, err, ts = q.get(timeout=600)
        if err is not None:
            error = str(err)
            break
        audio = result.as_numpy("audio")
        if audio is not None and audio.size:
            samples += audio.size
            stamps.append(ts - t0)
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    out.update(ttfa=stamps[0] if stamps else float("nan"), samples=samples, error=error,
               gaps=list(np.diff(stamps)) if len(stamps) > 1 else [], end=time.perf_counter())


def triton_level(url: str, model: str, family: str, speaker: str | None, rate: int, concurrency: int, frames: int,
                 waves: int) -> dict:
    n = concurrency * waves
    results: list[dict] = [{} for _ in range(n)]
    sem = threading.Semaphore(concurrency)

    def run(i: int) -> None:
        with sem:
            one_stream(url, model, family, TEXTS[i % len(TEXTS)], speaker, frames, results[i])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    errors = [r["error"] for r in results if r.get("error")]
    audio = sum(r.get("samples", 0) for r in results) / rate
    ttfa = [r["ttfa"] for r in results if not r.get("error")]
    gaps = [g for r in results for g in r.get("gaps", [])]
    return {"concurrency": concurrency, "requests": n, "errors": len(errors), "audio_s": round(audio, 2),
            "wall_s": round(wall, 2), "audio_s_per_s": round(audio / wall, 3),
            "ttfa_p50_s": round(pct(ttfa, 50), 3), "ttfa_p95_s": round(pct(ttfa, 95), 3),
            "gap_p50_s": round(pct(gaps, 50), 3), "gap_p95_s": round(pct(gaps, 95), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--waves", type=int, default=1, help="requests per level = concurrency * waves")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--offline-requests", type=int, default=8)
    ap.add_argument("--work", default="build/bench/triton")
    ap.add_argument("--out", default="perf/results/triton.json")
    add_quiet(ap)
    args = ap.parse_args()

    from triton_tts.bench import common
    from triton_tts.serve import Served, plan_deployment
    from ttscore.backend import repository
    from ttscore.backend.triton_server import TritonServer
    from ttscore.contract.manifest import read_manifest

    art = Path(args.artifacts).resolve()
    manifest = read_manifest(art)
    family, speaker, rate = manifest.family, common.first_speaker(manifest), common.sample_rate(manifest)
    os.environ["TTS_ORT_THREADS"] = str(args.threads)

    result: dict = {"artifacts": str(art), "model_size": manifest.model_size,
                    "precision": manifest.precision, "frames_per_request": args.frames,
                    "threads": args.threads, "cpus": os.cpu_count()}
    levels = []
    with Stages("bench triton", total=3 + len(args.concurrency), quiet=args.quiet) as stages:
        stages.stage(f"offline sequential: {args.offline_requests} requests")
        result["offline_sequential"] = offline(art, args.offline_requests, args.frames, args.threads)
        print(json.dumps(result["offline_sequential"]), flush=True)

        served = [Served("bench", art, art, manifest)]
        plan = plan_deployment(served, max_active=max(args.concurrency))
        for name in plan["settings"]:
            plan["settings"][name].setdefault("parameters", {})["intra_op_threads"] = str(args.threads)
        work = Path(args.work)
        repo = repository.render_repository(work / "model_repository", plan["settings"], models=plan["models"],
                                            aliases=plan["aliases"])
        stages.stage("starting tritonserver")
        with TritonServer(repo, log_file=work / "tritonserver.log", ready_timeout_s=600) as server:
            stages.stage("warm-up")
            one_stream(server.grpc_url, served[0].triton_model, family, "warm up", speaker, 2, {})
            for c in args.concurrency:
                stages.stage(f"triton concurrency {c}: {c * args.waves} requests")
                lv = triton_level(server.grpc_url, served[0].triton_model, family, speaker, rate, c, args.frames,
                                  args.waves)
                lv["speedup_vs_offline_sequential"] = round(
                    lv["audio_s_per_s"] / result["offline_sequential"]["audio_s_per_s"], 2)
                print(json.dumps(lv), flush=True)
                levels.append(lv)
    result["triton"] = levels
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
