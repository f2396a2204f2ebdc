"""CosyVoice3 streaming: each hop's vocoder work (flow + HiFT) along one long stream, at the real flow and
HiFT sizes (issue 39: a hop's cost should not grow with its position).

  checkpoint OUT        the real-size flow (DiT 332 M) and HiFT (20.8 M) with make-tiny's tiny LM: the LM is
                        not timed, and the full real checkpoint plus two real exports do not fit this machine's
                        disk (7 GB free). Same yaml and random init as `make-tiny --size real` for the flow/HiFT.
  table JSONL           the JSON lines as a markdown table (seconds per hop per export, hop 20 / hop 2).
  repeat NAME=TREE:ARTIFACTS...
                        hop A against hop B of the same stream's code, repeated in turn (--hops 2,20 --reps 5):
                        per export a worker on that tree's code advances one stream to just before hop A and
                        another to just before hop B, keeps each one's state (all but the K/V buffers, whose slots
                        a hop rewrites with the same values), then times hop A, restores it, times hop B, restores
                        it, and so on, the workers in turn: every hop of every export alternates within a minute,
                        so the machine's load hits them alike (two streams of the real flow hold 5-6 GB at hop 20).
  compare NAME=TREE:ARTIFACTS...
                        per export a worker process on that tree's code (its PYTHONPATH) pushes the same random
                        speech tokens through its `HopStream`, a hop at a time, the workers in turn (hop k of
                        each, then hop k + 1), so machine noise hits them alike; each hop's wall time (flow +
                        HiFT; no LM; wall and this process's CPU seconds, all threads) and the stream's K/V
                        cache size as JSON lines. Repeat an export (after=...:DIR twice, distinct names) for
                        several samples per hop.

  PYTHONPATH=$PWD .venv/bin/python perf/cosyvoice3_hops.py checkpoint /work/cosy-real/ckpt
  PYTHONPATH=$PWD .venv/bin/triton-tts export --checkpoint /work/cosy-real/ckpt --out /work/cosy-real/after
  git worktree add /work/wt/cosy-before 0a05a17   # main before issue 39; export it the same way to .../before
  .venv/bin/python perf/cosyvoice3_hops.py compare before=/work/wt/cosy-before:/work/cosy-real/before \
      after=$PWD:/work/cosy-real/after --hops 22 --out perf/results/cosyvoice3-hops.jsonl
  .venv/bin/python perf/cosyvoice3_hops.py table perf/results/cosyvoice3-hops.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def make_checkpoint(out: Path) -> None:
    from export.cosyvoice3 import tiny

    tiny_dims, real_dims = tiny.dims("tiny"), tiny.dims("real")
    lm_keys = ("hidden", "layers", "heads", "kv_heads", "inter")
    mixed = {**real_dims, **{k: tiny_dims[k] for k in lm_keys}}
    tiny.dims = lambda size: dict(mixed)  # type: ignore[assignment]
    tiny.make_tiny_cosyvoice3(out, seed=0, size="tiny")


def worker(artifacts: Path, hops: int, prompt_tokens: int, threads: int | None) -> None:
    """One export's stream: a hop per line read from stdin ("go"), its wall time printed as a JSON line."""
    import numpy as np

    from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs, HopStream, Prompt

    rng = np.random.default_rng(0)
    g = CosyVoice3Graphs(artifacts, threads)
    prompt = Prompt(text_ids=np.zeros(1, np.int64),
                    speech_tokens=rng.integers(0, g.speech_token_size, prompt_tokens).astype(np.int64),
                    feat=rng.standard_normal((g.ratio * prompt_tokens, g.mel_dim)).astype(np.float32) - 4,
                    embedding=rng.standard_normal(192).astype(np.float32))
    n = prompt_tokens + g.chunk_tokens * (hops + 2) + g.lookahead
    noise = np.random.default_rng(1).standard_normal((g.mel_dim, g.ratio * n)).astype(np.float32)
    tokens = [int(t) for t in np.random.default_rng(2).integers(0, g.speech_token_size, n)]
    hs = HopStream(g, prompt, noise)
    pos = 0
    print(json.dumps({"ready": str(artifacts)}), flush=True)
    for hop in range(1, hops + 1):
        sys.stdin.readline()
        need = hs.end + g.lookahead - len(hs.tokens)  # the tokens that complete this hop, pushed at once
        t0, c0 = time.perf_counter(), time.process_time()
        pcm = hs.push(tokens[pos: pos + need])
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        pos += need
        print(json.dumps({"hop": hop, "seconds": round(dt, 3), "cpu_seconds": round(cpu, 3), "samples": len(pcm), "tokens": pos,
                          "cache_bytes": getattr(hs, "cache_bytes", 0)}), flush=True)


def _snapshot(hs: Any) -> dict[str, Any]:
    """A HopStream's state but its K/V buffers (lists copied, arrays shared: a hop replaces them, never writes
    into them, but for the K/V slots it rewrites with the same values)."""
    return {k: (list(v) if isinstance(v, list) and k != "kv" else v) for k, v in vars(hs).items()}


def repeat_worker(artifacts: Path, hops: tuple[int, int], reps: int, prompt_tokens: int, threads: int | None) -> None:
    """Two streams of the same tokens, advanced to just before hops[0] and hops[1]; then each hop timed `reps`
    times in turn, the stream restored after each (JSON lines)."""
    import numpy as np

    from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs, HopStream, Prompt

    rng = np.random.default_rng(0)
    g = CosyVoice3Graphs(artifacts, threads)
    prompt = Prompt(text_ids=np.zeros(1, np.int64),
                    speech_tokens=rng.integers(0, g.speech_token_size, prompt_tokens).astype(np.int64),
                    feat=rng.standard_normal((g.ratio * prompt_tokens, g.mel_dim)).astype(np.float32) - 4,
                    embedding=rng.standard_normal(192).astype(np.float32))
    n = prompt_tokens + g.chunk_tokens * (max(hops) + 2) + g.lookahead
    noise = np.random.default_rng(1).standard_normal((g.mel_dim, g.ratio * n)).astype(np.float32)
    tokens = [int(t) for t in np.random.default_rng(2).integers(0, g.speech_token_size, n)]
    streams = []
    for target in hops:
        hs = HopStream(g, prompt, noise)
        pos = 0
        for _ in range(target - 1):
            need = hs.end + g.lookahead - len(hs.tokens)
            hs.push(tokens[pos: pos + need])
            pos += need
        streams.append((target, hs, pos, hs.end + g.lookahead - len(hs.tokens), _snapshot(hs)))
        print(json.dumps({"ready": target, "frames": hs.frames}), flush=True)
    first: dict[int, Any] = {}
    for rep in range(reps):
        for target, hs, pos, need, state in streams:
            sys.stdin.readline()
            t0, c0 = time.perf_counter(), time.process_time()
            pcm = hs.push(tokens[pos: pos + need])
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            ref = first.setdefault(target, pcm)  # each repetition re-runs the same hop: the same audio
            print(json.dumps({"hop": target, "rep": rep, "seconds": round(dt, 3), "cpu_seconds": round(cpu, 3),
                              "samples": len(pcm), "frames": hs.frames, "cache_bytes": getattr(hs, "cache_bytes", 0),
                              "vs_first": float(np.abs(pcm - ref).max()) if len(pcm) == len(ref) else None}),
                  flush=True)
            vars(hs).update({k: (list(v) if isinstance(v, list) and k != "kv" else v) for k, v in state.items()})


def repeat(trees: list[str], hops: tuple[int, int], reps: int, prompt_tokens: int, threads: int | None,
           out: Path | None) -> None:
    """`NAME=TREE:ARTIFACTS` per export: repeat_worker (this file's code) on that tree's code (its PYTHONPATH), one
    timed hop of each worker in turn."""
    import os
    import subprocess

    procs: list[tuple[str, subprocess.Popen[str]]] = []
    for t in trees:
        name, rest = t.split("=", 1)
        tree, art = rest.split(":", 1)
        cmd = [sys.executable, str(Path(__file__).resolve()), "repeat-worker", art, "--hops", ",".join(map(str, hops)),
               "--reps", str(reps), "--prompt-tokens", str(prompt_tokens)] + (["--threads", str(threads)] if threads else [])
        procs.append((name, subprocess.Popen(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)))
    for name, p in procs:  # both streams of every worker advanced
        assert p.stdout is not None
        for _ in hops:
            print(json.dumps({"export": name, **json.loads(p.stdout.readline())}), flush=True)
    sink = out.open("a") if out else None
    for _ in range(reps):
        for _ in hops:
            for name, p in procs:
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("go\n")
                p.stdin.flush()
                line = json.dumps({"export": name, **json.loads(p.stdout.readline())})
                print(line, flush=True)
                if sink:
                    sink.write(line + "\n")
                    sink.flush()
    for _, p in procs:
        p.wait()


def compare(trees: list[str], hops: int, prompt_tokens: int, threads: int | None, out: Path | None) -> None:
    """`NAME=TREE:ARTIFACTS` per export: one worker process per tree (its own PYTHONPATH), hop k of each in
    turn."""
    import os
    import subprocess

    procs: list[tuple[str, subprocess.Popen[str]]] = []
    for t in trees:
        name, rest = t.split("=", 1)
        tree, art = rest.split(":", 1)
        cmd = [sys.executable, str(Path(tree) / "perf" / "cosyvoice3_hops.py"), "worker", art, "--hops", str(hops),
               "--prompt-tokens", str(prompt_tokens)] + (["--threads", str(threads)] if threads else [])
        env = {**os.environ, "PYTHONPATH": tree}
        p = subprocess.Popen(cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        json.loads(p.stdout.readline())
        procs.append((name, p))
    sink = out.open("a") if out else None
    for _ in range(hops):
        for name, p in procs:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("go\n")
            p.stdin.flush()
            row = {"export": name, **json.loads(p.stdout.readline())}
            line = json.dumps(row)
            print(line, flush=True)
            if sink:
                sink.write(line + "\n")
                sink.flush()
    for _, p in procs:
        p.wait()


def table(path: Path) -> None:
    """The JSON lines of `compare` as a markdown table: per hop and export the wall seconds (and CPU seconds
    where recorded), then hop 20 / hop 2."""
    rows: dict[int, dict[str, dict[str, Any]]] = {}
    names: list[str] = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        rows.setdefault(r["hop"], {})[r["export"]] = r
        if r["export"] not in names:
            names.append(r["export"])

    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        return f"{r['seconds']:.1f}" + (f" ({r['cpu_seconds']:.1f})" if "cpu_seconds" in r else "")

    print("| hop | " + " | ".join(f"{n}: wall s (CPU s)" for n in names) + " | K/V cache (MB) |")
    print("|---|" + "---|" * len(names) + "---|")
    for hop in sorted(rows):
        kv = max((r.get("cache_bytes", 0) for r in rows[hop].values()), default=0)
        print(f"| {hop} | " + " | ".join(cell(rows[hop].get(n)) for n in names) + f" | {kv / 1e6:.0f} |")
    if 2 in rows and 20 in rows:
        out = []
        for n in names:
            if n in rows[2] and n in rows[20]:
                a, b = rows[2][n], rows[20][n]
                cpu = f", CPU {b['cpu_seconds'] / a['cpu_seconds']:.2f}" if "cpu_seconds" in a else ""
                out.append(f"{n}: wall {b['seconds'] / a['seconds']:.2f}{cpu}")
        print("\nhop 20 / hop 2: " + "; ".join(out))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("checkpoint")
    c.add_argument("out", type=Path)
    w = sub.add_parser("worker")
    w.add_argument("artifacts", type=Path)
    t = sub.add_parser("compare")
    t.add_argument("trees", nargs="+", help="NAME=TREE:ARTIFACTS")
    t.add_argument("--out", type=Path, default=None, help="append the JSON lines here too")
    b = sub.add_parser("table")
    b.add_argument("jsonl", type=Path)
    r = sub.add_parser("repeat")
    r.add_argument("trees", nargs="+", help="NAME=TREE:ARTIFACTS")
    r.add_argument("--out", type=Path, default=None, help="append the JSON lines here too")
    rw = sub.add_parser("repeat-worker")
    rw.add_argument("artifacts", type=Path)
    for q in (w, t):
        q.add_argument("--hops", type=int, default=22)
    for q in (r, rw):
        q.add_argument("--hops", type=lambda v: tuple(int(x) for x in v.split(",")), default=(2, 20))
        q.add_argument("--reps", type=int, default=5)
    for q in (w, t, r, rw):
        q.add_argument("--prompt-tokens", type=int, default=50)
        q.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)
    if a.cmd == "checkpoint":
        make_checkpoint(a.out)
    elif a.cmd == "table":
        table(a.jsonl)
    elif a.cmd == "worker":
        worker(a.artifacts, a.hops, a.prompt_tokens, a.threads)
    elif a.cmd == "repeat":
        repeat(a.trees, a.hops, a.reps, a.prompt_tokens, a.threads, a.out)
    elif a.cmd == "repeat-worker":
        repeat_worker(a.artifacts, a.hops, a.reps, a.prompt_tokens, a.threads)
    else:
        compare(a.trees, a.hops, a.prompt_tokens, a.threads, a.out)


if __name__ == "__main__":
    sys.exit(main())
