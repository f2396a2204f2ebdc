"""Fish Speech S2 Pro's export: `slow_step`, `fast_step`, `dac_stream`, `dac_encode` ONNX graphs plus the embedding
tables, each graph checked against the torch modules of export/fish_speech/{graphs,codec}.py while exporting
(those modules are checked against vLLM-Omni 0.30.0 by tests/export_tests/test_fish_speech_graphs.py).

Stages: slow_step (prefill, then decode steps over the graph's own K/V, each equal to the torch module on the
whole prefix; a ragged two-row batch equal to each row alone), fast_step (the frame's first two positions, then
one code a step), dac_stream (the exact streaming DAC decoder: chunks against the whole decode), dac_encode (codes exactly), tables, manifest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from export.decoder_step import export_decoder_step
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph, random_step_feeds
from export.stages import StageRunner, copy_files, json_configs, model_size, save_tables
from export.tracing import (
    ErrorTracker,
    empty_past,
    export_bound,
    export_code_stream,
    export_inline,
    ort_run,
    ort_session,
    random_codes,
    torch_threads,
    with_past,
)
from export.weights import CheckpointTensors
from ttscore.contract import fish_speech as spec
from ttscore.contract.graphs import GraphSpec
from ttscore.runtime.families.fish_speech.checkpoint import (
    CONFIG,
    TOKENIZER,
    FishInfo,
    read_checkpoint,
    read_codec,
)

TOLERANCE = 1e-4  # max abs error of the graphs' float outputs vs the torch modules (tiny: ~1e-6)
AUDIO_TOLERANCE = 1e-4
CODE_TOLERANCE = 0.0  # the encoder's codes: exactly


def _slow_stage(src: Path, info: FishInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """The Slow AR as a decoder step with an explicit past (export.decoder_step)."""
    from export.fish_speech.graphs import SlowStep, load

    t = info.config.slow
    path, tr = export_decoder_step(lambda: load(SlowStep(info.config), src), gspec, out, layers=t.n_layer,
                                   kv_heads=t.n_local_heads, head_dim=t.head_dim, hidden=t.dim,
                                   outputs=("hidden", "logits"))
    return tr.finish(gspec.name, path, {"hidden": TOLERANCE, "logits": TOLERANCE})


def _fast_stage(src: Path, info: FishInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    import torch

    from export.fish_speech.graphs import FastStep, load

    t = info.config.fast
    g = torch.Generator().manual_seed(4)
    steps = info.config.num_codebooks  # positions 0..9
    x = torch.randn(2, steps, t.dim, generator=g)
    empty = [torch.zeros(2, t.n_local_heads, 0, t.head_dim) for _ in range(2 * t.n_layer)]
    with torch_threads(), torch.inference_mode():
        model = load(FastStep(info.config), src)
        want = [model(x[:, :n], torch.arange(n)[None].expand(2, n), *empty)[0].numpy() for n in range(2, steps + 1)]
        past = [torch.randn(2, t.n_local_heads, 2, t.head_dim, generator=g) for _ in range(2 * t.n_layer)]
        path = export_bound(model, (x[:, 2:3], torch.tensor([[2], [2]]), *past), gspec, out)
        del model
    sess = ort_session(path)
    tr = ErrorTracker()
    xn = x.numpy()
    past_np = empty_past(t.n_layer, t.n_local_heads, t.head_dim, 2)
    at = 0
    for i, n in enumerate(range(2, steps + 1)):
        step = ort_run(sess, with_past({"inputs_embeds": xn[:, at:n], "position_ids": np.tile(np.arange(at, n), (2, 1))},
                                       past_np))
        tr.add("logits", step[0], want[i], f"position {n - 1}")
        past_np = [np.concatenate([a, b], axis=2) for a, b in zip(past_np, step[1:], strict=True)]
        at = n
    return tr.finish(gspec.name, path, {"logits": TOLERANCE})


def _codec_stage(src: Path, info: FishInfo, out: Path
                 ) -> tuple[dict[str, dict[str, Any]], GraphSpec, int, list[Any]]:
    """dac_stream: chunks of 1, 3, 4, 122 and 10 frames (past the post transformer's 128-frame window) through
    the graph with its state == the torch whole decode of the 140 frames, two rows at once; and 1 frame
    alone. dac_encode: codes exactly."""
    import torch

    from export.fish_speech.codec import DacDecoder, DacEncoder, DacStream

    d = info.codec
    rng = np.random.default_rng(5)

    books = ((d.semantic_codebook_size, 1), (d.residual_codebook_size, d.n_residual))
    dec_cases = [random_codes(rng, 2, 140, books), random_codes(rng, 1, 1, books)]
    spf = d.samples_per_frame
    audio = [(0.3 * np.sin(np.arange(4 * spf) * f)[None]).astype(np.float32) for f in (0.02, 0.11)]
    enc_cases = [np.concatenate(audio), audio[0][:, :spf]]
    state, _ = read_codec(src)
    espec = spec.dac_encode_spec()
    with torch_threads(), torch.inference_mode():
        enc = DacEncoder(state, d).eval()
        ewant = [enc(torch.from_numpy(a)).numpy() for a in enc_cases]
        epath = export_inline(enc, (torch.from_numpy(enc_cases[0][:, :2 * spf]),), espec, out)
        del enc
    ds = export_code_stream(partial(DacDecoder, state, d), partial(DacStream, state, d), spec.dac_stream_spec,
                            dec_cases, ((1, 3, 4, 122, 10), (1,)), out)
    del state
    sess, tr, size, dwant = ds.session, ds.tracker, ds.state_size, ds.want
    # rows at different frame counts in one call: row 0 fresh, row 1 after 130 frames
    st = np.zeros((2, size), np.float32)
    _, st1 = ort_run(sess, {"codes": dec_cases[0][1:, :, :130], "state": st[1:]})
    st[1:] = st1
    mixed, _ = ort_run(sess, {"codes": np.stack([dec_cases[0][0, :, :10], dec_cases[0][1, :, 130:140]]), "state": st})
    tr.add("pcm", mixed[0], dwant[0][0, :10 * spf], "ragged rows: row 0 from frame 0")
    tr.add("pcm", mixed[1], dwant[0][1, 130 * spf:140 * spf], "ragged rows: row 1 from frame 130")
    reports = {ds.spec.name: tr.finish(ds.spec.name, ds.path, {"pcm": AUDIO_TOLERANCE})}
    sess = ort_session(epath)
    tr = ErrorTracker()
    for a, w in zip(enc_cases, ewant, strict=True):
        tr.add("codes", ort_run(sess, {"audio": a})[0].astype(np.float64), w.astype(np.float64),
               f"{a.shape[0]} x {a.shape[1]} samples")
    reports[espec.name] = tr.finish(espec.name, epath, {"codes": CODE_TOLERANCE})
    return reports, ds.spec, size, ds.layout


# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.quantize_graph),
# each measured against its fp32 export (`vs_fp32`); dac_stream keeps its quantized form only at
# VOCODER_MIN_SNR_DB or more. dac_encode stays fp32: its output is argmax codes, which a quantized encoder
# would change for a reference clip (the cloning prompt).
QUANTIZED = ("slow_step", "fast_step", "dac_stream")


def _quant_feeds(info: FishInfo, graph: str, state_size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random inputs for comparing a quantized graph with its fp32 form."""
    rng = np.random.default_rng(seed)
    d = info.codec
    if graph == "dac_stream":
        feeds = []
        for b, n in ((1, 6), (2, 3)):
            codes = random_codes(rng, b, n, ((d.semantic_codebook_size, 1), (d.residual_codebook_size, d.n_residual)))
            feeds.append({"codes": codes, "state": np.zeros((b, state_size), np.float32)})
        return feeds
    t = info.config.slow if graph == "slow_step" else info.config.fast
    return random_step_feeds(rng, ((1, 0, 6), (3, 4, 1)), hidden=t.dim, layers=t.n_layer, kv_heads=t.n_local_heads,
                             head_dim=t.head_dim, mask=graph == "slow_step")


def _quantize(info: FishInfo, path: Path, graph: str, precision: str, state_size: int) -> dict[str, Any]:
    feeds = _quant_feeds(info, graph, state_size)
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds),
                          audio=graph == "dac_stream")


def _tables(src: Path, info: FishInfo, out: Path) -> dict[str, Any]:
    names = [(spec.EMBEDDINGS, "text_model.model.embeddings.weight"),
             (spec.CODEBOOK_EMBEDDINGS, "audio_decoder.codebook_embeddings.weight"),
             (spec.FAST_EMBEDDINGS, "audio_decoder.embeddings.weight")]
    if info.config.project_in:
        names += [(spec.PROJECT_IN_WEIGHT, "audio_decoder.fast_project_in.weight"),
                  (spec.PROJECT_IN_BIAS, "audio_decoder.fast_project_in.bias")]
    return save_tables(out, CheckpointTensors(src).get, names)


def export_fish(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    fp32_int8_int4(spec.DISPLAY, precision)
    src = Path(src)
    info = read_checkpoint(src)
    cfg = info.config
    torch.manual_seed(0)
    s, f = cfg.slow, cfg.fast
    specs = {"slow_step": spec.slow_step_spec(s.n_layer, s.dim, s.n_local_heads, s.head_dim, cfg.codebook_size + 1),
             "fast_step": spec.fast_step_spec(f.n_layer, f.dim, f.n_local_heads, f.head_dim),
             "dac_encode": spec.dac_encode_spec()}
    with StageRunner(["slow_step", "fast_step", "codec", "tables"], progress, precision, family=spec.FAMILY,
                     source=source) as run:
        run.graph("slow_step", lambda: _slow_stage(src, info, specs["slow_step"], tmp))
        run.graph("fast_step", lambda: _fast_stage(src, info, specs["fast_step"], tmp))
        with run.stage("codec"):
            codec_reports, specs["dac_stream"], state_size, layout = _codec_stage(src, info, tmp)
            run.reports.update(codec_reports)
        with run.stage("tables"):
            tables = _tables(src, info, tmp)
        run.quantize(QUANTIZED, lambda name: _quantize(info, tmp / specs[name].filename, name, precision, state_size))
    copy_files(src, tmp / "tokenizer", [TOKENIZER])
    return run.manifest(
        tmp,
        model_size=model_size(s.dim),
        sizes=dataclasses.asdict(info),
        sample_rate=spec.SAMPLE_RATE,
        samples_per_frame=info.codec.samples_per_frame,
        vocoder_state_size=state_size,
        vocoder_state_layout=layout,
        tables=tables,
        graphs=specs,
        configs=json_configs(src, CONFIG),
    )
