"""MOSS-TTS-Nano's export: the LM's `global_step` and `local_step` graphs (export/moss_tts_nano/lm.py) with the
embedding tables, and the codec's `moss_codec_decoder` / `moss_codec_encoder` (export/moss_tts_nano/codec.py).

Stages: global_step (export.decoder_step: prefill, decode steps over the graph's own K/V and a ragged two-row batch,
each against the torch module on the whole prefix), local_step (a frame's 17 positions one step at a time and a
two-position first step, against the module on the whole prefix; a batch of two rows), local_code_step (a frame as
the runtime steps it: local_step's two first positions, then one position a step over the fixed cache written in
place, against the module on the whole prefix), frames (whole greedy frames decoded through the graphs, with and
without local_code_step, equal the torch modules' on a prompt of the checkpoint's own ids), codec, tables; the
graphs themselves are checked against mlx-audio by tests/export_tests/test_moss_tts_nano_lm.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.decoder_step import export_decoder_step
from export.moss_tts_nano import lm
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph, random_step_feeds
from export.stages import StageRunner, copy_files, json_configs, model_size, save_table
from export.tracing import (
    ErrorTracker,
    empty_past,
    export_bound,
    ort_run,
    ort_session,
    torch_threads,
    with_past,
)
from ttscore.contract.graphs import GraphSpec
from ttscore.contract.moss_tts_nano import graphs as spec
from ttscore.runtime.families.moss_tts_nano.checkpoint import CONFIG, TOKENIZER, MossConfig, read_checkpoint

TOLERANCE = 1e-4  # max abs error of the graphs' float outputs vs the torch modules (tiny: ~1e-6)
QUANTIZED = ("global_step", "local_step", "local_code_step")
DISPLAY = "MOSS-TTS-Nano"


def lm_specs(c: MossConfig) -> dict[str, GraphSpec]:
    return {"global_step": spec.global_step_spec(c.layers, c.dim, c.heads, c.head_dim),
            "local_step": spec.local_step_spec(c.local_layers, c.dim, c.heads, c.head_dim, c.codebook_size),
            "local_code_step": spec.local_code_step_spec(c.local_layers, c.dim, c.heads, c.head_dim,
                                                         c.codebook_size)}


def _global_stage(c: MossConfig, tensors: lm.Tensors, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    path, tr = export_decoder_step(lambda: lm.global_step(c, tensors), gspec, out, layers=c.layers, kv_heads=c.heads,
                                   head_dim=c.head_dim, hidden=c.dim, outputs=("hidden",))
    return tr.finish(gspec.name, path, {"hidden": TOLERANCE})


def _local_stage(c: MossConfig, tensors: lm.Tensors, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """A frame's positions 0..16: first one step of one position and one of two, then one position a step, each
    step's text_logits (its first position) and audio_logits (its last) against the module on the whole prefix."""
    import torch

    g = torch.Generator().manual_seed(4)
    n = spec.LOCAL_POSITIONS
    x = torch.randn(2, n, c.dim, generator=g)
    empty = [torch.zeros(2, c.heads, 0, c.head_dim) for _ in range(2 * c.local_layers)]
    with torch_threads(), torch.inference_mode():
        model = lm.local_step(c, tensors)
        full = {m: model(x[:, :m], model.head(m - 1), *empty) for m in range(1, n + 1)}
        want = {m: (full[m][1].numpy(), model(x[:, m - 1:m], model.head(m - 1), *[t for t in full[m - 1][2:]])[0]
                    .numpy() if m > 1 else full[1][0].numpy()) for m in range(1, n + 1)}
        past = [torch.randn(2, c.heads, 3, c.head_dim, generator=g) for _ in range(2 * c.local_layers)]
        path = export_bound(model, (x[:, 3:5], model.head(4), *past), gspec, out)
        heads = model.audio_heads.numpy().copy()
        del model
    sess = ort_session(path)
    tr = ErrorTracker()
    xn = x.numpy()
    for first in (1, 2):
        past_np = empty_past(c.local_layers, c.heads, c.head_dim, 2)
        at = 0
        for m in [first, *range(first + 1, n + 1)]:
            step = ort_run(sess, with_past({"inputs_embeds": xn[:, at:m],
                                            "audio_head": heads[spec.head_codebook(m - 1)]}, past_np))
            text_want = full[1][0].numpy() if at == 0 else want[at + 1][1]
            tr.add("text_logits", step[0], text_want, f"first step {first}, positions {at}..{m - 1}")
            tr.add("audio_logits", step[1], want[m][0], f"first step {first}, positions {at}..{m - 1}")
            past_np = [np.concatenate([a, b], axis=2) for a, b in zip(past_np, step[2:], strict=True)]
            at = m
    return tr.finish(gspec.name, path, {"text_logits": TOLERANCE, "audio_logits": TOLERANCE})


def _local_code_stage(c: MossConfig, tensors: lm.Tensors, gspec: GraphSpec, out: Path, local_path: Path
                      ) -> dict[str, Any]:
    """A frame as the runtime steps it: local_step's two first positions, then positions 2..16 one at a time
    through local_code_step over a cache of LOCAL_CACHE slots (those not yet written hold random values: masked),
    each written in place with the step's own K/V; every audio_logits against the module on the whole prefix. A
    batch of two rows."""
    import torch

    g = torch.Generator().manual_seed(5)
    n = spec.LOCAL_POSITIONS
    x = torch.randn(2, n, c.dim, generator=g)
    empty = [torch.zeros(2, c.heads, 0, c.head_dim) for _ in range(2 * c.local_layers)]
    with torch_threads(), torch.inference_mode():
        model = lm.local_step(c, tensors)
        want = {m: model(x[:, :m], model.head(m - 1), *empty)[1].numpy() for m in range(3, n + 1)}
        code = lm.LocalCodeStep(model)
        cache = [torch.randn(2, c.heads, spec.LOCAL_CACHE, c.head_dim, generator=g)
                 for _ in range(2 * c.local_layers)]
        path = export_bound(code, (x[:, 3], torch.tensor([3]), model.head(3), *cache), gspec, out)
        heads = model.audio_heads.numpy().copy()
        del model, code
    first, sess = ort_session(local_path), ort_session(path)
    xn = x.numpy()
    tr = ErrorTracker()
    step = ort_run(first, with_past({"inputs_embeds": xn[:, :2], "audio_head": heads[0]},
                                    empty_past(c.local_layers, c.heads, c.head_dim, 2)))
    cache_np = [t.numpy().copy() for t in cache]
    for t, new in zip(cache_np, step[2:], strict=True):
        t[:, :, :2] = new
    for p in range(2, n):
        feeds = {"inputs_embeds": xn[:, p], "position": np.array([p], np.int64),
                 "audio_head": heads[spec.head_codebook(p)]}
        for i in range(c.local_layers):
            feeds[spec.cache_key(i)], feeds[spec.cache_value(i)] = cache_np[2 * i], cache_np[2 * i + 1]
        got = ort_run(sess, feeds)
        tr.add("audio_logits", got[0], want[p + 1], f"position {p}")
        if p < spec.LOCAL_CACHE:
            for t, new in zip(cache_np, got[1:], strict=True):
                t[:, :, p] = new[:, :, 0]
    return tr.finish(gspec.name, path, {"audio_logits": TOLERANCE})


def _code_feeds(c: MossConfig, x: np.ndarray, position: int, head: np.ndarray, past: list[np.ndarray]
                ) -> dict[str, np.ndarray]:
    """local_code_step's feeds at `position` after `past` (each [B, H, position, hd]): the cache is the past, then
    zeros."""
    feeds: dict[str, np.ndarray] = {"inputs_embeds": np.ascontiguousarray(x, np.float32),
                                    "position": np.array([position], np.int64), "audio_head": head}
    for i in range(c.local_layers):
        for name, t in ((spec.cache_key(i), past[2 * i]), (spec.cache_value(i), past[2 * i + 1])):
            cache = np.zeros((t.shape[0], c.heads, spec.LOCAL_CACHE, c.head_dim), np.float32)
            cache[:, :, :position] = t
            feeds[name] = cache
    return feeds


def decode_frames(global_sess: Any, local_sess: Any, c: MossConfig, tabs: dict[str, np.ndarray], rows: np.ndarray,
                  max_frames: int, *, do_sample: bool = False, penalty: float = 1.0,
                  knobs: dict[str, Any] | None = None, uniforms: np.ndarray | None = None,
                  code_sess: Any = None) -> tuple[np.ndarray, int]:
    """Frames [n, 16] of one prompt decoded through the two graphs with the runtime's samplers (the reference's
    loop: stop decision, then 16 codes, a generated row [slot, codes] fed back); returns them and the uniforms
    used. `knobs`: text_temperature/top_k/top_p, audio_temperature/top_k/top_p. With `code_sess` (local_code_step)
    local positions 2..16 go through it (its cache: the past so far, the other slots zeros), as the runtime steps
    them."""
    from ttscore.runtime.families.moss_tts_nano import sampling

    k = {"text_temperature": 1.0, "text_top_k": 50, "text_top_p": 1.0, "audio_temperature": 0.8, "audio_top_k": 25,
         "audio_top_p": 0.95, **(knobs or {})}
    wte, audio = tabs[spec.WTE], tabs[spec.AUDIO_EMBEDDINGS]
    past = empty_past(c.layers, c.heads, c.head_dim)
    x = lm.embed_rows(rows[None], wte, audio, c.audio_pad_id)
    frames: list[list[int]] = []
    used = 0

    def u() -> float:
        nonlocal used
        used += 1
        return float(uniforms[used - 1]) if uniforms is not None else 0.0

    n = 0
    for _ in range(max_frames):
        t = x.shape[1]
        out = ort_run(global_sess, with_past({"inputs_embeds": x, "attention_mask": np.ones((1, n + t), np.int64),
                                              "position_ids": np.arange(n, n + t, dtype=np.int64)[None]}, past))
        past = [np.concatenate([a, b], axis=2) for a, b in zip(past, out[1:], strict=True)]
        n += t
        lpast = empty_past(c.local_layers, c.heads, c.head_dim)
        step = ort_run(local_sess, with_past({"inputs_embeds": out[0][:, None], "audio_head": audio[0]}, lpast))
        if not sampling.continues(step[0][0], do_sample=do_sample, temperature=k["text_temperature"],
                                  k=k["text_top_k"], p=k["text_top_p"], u=u() if do_sample else 0.0):
            break
        lpast = [np.concatenate([a, b], axis=2) for a, b in zip(lpast, step[2:], strict=True)]
        inp = wte[spec.AUDIO_ASSISTANT_SLOT_ID][None, None]
        codes: list[int] = []
        for q in range(c.n_vq):
            if code_sess is not None and q > 0:
                step = ort_run(code_sess, _code_feeds(c, inp[:, 0], q + 1, audio[q], lpast))
                step = [None, *step]
            else:
                step = ort_run(local_sess, with_past({"inputs_embeds": inp, "audio_head": audio[q]}, lpast))
            lpast = [np.concatenate([a, b], axis=2) for a, b in zip(lpast, step[2:], strict=True)]
            history = np.array([f[q] for f in frames], np.int64)
            code = sampling.sample_code(step[1][0], history, do_sample=do_sample, temperature=k["audio_temperature"],
                                        k=k["audio_top_k"], p=k["audio_top_p"], penalty=penalty,
                                        u=u() if do_sample else 0.0)
            codes.append(code)
            inp = audio[q][code][None, None]
        frames.append(codes)
        x = lm.embed_rows(np.array([[[spec.AUDIO_ASSISTANT_SLOT_ID, *codes]]], np.int64), wte, audio, c.audio_pad_id)
    return np.array(frames, np.int64).reshape(-1, c.n_vq), used


def _frames_stage(c: MossConfig, tensors: lm.Tensors, out: Path, specs: dict[str, GraphSpec],
                  tabs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Whole greedy frames through the graphs == the torch modules' (repetition penalty 1.0 and 1.2)."""
    import torch

    rng = np.random.default_rng(6)
    rows = np.full((20, spec.ROW_WIDTH), c.audio_pad_id, np.int64)
    rows[:, 0] = rng.integers(spec.AUDIO_ASSISTANT_SLOT_ID + 1, c.vocab_size, 20)
    rows[5:9, 0] = spec.AUDIO_USER_SLOT_ID
    rows[5:9, 1:] = rng.integers(0, c.codebook_size, (4, c.n_vq))
    gs, ls = ort_session(out / specs["global_step"].filename), ort_session(out / specs["local_step"].filename)
    cs = ort_session(out / specs["local_code_step"].filename)
    checked = {}
    with torch_threads(), torch.inference_mode():
        g, local = lm.global_step(c, tensors), lm.local_step(c, tensors)
        for penalty in (1.0, 1.2):
            want = lm.greedy_frames(g, local, tabs, rows, 6, penalty)
            for label, code in (("", None), (", local_code_step", cs)):
                got, _ = decode_frames(gs, ls, c, tabs, rows, 6, penalty=penalty, code_sess=code)
                if not np.array_equal(got, want):
                    from ttscore.contract.errors import ExportError

                    raise ExportError(f"greedy frames through the graphs{label} differ from the torch modules' at "
                                      f"repetition penalty {penalty}: {got.tolist()} vs {want.tolist()}")
            checked[f"penalty {penalty}"] = len(want)
    return {"greedy_frames_equal": checked}


def _quantize(c: MossConfig, path: Path, graph: str, precision: str) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    if graph == "global_step":
        feeds = random_step_feeds(rng, ((1, 0, 6), (3, 4, 1)), hidden=c.dim, layers=c.layers, kv_heads=c.heads,
                                  head_dim=c.head_dim)
    elif graph == "local_code_step":
        head = (0.05 * rng.standard_normal((c.codebook_size, c.dim))).astype(np.float32)
        feeds = []
        for b, p in ((1, 2), (3, 9), (8, 16)):
            feed: dict[str, np.ndarray] = {"inputs_embeds": rng.standard_normal((b, c.dim)).astype(np.float32),
                                           "position": np.array([p], np.int64), "audio_head": head}
            for i in range(c.local_layers):
                for name in (spec.cache_key(i), spec.cache_value(i)):
                    feed[name] = rng.standard_normal((b, c.heads, spec.LOCAL_CACHE, c.head_dim)).astype(np.float32)
            feeds.append(feed)
    else:
        feeds = random_step_feeds(rng, ((1, 0, 1), (3, 4, 1), (2, 0, 2)), hidden=c.dim, layers=c.local_layers,
                                  kv_heads=c.heads, head_dim=c.head_dim, mask=False, positions=False)
        head = (0.05 * rng.standard_normal((c.codebook_size, c.dim))).astype(np.float32)  # stays fp32: a feed
        feeds = [{**f, "audio_head": head} for f in feeds]
    # local_code_step's Linears on [B, D] rows trace as Gemm
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds),
                          gemm=graph == "local_code_step")


def export_lm(src: Path, out: Path, c: MossConfig | None = None) -> tuple[dict[str, GraphSpec], dict[str, Any],
                                                                           dict[str, np.ndarray]]:
    """The two LM graphs (fp32) into `out`, validated; their specs, reports and the tables (not written)."""
    c = c or read_checkpoint(src)
    tensors = lm.Tensors(src)
    tensors.check_ties(c)
    specs = lm_specs(c)
    reports = {"global_step": _global_stage(c, tensors, specs["global_step"], out),
               "local_step": _local_stage(c, tensors, specs["local_step"], out)}
    reports["local_code_step"] = _local_code_stage(c, tensors, specs["local_code_step"], out,
                                                   out / specs["local_step"].filename)
    tabs = lm.tables(c, tensors)
    frames = _frames_stage(c, tensors, out, specs, tabs)  # through local_step alone and with local_code_step
    reports["local_step"].update(frames)
    reports["local_code_step"].update(frames)
    return specs, reports, tabs


def export_moss(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    from export.moss_tts_nano.codec import export_codec

    fp32_int8_int4(DISPLAY, precision)
    src = Path(src)
    c = read_checkpoint(src)
    torch.manual_seed(0)
    tensors = lm.Tensors(src)
    tensors.check_ties(c)
    specs = lm_specs(c)
    tables: dict[str, Any] = {}
    with StageRunner(["global_step", "local_step", "local_code_step", "frames", "codec", "tables"], progress, precision,
                     family=spec.MODEL_TYPE, source=source) as run:
        run.graph("global_step", lambda: _global_stage(c, tensors, specs["global_step"], tmp))
        run.graph("local_step", lambda: _local_stage(c, tensors, specs["local_step"], tmp))
        run.graph("local_code_step", lambda: _local_code_stage(c, tensors, specs["local_code_step"], tmp,
                                                               tmp / specs["local_step"].filename))
        tabs = lm.tables(c, tensors)
        with run.stage("frames"):
            frames = _frames_stage(c, tensors, tmp, specs, tabs)  # through local_step alone and with local_code_step
            run.reports["local_step"].update(frames)
            run.reports["local_code_step"].update(frames)
        with run.stage("codec"):
            codec = export_codec(src, tmp, precision)
            run.reports.update(codec.validation)
        with run.stage("tables"):
            for name, array in tabs.items():
                save_table(tmp, name, array, tables)
        run.quantize(QUANTIZED, lambda name: _quantize(c, tmp / specs[name].filename, name, precision))
    copy_files(src, tmp / "tokenizer", [TOKENIZER])
    return run.manifest(
        tmp,
        model_size=model_size(c.dim, 768),
        sizes=dataclasses.asdict(c),
        sample_rate=codec.sample_rate,
        samples_per_frame=codec.samples_per_frame,
        vocoder_state_size=codec.vocoder_state_size,
        vocoder_state_layout=codec.vocoder_state_layout,
        tables=tables,
        graphs={**specs, **codec.graphs},
        configs=json_configs(src, CONFIG),
        **codec.fields,
    )

