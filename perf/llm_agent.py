"""A voice agent's view of the WebSocket: text arriving word by word from an "LLM" at a fixed rate,
first audio and total time for split_granularity none, sentence and incremental, side by side.

    triton-tts serve --checkpoint <Qwen3-TTS CustomVoice> --port 8091 &       # the real Triton + gateway
    .venv/bin/python perf/llm_agent.py --url http://127.0.0.1:8091 --model <its id> \\
        [--words-per-second 15] [--repeats 3] [--max-new-tokens 80] [--out perf/results/llm-agent]

Per utterance, over one WebSocket session per mode (`stream_audio`, pcm): one thread sends the
text one word per 1/rate seconds (`input.text` per word, then `input.done`) while the main thread
reads the audio. Times are from the first word sent: first audio (the first binary frame), last
word (when input.done went out) and total (`session.done`). The modes alternate within each repeat
(rotated, so none always goes first) and the medians are reported; `results.json`, `table.md` and
`plot.png` go to --out. A client only (websockets and the standard library; matplotlib for the plot).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

TEXT = ("Sure, I can help with that. Your order left the warehouse this morning and should arrive on "
        "Thursday. Would you like me to send the tracking link to your phone as well?")
MODES = ("none", "sentence", "incremental")


def utterance(url: str, model: str | None, mode: str, words: list[str], rate: float, max_new_tokens: int,
              seed: int) -> dict[str, Any]:
    from websockets.sync.client import connect

    config: dict[str, Any] = {"type": "session.config", "voice": "vivian", "language": "English", "seed": seed,
                              "max_new_tokens": max_new_tokens, "stream_audio": True, "response_format": "pcm",
                              "split_granularity": mode}
    if model:
        config["model"] = model
    with connect(url, max_size=None) as ws:
        ws.send(json.dumps(config))
        if mode == "incremental":
            configured = json.loads(ws.recv(timeout=60))
            if configured.get("split_granularity") != "incremental":
                raise RuntimeError(f"incremental is not in effect: {configured}")
        sent: dict[str, float] = {}

        def llm() -> None:
            t0 = time.perf_counter()
            sent["first"] = t0
            for i, word in enumerate(words):
                target = t0 + i / rate
                time.sleep(max(0.0, target - time.perf_counter()))
                ws.send(json.dumps({"type": "input.text", "text": word if i == 0 else " " + word}))
            ws.send(json.dumps({"type": "input.done"}))
            sent["last"] = time.perf_counter()

        sender = threading.Thread(target=llm)
        sender.start()
        first_audio: float | None = None
        audio_bytes, requests, errors = 0, 0, []
        while True:
            message = ws.recv(timeout=600)
            now = time.perf_counter()
            if isinstance(message, bytes):
                first_audio = first_audio if first_audio is not None else now
                audio_bytes += len(message)
                continue
            event = json.loads(message)
            if event["type"] == "error":
                errors.append(event["message"])
            elif event["type"] == "audio.start":
                requests += 1
            elif event["type"] == "session.done":
                done = now
                break
        sender.join()
        ws.send(json.dumps({"type": "session.close"}))
    if errors or first_audio is None:
        raise RuntimeError(f"{mode}: errors {errors}, audio {audio_bytes} bytes")
    t0 = sent["first"]
    return {"first_audio_s": first_audio - t0, "last_word_s": sent["last"] - t0, "total_s": done - t0,
            "audio_s": audio_bytes / 2 / 24000, "requests": requests}


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    return {mode: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for mode, rows in runs.items()}


def table(result: dict[str, Any]) -> str:
    s = result["median"]
    lines = ["| mode | first audio s | last word sent s | total s | audio s | requests |",
             "|---|---|---|---|---|---|"]
    for mode in MODES:
        m = s[mode]
        lines.append(f"| {mode} | {m['first_audio_s']:.3f} | {m['last_word_s']:.3f} | {m['total_s']:.3f} | "
                     f"{m['audio_s']:.2f} | {m['requests']:.0f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["median"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    y = range(len(MODES))
    ax.barh([i + 0.18 for i in y], [s[m]["total_s"] for m in MODES], height=0.34, color="#9db4d0", label="total")
    ax.barh([i - 0.18 for i in y], [s[m]["first_audio_s"] for m in MODES], height=0.34, color="#d0703c",
            label="first audio")
    ax.axvline(s["none"]["last_word_s"], color="grey", linestyle=":", label="last word sent")
    ax.set_yticks(list(y), MODES)
    ax.set_xlabel("seconds from the first word sent")
    ax.set_title(f"{result['words']} words at {result['words_per_second']:g} words/s, median of {result['repeats']}")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8091")
    ap.add_argument("--model", default=None)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--words-per-second", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    url = args.url.replace("http://", "ws://").replace("https://", "wss://").rstrip("/") + "/v1/audio/speech/stream"
    words = args.text.split()
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for i in range(args.repeats):
        order = MODES[i % 3:] + MODES[: i % 3]
        for mode in order:
            run = utterance(url, args.model, mode, words, args.words_per_second, args.max_new_tokens, seed=7)
            runs[mode].append(run)
            print(f"repeat {i} {mode}: " + ", ".join(f"{k} {v:.3f}" for k, v in run.items()), file=sys.stderr)
    result = {"words": len(words), "words_per_second": args.words_per_second, "repeats": args.repeats,
              "max_new_tokens": args.max_new_tokens, "text": args.text, "runs": runs, "median": summarize(runs)}
    print(table(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "table.md").write_text(table(result))
        plot(result, args.out / "plot.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
