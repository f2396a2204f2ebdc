"""This project's exported pipeline side by side with another engine's command, alternating.

    triton-tts bench peer --artifacts build/bench/art-custom_voice-0.6b-int8 --frames 40 --threads 2 \
        --peer 'c-int8=/opt/qwen3-tts/qwen_tts -d CKPT --text {text} --max-frames {frames} -j {threads} -o {wav}' \
        --repeats 3 --out perf/results/peer-0.6b.json

One single-stream greedy request of `--frames` frames through our engine in this process (no Triton:
the talker, the code predictor and the vocoder, each graph's time counted as `bench breakdown`
does), then each `--peer LABEL=COMMAND` once, and so on for `--repeats` rounds after one warm-up
round, so machine load falls on every engine alike. The table is the median of the rounds.

A peer command is split like a shell line (no shell runs it) and its placeholders replaced in each
word: `{text}` (the same text we synthesize), `{frames}`, `{threads}`, and `{wav}`, a fresh path
where the peer writes its audio. With `{wav}` the peer's frames are counted from that file
(samples / samples per frame of our manifest, so the peer must write the same 24 kHz audio);
without it the peer is taken to have made `--frames` frames. The peer's whole wall time is counted
(its model loading too: give it a command that loads once, or compare with that in mind).
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set to `--threads` for it. A peer that prints its own
real-time factor (`--peer-rtf`, by default a number after "RTF", as the pure-C Qwen3-TTS engine's
"Audio: 3.2s generated in 5.4s (RTF 1.67)") also gets that row: its time without model loading,
which is what ours measures (from the request to the last audio, prefill included, the graphs
already loaded). The comparison takes the peer's best of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from triton_tts.bench import common
from triton_tts.progress import Stages, add_quiet

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."


def peer_argv(command: str, *, text: str, frames: int, threads: int, wav: Path) -> list[str]:
    """The peer's argv: `command` split like a shell line, each word's placeholders replaced."""
    values = {"{text}": text, "{frames}": str(frames), "{threads}": str(threads), "{wav}": str(wav)}
    argv = []
    for word in shlex.split(command):
        for key, value in values.items():
            word = word.replace(key, value)  # noqa: PLW2901
        argv.append(word)
    if not argv:
        raise SystemExit("--peer: empty command")
    return argv


def parse_peer(spec: str) -> tuple[str, str]:
    """`LABEL=COMMAND` -> (label, command); the label names the peer's row."""
    label, sep, command = spec.partition("=")
    if not sep or not label.strip() or not command.strip() or " " in label.strip():
        raise SystemExit(f"--peer {spec!r}: expected LABEL=COMMAND (a label without spaces)")
    return label.strip(), command


def run_peer(command: str, *, frames: int, threads: int, samples_per_frame: int, timeout: float) -> dict[str, Any]:
    """Run the peer once: wall seconds and the frames it made."""
    import soundfile as sf

    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        wav = Path(tmp) / "peer.wav"
        argv = peer_argv(command, text=TEXT, frames=frames, threads=threads, wav=wav)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
        t0 = time.perf_counter()
        proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, env=env)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"peer {argv[0]} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        made = frames
        if "{wav}" in command:
            if not wav.is_file():
                raise SystemExit(f"peer {argv[0]} wrote no audio to {{wav}}")
            made = sf.info(str(wav)).frames / samples_per_frame
    return {"seconds": seconds, "frames": made, "output_tail": (proc.stdout + proc.stderr)[-1500:]}


DEFAULT_RTF_PATTERN = r"\bRTF[ =:]*([0-9]+(?:\.[0-9]+)?)"


def reported_rtf(output: str, pattern: str) -> float | None:
    """The last real-time factor a peer printed (the first group of `pattern`), or None."""
    found = re.findall(pattern, output)
    return float(found[-1]) if found else None


def summary(runs: list[dict[str, Any]], frame_seconds: float, rtf_pattern: str | None = None) -> dict[str, Any]:
    """Median ms per frame and RTF over the rounds (each round's own frames); for a peer that
    printed its RTF in every round (`rtf_pattern`), that median too, and the best of the two as
    `best_ms_per_frame` (wall time counts its model loading, its own report does not)."""
    per_frame = [r["seconds"] / max(r["frames"], 1e-9) for r in runs]
    med = statistics.median(per_frame)
    out: dict[str, Any] = {"ms_per_frame": round(1000 * med, 1), "rtf": round(med / frame_seconds, 3),
                           "runs_ms_per_frame": [round(1000 * x, 1) for x in per_frame],
                           "frames": [r["frames"] for r in runs]}
    out["best_ms_per_frame"] = out["ms_per_frame"]
    if any("output_tail" in r for r in runs):  # what the peer printed (its own timings, if any)
        out["output_tails"] = [r.get("output_tail", "") for r in runs]
        rtfs = [reported_rtf(r.get("output_tail", ""), rtf_pattern) for r in runs] if rtf_pattern else []
        if rtfs and all(x is not None for x in rtfs):
            own = statistics.median(x for x in rtfs if x is not None)
            out["reported_rtf"] = round(own, 3)
            out["reported_runs_rtf"] = rtfs
            out["reported_ms_per_frame"] = round(1000 * own * frame_seconds, 1)
            out["best_ms_per_frame"] = min(out["ms_per_frame"], out["reported_ms_per_frame"])
    return out


def table(result: dict[str, Any]) -> str:
    """One row per engine; `ours / best`: our ms per frame over the engine's best (wall or own report)."""
    graphs = list(result["ours"]["graph_ms_per_frame"])
    head = ["engine", "ms per frame (wall)", "own report ms per frame", "RTF (best)", "ours / best",
            *[f"{g} ms" for g in graphs]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ours = result["ours"]["ms_per_frame"]
    frame_ms = result["meta"]["frame_ms"]
    for label, row in result["engines"].items():
        parts = [f"{row['graph_ms_per_frame'][g]:.1f}" if "graph_ms_per_frame" in row else "-" for g in graphs]
        best = row["best_ms_per_frame"]
        lines.append(f"| {label} | {row['ms_per_frame']} | {row.get('reported_ms_per_frame', '-')} | "
                     f"{best / frame_ms:.3f} | {ours / best:.2f} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """One bar per engine, ms per 80 ms frame at its best (ours split by graph), the real-time line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = result["engines"]
    labels = list(engines)
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(labels) + 1.6))
    frame_ms = result["meta"]["frame_ms"]
    for i, label in enumerate(labels):
        row = engines[label]
        if "graph_ms_per_frame" in row:
            left = 0.0
            for g, ms in row["graph_ms_per_frame"].items():
                ax.barh(i, ms, left=left, label=g)
                left += ms
            ax.barh(i, max(row["best_ms_per_frame"] - left, 0.0), left=left, color="lightgrey", label="other")
        else:
            ax.barh(i, row["best_ms_per_frame"], color="slategrey")
        ax.text(row["best_ms_per_frame"] + 1, i, f"{row['best_ms_per_frame']:.0f} ms", va="center")
    ax.axvline(frame_ms, color="black", linestyle=":", linewidth=1)
    ax.text(frame_ms, len(labels) - 0.4, " real time", va="bottom")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"ms per {frame_ms:.0f} ms frame (median of {result['meta']['repeats']} alternating rounds; "
                  "peers: best of wall and own report)")
    ax.set_xlim(0, 1.15 * max(row["best_ms_per_frame"] for row in engines.values()))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    meta = result["meta"]
    ax.set_title(f"{meta['frames']} frames, {meta['threads']} threads, {meta['cpus']} cpus, load {meta['load_average'][0]:.1f}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", required=True, help="our exported artifacts (a preset-voice checkpoint)")
    ap.add_argument("--peer", action="append", default=[], metavar="LABEL=COMMAND",
                    help="another engine's command line ({text} {frames} {threads} {wav}); repeatable")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-frames", type=int, default=25, help="our frames per vocoder call after the first")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one peer run may take")
    ap.add_argument("--peer-rtf", default=DEFAULT_RTF_PATTERN, metavar="REGEX",
                    help="where a peer prints its own real-time factor (first group); '' to ignore")
    ap.add_argument("--out", help="write the results as JSON (the table next to it as .md, a plot as .png)")
    add_quiet(ap)
    common.add_thread_pool(ap)
    args = ap.parse_args()
    peers = dict(parse_peer(p) for p in args.peer)
    if "ours" in peers:
        raise SystemExit("--peer: the label 'ours' names this project's row")

    os.environ.setdefault("TTS_ORT_THREADS", str(args.threads))
    common.use_thread_pool(args)
    from triton_tts.bench.breakdown import measure
    from ttscore.contract.manifest import read_manifest

    manifest = read_manifest(args.artifacts)
    frame_seconds = common.frame_seconds(manifest)
    samples_per_frame = round(frame_seconds * common.sample_rate(manifest))
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], **{label: [] for label in peers}}
    graph_ms: list[dict[str, float]] = []
    with Stages("bench peer", total=2 + args.repeats, quiet=args.quiet) as stages:
        stages.stage("load")
        pipe = common.load_model(args.artifacts, threads=args.threads, encoders=False)
        for rnd in range(-1, args.repeats):
            stages.stage("warm-up" if rnd < 0 else f"round {rnd + 1}/{args.repeats}")
            m = measure(pipe, manifest, 1, args.frames, args.chunk_frames, warm_up=False)
            for label, command in peers.items():
                p = run_peer(command, frames=args.frames, threads=args.threads, samples_per_frame=samples_per_frame,
                             timeout=args.timeout)
                if rnd >= 0:
                    runs[label].append(p)
            if rnd >= 0:
                made = m["frames_per_stream"]
                runs["ours"].append({"seconds": m["step_ms"] * m["steps"] / 1000, "frames": made})
                graph_ms.append({g: ms * m["steps"] / made for g, ms in m["graph_ms_per_step"].items()})
    engines = {label: summary(rs, frame_seconds, args.peer_rtf or None) for label, rs in runs.items()}
    engines["ours"]["graph_ms_per_frame"] = {g: round(statistics.median(x[g] for x in graph_ms), 1) for g in graph_ms[0]}
    result: dict[str, Any] = {
        "meta": {"artifacts": str(args.artifacts), "precision": manifest.precision, "frames": args.frames,
                 "threads": args.threads, "repeats": args.repeats, "text": TEXT, "peers": peers,
                 "frame_ms": round(1000 * frame_seconds, 3), "thread_pool": args.thread_pool,
                 "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                 "load_average": os.getloadavg()},
        "ours": engines["ours"], "engines": engines,
    }
    md = table(result)
    print(md)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        out.with_suffix(".md").write_text(md + "\n")
        plot(result, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
