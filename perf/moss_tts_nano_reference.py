"""MOSS-TTS-Nano's reference speed: mlx-audio 0.6.2's own `Model.generate` (mlx 0.32.4, CPU) on a checkpoint.

Run in the reference environment (.venv-mlx, no torch), e.g. by perf/moss_tts_nano.py:

    .venv-mlx/bin/python perf/moss_tts_nano_reference.py CKPT --frames 24 --repeats 2 --out ref.json
    .venv-mlx/bin/python perf/moss_tts_nano_reference.py CKPT --serve   # what triton_tts/bench/moss_tts_nano runs

`--serve`: load once, print `{"ready": true}`, then per stdin line `{"text", "frames"}` run `generate` and print
`{"frames": made, "seconds": ...}` (bench compare times it from outside).

Voice cloning from fixed reference codes (`prompt_audio_codes`: 25 frames, seeded, the same as the exported
pipeline's bench sends), greedy (`do_sample` False) and capped at `--frames`; with random weights the stop decision may end a request
earlier, so the frames made are counted. Timed: the whole `generate` (prompt, frames, the codec's decode of all of
them at the end: mlx-audio has no streaming), and its two parts alone (`generate_audio_token_ids`,
`decode_audio_token_ids`), each after one warm-up call; medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--out")
    ap.add_argument("--serve", action="store_true")
    args = ap.parse_args()

    import mlx.core as mx
    from mlx_audio.tts.utils import load_model

    mx.set_default_device(mx.cpu)
    model = load_model(Path(args.checkpoint), strict=True)
    # = triton_tts/bench/moss_tts_nano REF_CODES
    codes = mx.array(np.random.default_rng(0).integers(0, 16, (25, 16)), dtype=mx.int32)

    def whole(n: int) -> tuple[float, int]:
        t0 = time.perf_counter()
        res = list(model.generate(args.text, prompt_audio_codes=codes, max_tokens=n, do_sample=False))
        mx.eval(res[-1].audio)
        return time.perf_counter() - t0, int(res[-1].token_count)

    def lm(n: int) -> tuple[float, mx.array]:
        rows, mask = model.build_inference_input_ids(text=args.text, tokenizer=model.tokenizer, mode="voice_clone",
                                                     prompt_text=None, prompt_audio_codes=codes)
        t0 = time.perf_counter()
        frames = model.generate_audio_token_ids(prompt_input_ids=rows, attention_mask=mask, max_new_frames=n,
                                                do_sample=False)
        mx.eval(frames)
        return time.perf_counter() - t0, frames

    def decode(frames: mx.array) -> float:
        t0 = time.perf_counter()
        mx.eval(model.decode_audio_token_ids(frames))
        return time.perf_counter() - t0

    if args.serve:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            ask = json.loads(line)
            args.text = ask["text"]
            dt, n = whole(int(ask["frames"]))
            print(json.dumps({"frames": n, "seconds": round(dt, 3)}), flush=True)
        return 0
    whole(2)
    runs = [whole(args.frames) for _ in range(args.repeats)]
    lm(2)
    lm_runs = [lm(args.frames) for _ in range(args.repeats)]
    frames = lm_runs[-1][1]
    decode(frames)
    dec = [decode(frames) for _ in range(args.repeats)]
    n_lm = int(frames.shape[1])
    frame_s = 0.08
    per = statistics.median(dt / max(n, 1) for dt, n in runs)
    out = {
        "reference": "mlx-audio 0.6.2 Model.generate (mlx 0.32.4, CPU), greedy, voice clone from 25 reference frames",
        "frames": [n for _, n in runs], "seconds": [round(dt, 3) for dt, _ in runs],
        "ms_per_frame": round(1000 * per, 1), "rtf": round(per / frame_s, 3), "frames_per_s": round(1 / per, 2),
        "lm_ms_per_frame": round(1000 * statistics.median(dt for dt, _ in lm_runs) / max(n_lm, 1), 1),
        "codec_decode_ms_per_frame": round(1000 * statistics.median(dec) / max(n_lm, 1), 1),
        "lm_frames": n_lm,
    }
    print(json.dumps(out))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
