"""MOSS-TTS-Nano's codec decoder (the in-process arena vocoder) of two or more exports, side by side in one run:
`--streams` streams decoded together in chunks of `--chunk` frames from position 0 to `--frames`, random codes,
the exports taking turns `--rounds` times. Reported: ms per stream-frame (every call after the first, which also
pays ONNX Runtime's first-run work).

    python perf/moss_tts_nano_vocoder_ab.py before=ART_A after=ART_B --streams 8 --chunk 2 12 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ttscore.contract.manifest import read_manifest
from ttscore.runtime.families.moss_tts_nano.model import MossModel


def per_stream_frame_ms(artifacts: Path, streams: int, chunk: int, frames: int, threads: int) -> float:
    model = MossModel(artifacts, read_manifest(artifacts), threads=threads)
    vocoder = model.vocoder
    assert vocoder is not None
    rows = [vocoder.new_stream() for _ in range(streams)]
    rng = np.random.default_rng(0)
    times = []
    for _ in range(0, frames, chunk):
        items = [(s, rng.integers(0, model.config.codebook_size, (chunk, model.num_codebooks))) for s in rows]
        t = time.perf_counter()
        vocoder.decode(items)
        times.append(time.perf_counter() - t)
    return float(np.mean(times[1:]) * 1e3 / (streams * chunk))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("exports", nargs="+", help="NAME=ARTIFACTS_DIR")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--chunk", type=int, nargs="+", default=[2, 12])
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    exports = dict(e.split("=", 1) for e in args.exports)
    rows = []
    for r in range(args.rounds):
        for name, art in exports.items():
            for chunk in args.chunk:
                ms = per_stream_frame_ms(Path(art), args.streams, chunk, args.frames, args.threads)
                rows.append({"round": r + 1, "export": name, "chunk": chunk, "ms_per_stream_frame": round(ms, 3)})
                print(f"round {r + 1} {name} chunk={chunk}: {ms:.2f} ms per stream-frame", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"streams": args.streams, "frames": args.frames, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
