"""Voxtral TTS's export: `lm_step`, `velocity` and `codec_stream` ONNX graphs plus the embedding tables, each
graph checked against the torch modules of export/voxtral_tts/graphs.py while exporting (those modules
are checked against the vLLM-Omni / MistralModel reference by tests/export_tests/test_voxtral_tts_graphs.py).

Stages: lm_step (prefill, then decode steps over the graph's own K/V, each equal to the torch module on
the whole prefix; a ragged two-row batch equal to each row alone; semantic codes exactly), velocity
(batches of 1 and 3), codec_stream (the exact streaming codec: chunks against the whole decode), tables (text and audio
embeddings, the preset voices), manifest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from export.decoder_step import export_decoder_step
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph, random_step_feeds
from export.stages import StageRunner, copy_files, json_configs, model_size, save_table, save_tables
from export.tracing import (
    ErrorTracker,
    export_checked,
    export_code_stream,
    random_codes,
    torch_threads,
)
from export.weights import CheckpointTensors
from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.graphs import GraphSpec
from ttscore.runtime.families.voxtral_tts.checkpoint import (
    PARAMS,
    TEKKEN,
    VOICES_DIR,
    WEIGHTS_STEM,
    VoxtralInfo,
    read_checkpoint,
)

TOLERANCE = 1e-4  # max abs error of the graphs' float outputs vs the torch modules (tiny: ~1e-6)
CODE_TOLERANCE = 0.0  # semantic codes: exactly
# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.quantize_graph),
# each measured against its fp32 export (`vs_fp32`); codec_stream (the vocoder) keeps its quantized form only at
# VOCODER_MIN_SNR_DB or more. The checkpoint has no encoder graph.
QUANTIZED = ("lm_step", "velocity", "codec_stream")


def _add(tr: ErrorTracker, got: Sequence[np.ndarray], want: Sequence[np.ndarray], case: str) -> None:
    tr.add("hidden", got[0], want[0], case)
    tr.add("semantic_code", got[1].astype(np.float64), want[1].astype(np.float64), case)


def _lm_stage(src: Path, info: VoxtralInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """The LM as a decoder step with an explicit past (export.decoder_step); semantic codes exactly."""
    from export.voxtral_tts.graphs import LMStep, load

    lm = info.lm
    path, tr = export_decoder_step(lambda: load(LMStep(info), src), gspec, out, layers=lm.n_layers,
                                   kv_heads=lm.n_kv_heads, head_dim=lm.head_dim, hidden=lm.dim,
                                   outputs=("hidden", "semantic_code"), compare=_add)
    return tr.finish(gspec.name, path, {"hidden": TOLERANCE, "semantic_code": CODE_TOLERANCE})


def _velocity_stage(src: Path, info: VoxtralInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    import torch

    from export.voxtral_tts.graphs import Velocity, load

    rng = np.random.default_rng(4)
    cases = []
    for b in (1, 3):
        cases.append({"x": rng.standard_normal((b, info.n_acoustic_codebook)).astype(np.float32),
                      "t": rng.uniform(0, 1, b).astype(np.float32),
                      "hidden": rng.standard_normal((b, info.lm.dim)).astype(np.float32),
                      "cfg_alpha": rng.uniform(1.0, 2.0, b).astype(np.float32)})
    with torch_threads(), torch.inference_mode():
        model = load(Velocity(info), src)
    return export_checked(model, gspec, cases, out, {"velocity": TOLERANCE}, example=1)


def _codec_stage(src: Path, info: VoxtralInfo, out: Path) -> tuple[dict[str, Any], GraphSpec, int, list[Any]]:
    """codec_stream: chunks of 1, 3, 4 and 22 frames through the graph with its state == the torch
    whole decode of the 30 frames (past every attention window), two rows at once; and 1 frame alone."""
    from export.voxtral_tts.graphs import CodecDecoder, CodecStream, load

    rng = np.random.default_rng(5)

    books = ((info.semantic_codebook_size, 1), (info.acoustic_codebook_size, info.n_acoustic_codebook))
    cases = [random_codes(rng, 2, 30, books), random_codes(rng, 1, 1, books)]
    cs = export_code_stream(lambda: load(CodecDecoder(info), src), lambda: load(CodecStream(info), src),
                            lambda size: spec.codec_stream_spec(1 + info.n_acoustic_codebook, size), cases,
                            ((1, 3, 4, 22), (1,)), out)
    return cs.tracker.finish(cs.spec.name, cs.path, {"pcm": TOLERANCE}), cs.spec, cs.state_size, cs.layout


def _tables(src: Path, info: VoxtralInfo, out: Path) -> dict[str, Any]:
    import torch

    tables = save_tables(out, CheckpointTensors(src, WEIGHTS_STEM).get, (
        (spec.TOK_EMBEDDINGS, "mm_audio_embeddings.tok_embeddings.weight"),
        (spec.AUDIO_EMBEDDINGS, "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight")))
    for voice in info.voices:
        rows = torch.load(src / VOICES_DIR / f"{voice}.pt", map_location="cpu").to(torch.float32).numpy()
        if rows.ndim != 2 or rows.shape[1] != info.lm.dim:
            raise InvalidRequest(f"{VOICES_DIR}/{voice}.pt: shape {list(rows.shape)}, want [frames, {info.lm.dim}]",
                                 "checkpoint")
        save_table(out, spec.VOICE_TABLE_PREFIX + voice, rows, tables)
    return tables


def _quant_feeds(info: VoxtralInfo, graph: str, state_size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random inputs for comparing a quantized graph with its fp32 form."""
    rng = np.random.default_rng(seed)
    if graph == "lm_step":
        lm = info.lm
        return random_step_feeds(rng, ((1, 0, 6), (3, 4, 1)), hidden=lm.dim, layers=lm.n_layers,
                                 kv_heads=lm.n_kv_heads, head_dim=lm.head_dim)
    if graph == "velocity":
        return [{"x": rng.standard_normal((b, info.n_acoustic_codebook)).astype(np.float32),
                 "t": rng.uniform(0, 1, b).astype(np.float32),
                 "hidden": rng.standard_normal((b, info.lm.dim)).astype(np.float32),
                 "cfg_alpha": rng.uniform(1.0, 2.0, b).astype(np.float32)} for b in (1, 3)]
    books = ((info.semantic_codebook_size, 1), (info.acoustic_codebook_size, info.n_acoustic_codebook))
    return [{"codes": random_codes(rng, b, n, books), "state": np.zeros((b, state_size), np.float32)}
            for b, n in ((1, 6), (2, 3))]


def _quantize(info: VoxtralInfo, path: Path, graph: str, precision: str, state_size: int) -> dict[str, Any]:
    feeds = _quant_feeds(info, graph, state_size)
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds),
                          audio=graph == "codec_stream")


def export_voxtral(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                   source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    fp32_int8_int4(spec.DISPLAY, precision)
    src = Path(src)
    info = read_checkpoint(src)
    torch.manual_seed(0)
    lm = info.lm
    specs = {"lm_step": spec.lm_step_spec(lm.n_layers, lm.dim, lm.n_kv_heads, lm.head_dim),
             "velocity": spec.velocity_spec(info.n_acoustic_codebook, lm.dim)}
    with StageRunner(["lm_step", "velocity", "codec", "tables"], progress, precision, family=spec.FAMILY,
                     source=source) as run:
        run.graph("lm_step", lambda: _lm_stage(src, info, specs["lm_step"], tmp))
        run.graph("velocity", lambda: _velocity_stage(src, info, specs["velocity"], tmp))
        with run.stage("codec"):
            run.reports["codec_stream"], specs["codec_stream"], state_size, layout = _codec_stage(src, info, tmp)
        with run.stage("tables"):
            tables = _tables(src, info, tmp)
        run.quantize(QUANTIZED, lambda name: _quantize(info, tmp / specs[name].filename, name, precision, state_size))
    copy_files(src, tmp / "tokenizer", [TEKKEN])
    return run.manifest(
        tmp,
        model_size=model_size(lm.dim),
        sizes=dataclasses.asdict(info),
        sample_rate=info.codec.sampling_rate,
        samples_per_frame=info.codec.samples_per_frame,
        vocoder_state_size=state_size,
        vocoder_state_layout=layout,
        speakers=dict(info.voices),
        tables=tables,
        graphs=specs,
        configs=json_configs(src, PARAMS),
    )
