"""One decoder step of every K/V family at positions 50, 500 and 1,000, before and after the K/V arena, side by
side in one run (issue 37).

- before: the runtime's feed assembly until commit 4109220, run as it was (ttscore/runtime/kv.py of that commit,
  read with `git show`): each sequence's past as per-layer arrays, the step's feeds assembled from them
  (`ragged_step_feeds`, a copy of every layer's past) and the new K/V appended after the step (`appended`,
  `np.concatenate` of every layer's past), through `OnnxGraph.run`;
- after: ttscore.runtime.kv.KVArena.run (the past bound in place, the step writing only its new positions), its
  capacity grown by an eighth at a time as a request's grows (the warm-up step at each position grows it: the
  padding is then the most it gets).

Each family's step graph is its own step module (export/<family>/graphs.py) at its `make-tiny --size real`
dimensions with random weights, exported by export.decoder_step.export_decoder_step; nothing else of the
checkpoint is made. A family whose stack does not fit the memory this script allows itself keeps its real width,
heads and head_dim but fewer layers (`LAYERS`; the README table says how many of how many). Families run one at a
time in a subprocess each, so each one's memory is given back before the next.

One stream (batch 1). At each position both paths start from the same past and take turns, step by step (PAIRS steps
each after a warm-up step), so that both see the same load on a shared machine; the table gives each path's fastest
step and the median of the per-pair ratios (before / after).

`python perf/kv_step.py [--families gepard,cosyvoice3,...] [--out perf/results/kv_step.json]` from the repository
root (PYTHONPATH=.)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BEFORE_COMMIT = "4109220"
POSITIONS = tuple(int(p) for p in os.environ.get("KV_STEP_POSITIONS", "50,500,1000").split(","))
PAIRS = 20
# Layers exported per family (None: all of them): the real stacks of Voxtral TTS (26 x 3072), Fish Speech's Slow AR
# (36 x 2560), Breeze-TTS-2's backbone (28 x 2048) and VoxCPM2's base LM (28 x 2048) are 1.3-3 B float32
# parameters, more than this shared machine lends one helper; they keep their real width.
LAYERS: dict[str, int | None] = {"gepard": None, "cosyvoice3": None, "breeze_tts_2": 8, "voxtral_tts": 4,
                                 "fish_speech": 4, "voxcpm2": 8}


@dataclasses.dataclass
class Step:
    """A family's step module factory and what the exporter and the timing need of it."""

    make: Callable[[], Any]
    gspec: Any
    layers: int
    real_layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    outputs: tuple[str, ...]
    exact: bool = False  # the family's arena is exact (ttscore/runtime/kv.py): VoxCPM2


def _gepard(layers: int | None) -> Step:
    from export.gepard.graphs import BackboneStep
    from export.gepard.tiny import model_config, sidecar_config
    from ttscore.contract import gepard as spec
    from ttscore.runtime.families.gepard.checkpoint import parse_config

    cfg = model_config("real")
    real = int(cfg["num_hidden_layers"])
    n = layers or real
    cfg = {**cfg, "num_hidden_layers": n, "layer_types": ["full_attention"] * n}
    info = parse_config(cfg, sidecar_config("real"))
    s = info.backbone
    return Step(lambda: BackboneStep(info).eval(),
                spec.backbone_spec(s.num_layers, s.hidden_size, s.num_kv_heads, s.head_dim, info.num_logits),
                n, real, s.num_kv_heads, s.head_dim, s.hidden_size, ("logits", "stop_prob"))


def _cosyvoice3(layers: int | None) -> Step:
    from export.cosyvoice3.graphs import LMStep
    from export.cosyvoice3.tiny import info_of
    from ttscore.contract import cosyvoice3 as spec

    info = info_of("real")
    real = info.lm.layers
    info = dataclasses.replace(info, lm=dataclasses.replace(info.lm, layers=layers or real))
    lm = info.lm
    return Step(lambda: LMStep(info).eval(), spec.lm_step_spec(lm.layers, lm.hidden, lm.kv_heads, lm.head_dim,
                                                                lm.speech_rows),
                lm.layers, real, lm.kv_heads, lm.head_dim, lm.hidden, ("logits",))


def _voxtral_tts(layers: int | None) -> Step:
    from export.voxtral_tts.graphs import LMStep
    from export.voxtral_tts.tiny import params
    from ttscore.contract import voxtral_tts as spec
    from ttscore.runtime.families.voxtral_tts.checkpoint import parse_params

    p = params("real")
    real = int(p["n_layers"])
    info = parse_params({**p, "n_layers": layers or real})
    lm = info.lm
    return Step(lambda: LMStep(info).eval(), spec.lm_step_spec(lm.n_layers, lm.dim, lm.n_kv_heads, lm.head_dim),
                lm.n_layers, real, lm.n_kv_heads, lm.head_dim, lm.dim, ("hidden", "semantic_code"))


def _fish_speech(layers: int | None) -> Step:
    from export.fish_speech.graphs import SlowStep
    from export.fish_speech.tiny import config
    from ttscore.contract import fish_speech as spec
    from ttscore.runtime.families.fish_speech.checkpoint import parse_config

    c = config("real")
    text = c["text_config"]
    real = int(text["n_layer"])
    text["n_layer"] = layers or real
    cfg = parse_config(c)
    s = cfg.slow
    return Step(lambda: SlowStep(cfg).eval(), spec.slow_step_spec(s.n_layer, s.dim, s.n_local_heads, s.head_dim,
                                                                   cfg.codebook_size + 1),
                s.n_layer, real, s.n_local_heads, s.head_dim, s.dim, ("hidden", "logits"))


def _breeze_tts_2(layers: int | None) -> Step:
    from export.breeze_tts_2.graphs import BackboneStep
    from export.breeze_tts_2.tiny import model_config
    from ttscore.contract import breeze_tts_2 as spec
    from ttscore.runtime.families.breeze_tts_2.checkpoint import parse_config

    c = model_config("real")
    real = int(c["backbone_config"]["num_hidden_layers"])
    c["backbone_config"] = {**c["backbone_config"], "num_hidden_layers": layers or real}
    info = parse_config(c)
    b = info.backbone
    return Step(lambda: BackboneStep(info).eval(),
                spec.backbone_spec(b.num_layers, b.hidden_size, b.num_kv_heads, b.head_dim, info.codebook_vocab + 1),
                b.num_layers, real, b.num_kv_heads, b.head_dim, b.hidden_size, ("hidden", "logits"))


def _voxcpm2(layers: int | None) -> Step:
    """The base LM (the residual LM is the same step, 8 layers): the reference's MiniCPM stack, built alone."""
    from export.voxcpm2.graphs import LMStep
    from export.voxcpm2.tiny import _meta_model, model_config
    from ttscore.contract import voxcpm2 as spec

    model = _meta_model(model_config("real"))  # on the meta device: only its config and the stack's class
    cfg = model.config.lm_config
    real = int(cfg.num_hidden_layers)
    cfg = cfg.model_copy(update={"num_hidden_layers": layers or real})
    stack_class = type(model.base_lm)
    hidden, kvh = int(cfg.hidden_size), int(cfg.num_key_value_heads)
    hd = int(cfg.kv_channels or hidden // cfg.num_attention_heads)
    n = int(cfg.num_hidden_layers)
    return Step(lambda: LMStep(stack_class(cfg).float()).eval(), spec.lm_spec("base_lm", n, hidden, kvh, hd),
                n, real, kvh, hd, hidden, ("hidden",), exact=True)


FAMILIES: dict[str, Callable[[int | None], Step]] = {
    "gepard": _gepard, "cosyvoice3": _cosyvoice3, "breeze_tts_2": _breeze_tts_2, "voxtral_tts": _voxtral_tts,
    "fish_speech": _fish_speech, "voxcpm2": _voxcpm2}


def before_kv() -> types.ModuleType:
    """ttscore/runtime/kv.py as it was at BEFORE_COMMIT."""
    source = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:ttscore/runtime/kv.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("kv_before")
    exec(compile(source, "kv_before.py", "exec"), module.__dict__)  # the project's own code, from git
    return module


def _median_ms(times: Sequence[float]) -> float:
    return float(np.median(times) * 1000)


def paired(graph: Any, old: types.ModuleType, step: Step, past: list[np.ndarray], x: np.ndarray
           ) -> tuple[list[float], list[float]]:
    """PAIRS steps of each path from `past` (per layer K, V [kv_heads, P, hd]), taking turns step by step so that
    both see the same load, after a warm-up step each (the arena's grows it: one copy, as a request's would)."""
    from ttscore.runtime.kv import KVArena

    layers, (kvh, p, hd) = step.layers, past[0].shape
    kv = list(past)
    arena, seq = KVArena(layers, kvh, hd, exact=step.exact), object()
    row = arena.acquire(seq)
    arena.reserve(p)
    for i in range(layers):
        arena.k[i][row, :, :p], arena.v[i][row, :, :p] = past[2 * i], past[2 * i + 1]
    arena.lengths[row] = p
    before, after = [], []
    for _ in range(1 + PAIRS):
        t = time.perf_counter()
        feeds = {"inputs_embeds": x, **old.ragged_step_feeds([kv], 1, layers, kvh, hd)}
        kv = old.appended(kv, graph.run(feeds), 0, layers)
        before.append(time.perf_counter() - t)
        t = time.perf_counter()
        arena.run(graph, [seq], x)
        after.append(time.perf_counter() - t)
    return before[1:], after[1:]


def measure(family: str) -> dict[str, Any]:
    """Export `family`'s step graph into a scratch directory and time both paths at every position."""
    from export.decoder_step import export_decoder_step
    from export.memory import release_memory
    from ttscore.runtime.onnx import OnnxGraph

    step = FAMILIES[family](int(os.environ.get("KV_STEP_LAYERS", "0")) or LAYERS[family])
    old = before_kv()
    rng = np.random.default_rng(0)
    layers, kvh, hd = step.layers, step.kv_heads, step.head_dim
    with tempfile.TemporaryDirectory(prefix=f"kv_step_{family}_") as tmp:
        t0 = time.perf_counter()
        path, _ = export_decoder_step(step.make, step.gspec, Path(tmp), layers=layers, kv_heads=kvh, head_dim=hd,
                                      hidden=step.hidden, outputs=step.outputs, compare=lambda *a: None)
        export_s = time.perf_counter() - t0
        release_memory()
        graph = OnnxGraph(path, step.gspec.to_json())
        x = rng.standard_normal((1, 1, step.hidden), dtype=np.float32) * 0.1
        rows: list[dict[str, Any]] = []
        for p in POSITIONS:
            past = [rng.standard_normal((kvh, p, hd), dtype=np.float32) * 0.1 for _ in range(2 * layers)]

            before, after = paired(graph, old, step, past, x)
            ratios = [bt / at for bt, at in zip(before, after, strict=True)]
            b, a, ratio = min(before) * 1000, min(after) * 1000, float(np.median(ratios))
            rows.append({"position": p, "before_ms": round(b, 2), "after_ms": round(a, 2),
                         "before_over_after": round(ratio, 2),
                         "before_median_ms": round(_median_ms(before), 2), "after_median_ms": round(_median_ms(after), 2),
                         "past_mib": round(2 * layers * kvh * p * hd * 4 / 2**20, 1)})
            print(f"{family} p={p}: before {b:.1f} ms, after {a:.1f} ms ({ratio:.2f}x)", file=sys.stderr, flush=True)
    return {"family": family, "exact": step.exact, "layers": layers, "real_layers": step.real_layers, "kv_heads": kvh, "head_dim": hd,
            "hidden": step.hidden, "export_s": round(export_s, 1), "rows": rows}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| family | layers (of real) | position | before ms (fastest) | after ms (fastest) | before / after (median pair) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        for row in r["rows"]:
            lines.append(f"| {r['family']}{' (exact)' if r['exact'] else ''} | {r['layers']} of {r['real_layers']} | {row['position']} | "
                         f"{row['before_ms']:.1f} | {row['after_ms']:.1f} | {row['before_over_after']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--out", type=Path, default=ROOT / "perf" / "results" / "kv_step.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child: measure one family, print its JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    results = []
    for family in args.families.split(","):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        got = subprocess.run([sys.executable, __file__, "--one", family], cwd=ROOT, env=env, capture_output=True,
                             text=True, check=False)
        if got.returncode:
            print(f"{family}: failed\n{got.stderr[-3000:]}", file=sys.stderr)
            continue
        sys.stderr.write("".join(line + "\n" for line in got.stderr.splitlines() if " p=" in line))
        results.append(json.loads(got.stdout.strip().splitlines()[-1]))
    import onnxruntime

    doc = {"cpu_count": os.cpu_count(), "onnxruntime": onnxruntime.__version__, "before_commit": BEFORE_COMMIT,
           "pairs": PAIRS, "families": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
