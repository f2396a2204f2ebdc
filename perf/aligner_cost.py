"""Alignment cost of an aligner export: ForcedAligner.align on 2, 5 and 10 s clips (24 kHz, a voiced tone) with about
2.6 words a second of text, best of 3 after a warm-up, 2 ONNX Runtime threads.

    python perf/aligner_cost.py ARTIFACTS OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from ttscore.contract.plugins import aligner_part

RATE = 24000
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "and", "then", "it", "runs", "far", "away", "into", "the", "forest"]


def main(artifacts: str, out: str) -> None:
    aligner = aligner_part("ttscore.runtime.{}.model", "ForcedAligner")(artifacts, threads=2)  # type: ignore[operator]
    rows = []
    for seconds in (2.0, 5.0, 10.0):
        n_words = max(3, int(seconds * 2.6))
        text = " ".join((WORDS * 4)[:n_words]) + "."
        t = np.arange(int(seconds * RATE)) / RATE
        pcm = (0.2 * np.sin(2 * np.pi * 180 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2)).astype(np.float32)
        aligner.align(pcm, text, "English", sample_rate=RATE)  # warm-up
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            aligner.align(pcm, text, "English", sample_rate=RATE)
            best = min(best, time.perf_counter() - t0)
        rows.append({"audio_s": seconds, "words": n_words, "align_s": round(best, 3),
                     "ms_per_audio_s": round(1000 * best / seconds, 1)})
        print(rows[-1], flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
