"""MOSS-TTS-Nano's floor on this machine (issue 39's method, as the Qwen3-TTS table computes it).

    .venv/bin/python perf/moss_tts_nano_floor.py --artifacts ART_FP32 ART_INT8 --out perf/results/moss-tts-nano-floor.json

Measured here, 2 threads: the memory bandwidth (numpy `dot` of a float32 vector with an 800 MB matrix, streamed
from memory: the Qwen3-TTS table's measurement) and the fp32 GEMM rate (numpy `matmul`, [1024, 1024] x [1024, 1024],
and the codec's attention shape [384, 64] x [64, 4000]). Counted from each export: the bytes a frame's language
model must read (global_step's weights once, its K/V at `--position`; local_step's weights and one codebook head 16
times: an upper bound, since int8 local weights (7 MB) fit the 32 MB L3) and the codec decoder's FLOPs per frame
at a full attention window (steady state) and at the average fill of a `--seconds` stream (the decoder attends
only over the filled part of its 10 s windows). Floor (ms per audio second) = max(LM bytes / bandwidth, codec
FLOPs / GEMM rate) x 12.5 frames; both terms are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from floor import bandwidth, weight_bytes  # perf/floor.py: the same measurements for any family

FRAMES_PER_S = 12.5


def gemm(m: int, k: int, n: int, repeats: int = 9) -> float:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * m * k * n / statistics.median(times)


def lm_bytes(art: Path, position: int) -> dict[str, Any]:
    m = json.loads((art / "manifest.json").read_text())
    s = m["sizes"]
    dim, layers, local_layers = s["dim"], s["layers"], s["local_layers"]
    g = weight_bytes(art / m["graphs"]["global_step"]["file"])
    loc = weight_bytes(art / m["graphs"]["local_step"]["file"])
    heads_buf = s["n_vq"] * s["codebook_size"] * dim * 4  # the tied audio heads, fp32, one row block read a step
    local_layer = loc - heads_buf
    one_head = s["codebook_size"] * dim * 4
    kv = 2 * layers * dim * 4 * position  # global K/V at `position`, fp32
    local_kv = 2 * local_layers * dim * 4 * 17
    per_frame = g + kv + 16 * (local_layer + one_head) + local_kv
    return {"precision": m.get("precision"), "global_weights": g, "global_kv_at_position": kv,
            "local_layer_weights": local_layer, "local_head_per_step": one_head, "bytes_per_frame": per_frame}


def codec_flops(ckpt: Path, seconds: float) -> dict[str, Any]:
    from export.moss_tts_nano.codec import codec_dims

    d = codec_dims(json.loads((ckpt / "audio_tokenizer" / "config.json").read_text()))
    mods = [x for x in d.raw["decoder_kwargs"] if x["module_type"] == "Transformer"]
    stages = [s for s in d.decoder if s.prefix]
    frames = seconds * FRAMES_PER_S
    full = avg = 0.0
    for s, mod in zip(stages, mods, strict=True):
        dm, ff, n = mod["d_model"], mod["dim_feedforward"], mod["num_layers"]
        weights = n * (4 * dm * dm + 2 * dm * ff) + mod["input_dimension"] * dm + dm * mod["output_dimension"]
        filled = min(s.window, frames * s.per_frame / 2)  # average ring fill over the stream
        full += s.per_frame * (weights + n * 2 * s.context * dm)
        avg += s.per_frame * (weights + n * 2 * (filled + s.per_frame) * dm)
    return {"gflop_per_frame_full_window": round(2 * full / 1e9, 3),
            f"gflop_per_frame_{seconds:g}s_stream": round(2 * avg / 1e9, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--artifacts", nargs="+", required=True, help="exports (fp32, int8)")
    ap.add_argument("--checkpoint", required=True, help="the checkpoint (its audio_tokenizer/config.json)")
    ap.add_argument("--position", type=int, default=100, help="global positions in the past (prompt + frames)")
    ap.add_argument("--seconds", type=float, default=2.0, help="stream length for the codec's average fill")
    ap.add_argument("--out")
    args = ap.parse_args()
    bw = bandwidth()
    rates = {"square_1024": gemm(1024, 1024, 1024), "attention_384x64x4000": gemm(384, 64, 4000)}
    rate = max(rates.values())
    codec = codec_flops(Path(args.checkpoint), args.seconds)
    rows = []
    for art in args.artifacts:
        lm = lm_bytes(Path(art), args.position)
        lm_ms = 1000 * lm["bytes_per_frame"] / bw * FRAMES_PER_S
        full_ms = 1000 * codec["gflop_per_frame_full_window"] * 1e9 / rate * FRAMES_PER_S
        short_ms = 1000 * codec[f"gflop_per_frame_{args.seconds:g}s_stream"] * 1e9 / rate * FRAMES_PER_S
        rows.append({"artifacts": art, **lm, "lm_ms_per_audio_s": round(lm_ms, 1),
                     "codec_ms_per_audio_s_full_window": round(full_ms, 1),
                     f"codec_ms_per_audio_s_{args.seconds:g}s_stream": round(short_ms, 1),
                     "floor_ms_per_audio_s": round(max(lm_ms, full_ms), 1),
                     f"floor_ms_per_audio_s_{args.seconds:g}s_stream": round(max(lm_ms, short_ms), 1)})
    out = {"bandwidth_gb_s": round(bw / 1e9, 2), "gemm_gflop_s": {k: round(v / 1e9, 1) for k, v in rates.items()},
           "codec": codec, "load_average": os.getloadavg(), "rows": rows}
    print(json.dumps(out, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
