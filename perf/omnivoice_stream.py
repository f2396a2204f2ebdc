"""Time to first audio vs total time of a multi-sentence OmniVoice request through a running gateway.

    triton-tts serve --checkpoint /path/to/OmniVoice --port 8091 &      # the real Triton + gateway
    .venv/bin/python perf/omnivoice_stream.py --url http://127.0.0.1:8091 --model OmniVoice \\
        [--repeats 2] [--num-step 32] [--out perf/results/omnivoice-stream.json]

OmniVoice is non-autoregressive: a generation's audio exists only after its last unmasking step. A
streamed request (`stream=true`, SSE here) is generated in sentence chunks (the gateway sets
`sentence_chunks`), each chunk's audio sent as soon as it is decoded, so its first audio comes after
the first chunk's steps instead of after the whole text's. Side by side in one run, alternating, for
each repeat: the streamed request (TTFA = its first `speech.audio.delta`, total = `speech.audio.done`)
and the same text as a whole file (one generation, as the reference does under 30 s). Reported as
ratios (TTFA / streamed total, streamed total / whole-file total) because this machine is shared.

A client only (httpx and the standard library), like perf/soak.py.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

TEXT = "The first sentence is short. A second one follows it. The third ends the request."


def streamed(client: httpx.Client, body: dict[str, Any]) -> dict[str, float]:
    """One SSE request: seconds to the first audio event and to the done event, audio seconds, events."""
    t0 = time.perf_counter()
    first: float | None = None
    samples, events = 0, 0
    with client.stream("POST", "/v1/audio/speech", json={**body, "stream": True, "response_format": "pcm"}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read().decode(errors='replace')}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[len("data: "):])
            if event["type"] == "speech.audio.delta":
                first = first if first is not None else time.perf_counter() - t0
                samples += len(base64.b64decode(event["audio"])) // 2
                events += 1
            elif event["type"] == "speech.audio.error":
                raise RuntimeError(event)
    total = time.perf_counter() - t0
    assert first is not None, "no audio"
    return {"ttfa_s": first, "total_s": total, "audio_s": samples / 24000, "events": events}


def whole(client: httpx.Client, body: dict[str, Any]) -> dict[str, float]:
    t0 = time.perf_counter()
    r = client.post("/v1/audio/speech", json={**body, "response_format": "pcm"})
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text}")
    total = time.perf_counter() - t0
    return {"ttfa_s": total, "total_s": total, "audio_s": len(r.content) / 2 / 24000, "events": 1}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8091")
    p.add_argument("--model", required=True)
    p.add_argument("--text", default=TEXT)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--num-step", type=int, default=32)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    body = {"model": args.model, "input": args.text, "seed": 1, "extra_params": {"num_step": args.num_step}}
    runs: dict[str, list[dict[str, float]]] = {"stream": [], "whole": []}
    with httpx.Client(base_url=args.url, timeout=3600) as client:
        for i in range(args.repeats):
            for kind, fn in (("stream", streamed), ("whole", whole)) if i % 2 == 0 else (("whole", whole),
                                                                                          ("stream", streamed)):
                runs[kind].append(fn(client, body))
                print(kind, {k: round(v, 3) for k, v in runs[kind][-1].items()}, flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("ttfa_s", "total_s", "audio_s", "events")}
           for k, v in runs.items()}
    s, w = med["stream"], med["whole"]
    summary = {"ttfa_over_stream_total": s["ttfa_s"] / s["total_s"], "stream_total_over_whole": s["total_s"] / w["total_s"],
               "ttfa_over_whole": s["ttfa_s"] / w["total_s"]}
    print("| request | TTFA s (median) | total s (median) | audio s | audio events |")
    print("|---|---|---|---|---|")
    for kind in ("stream", "whole"):
        m = med[kind]
        print(f"| {kind} | {m['ttfa_s']:.2f} | {m['total_s']:.2f} | {m['audio_s']:.2f} | {m['events']:.0f} |")
    print(" ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {**vars(args), "out": str(args.out)}, "runs": runs, "median": med,
                                        "ratios": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
