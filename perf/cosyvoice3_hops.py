"""CosyVoice3 streaming: each hop's vocoder work (flow + HiFT) along one long stream, at the real flow and
HiFT sizes (issue 39: a hop's cost should not grow with its position).

  checkpoint OUT        the real-size flow (DiT 332 M) and HiFT (20.8 M) with make-tiny's tiny LM: the LM is
                        not timed, and the full real checkpoint plus two real exports do not fit this machine's
                        disk (7 GB free). Same yaml and random init as `make-tiny --size real` for the flow/HiFT.
  compare NAME=TREE:ARTIFACTS...
                        per export a worker process on that tree's code (its PYTHONPATH) pushes the same random
                        speech tokens through its `HopStream`, a hop at a time, the workers in turn (hop k of
                        each, then hop k + 1), so machine noise hits them alike; each hop's wall time (flow +
                        HiFT; no LM) and the stream's K/V cache size as JSON lines.

  PYTHONPATH=$PWD .venv/bin/python perf/cosyvoice3_hops.py checkpoint /work/cosy-real/ckpt
  PYTHONPATH=$PWD .venv/bin/triton-tts export --checkpoint /work/cosy-real/ckpt --out /work/cosy-real/after
  git worktree add /work/wt/cosy-before 0a05a17   # main before issue 39; export it the same way to .../before
  .venv/bin/python perf/cosyvoice3_hops.py compare before=/work/wt/cosy-before:/work/cosy-real/before \
      after=$PWD:/work/cosy-real/after --hops 22 --out perf/results/cosyvoice3-hops.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


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
        t0 = time.perf_counter()
        pcm = hs.push(tokens[pos: pos + need])
        dt = time.perf_counter() - t0
        pos += need
        print(json.dumps({"hop": hop, "seconds": round(dt, 3), "samples": len(pcm), "tokens": pos,
                          "cache_bytes": getattr(hs, "cache_bytes", 0)}), flush=True)


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
    for q in (w, t):
        q.add_argument("--hops", type=int, default=22)
        q.add_argument("--prompt-tokens", type=int, default=50)
        q.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)
    if a.cmd == "checkpoint":
        make_checkpoint(a.out)
    elif a.cmd == "worker":
        worker(a.artifacts, a.hops, a.prompt_tokens, a.threads)
    else:
        compare(a.trees, a.hops, a.prompt_tokens, a.threads, a.out)


if __name__ == "__main__":
    sys.exit(main())
