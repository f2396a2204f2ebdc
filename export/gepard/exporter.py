"""Gepard-1.0 checkpoint -> validated ONNX graphs + tables + manifest.json.

Called by export.exporter.export_checkpoint (which owns the partial directory and the rename into
place). Graphs: `backbone` (the Qwen3.5 stack over explicit K/V + the 32 heads and the stop head of
the last position), `frame_embed` (the 32 codes -> the next input), `codec_stream` (NanoCodec's decoder
as an exact streaming graph). Tables: the token embedding and `null_prefix`. Each graph is checked
against the PyTorch modules of export/gepard/graphs.py and codec.py (themselves proven equal to
transformers' Qwen3_5TextModel and to the whole NanoCodec decode by tests/export_tests/test_gepard_*.py).
`--precision int8|int4` quantizes the graphs of `QUANTIZED` after, each measured against its fp32 form
(export.quantize.quantize_graph).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.decoder_step import export_decoder_step
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph, random_step_feeds
from export.stages import StageRunner, copy_files, model_size, save_tables
from export.tracing import (
    ErrorTracker,
    export_checked,
    export_inline,
    ort_session,
    run_in_chunks,
    torch_threads,
)
from export.weights import CheckpointTensors
from ttscore.contract import gepard as spec
from ttscore.contract.errors import CheckpointError
from ttscore.contract.graphs import GraphSpec
from ttscore.runtime.families.gepard.checkpoint import (
    CONFIG,
    SIDECAR,
    TOKENIZER_FILES,
    GepardInfo,
    codec_archive,
    read_checkpoint,
    read_configs,
)

TOLERANCE = 1e-4  # max abs error of backbone / frame_embed outputs vs the torch modules (tiny: ~1e-6)
CODEC_TOLERANCE = 1e-4  # codec_stream audio, streamed in chunks, vs the torch whole decode
# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.quantize_graph),
# each measured against its fp32 export (`vs_fp32`); codec_stream keeps its quantized form only at
# VOCODER_MIN_SNR_DB or more.
QUANTIZED = ("backbone", "frame_embed", "codec_stream")


def _backbone_stage(w: CheckpointTensors, info: GepardInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """The backbone as a decoder step with an explicit past (export.decoder_step)."""
    from export.gepard.graphs import BackboneStep

    s = info.backbone

    def make() -> Any:
        model = BackboneStep(info).eval()
        w.load(model)
        return model

    path, tr = export_decoder_step(make, gspec, out, layers=s.num_layers, kv_heads=s.num_kv_heads,
                                   head_dim=s.head_dim, hidden=s.hidden_size, outputs=("logits", "stop_prob"))
    return tr.finish(gspec.name, path, TOLERANCE)


def _frame_embed_stage(w: CheckpointTensors, info: GepardInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    import torch

    from export.gepard.graphs import FrameEmbed

    rng = np.random.default_rng(4)
    levels = np.array(info.head_levels)
    with torch_threads(), torch.inference_mode():
        model = FrameEmbed(info).eval()
        w.load(model)
    cases = [{"codes": (rng.integers(0, levels, size=(b, len(levels)))).astype(np.int64)} for b in (1, 3)]
    return export_checked(model, gspec, cases, out, TOLERANCE, example=1)


def _codec_stage(archive: Path, out: Path) -> tuple[dict[str, Any], GraphSpec, int, list[Any]]:
    """codec_stream: three chunks (1, 3, 4 frames) through the graph with its state == the whole
    8-frame decode of the torch port, for two rows at once."""
    import torch

    from export.gepard.codec import Streaming, load_codec

    with torch_threads(), torch.inference_mode():
        codec = load_codec(archive)
        stream = Streaming(codec).eval()
        gspec = spec.codec_stream_spec(stream.state_size)
        rng = np.random.default_rng(5)
        levels = np.array(codec.levels * codec.groups)
        codes = rng.integers(0, levels, size=(2, 8, spec.NUM_CODEBOOKS)).astype(np.int64)
        want = codec(torch.from_numpy(codes).transpose(1, 2)).numpy()
        ex = (torch.from_numpy(codes[:, :2]), torch.zeros(2, stream.state_size))
        path = export_inline(stream, ex, gspec, out)
        layout = [[name, c, n] for name, c, n in stream.layout]
        state_size = stream.state_size
        hop = codec.audio_decoder.hop
        rate = codec.sample_rate
        del stream, codec
    if hop != spec.SAMPLES_PER_FRAME or rate != spec.SAMPLE_RATE:
        raise CheckpointError(f"{archive}: a NanoCodec of {hop} samples a frame at {rate} Hz; Gepard-1.0's is "
                              f"{spec.SAMPLES_PER_FRAME} at {spec.SAMPLE_RATE}")
    sess = ort_session(path)
    tr = ErrorTracker()
    tr.add("pcm", run_in_chunks(sess, codes, state_size, (1, 3, 4), axis=1), want, "chunks 1+3+4 vs whole")
    report = tr.finish(gspec.name, path, CODEC_TOLERANCE)
    return report, gspec, state_size, layout


def _quant_feeds(info: GepardInfo, graph: str, state_size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random inputs for comparing a quantized graph with its fp32 form: the backbone a prefill and a batched
    decode step over a random past; frame_embed and codec_stream random codes, one and several rows."""
    rng = np.random.default_rng(seed)
    if graph == "backbone":
        s = info.backbone
        return random_step_feeds(rng, ((1, 0, 12), (3, 5, 1)), hidden=s.hidden_size, layers=s.num_layers,
                                 kv_heads=s.num_kv_heads, head_dim=s.head_dim)
    levels = np.array(info.head_levels)
    if graph == "frame_embed":
        return [{"codes": rng.integers(0, levels, size=(b, len(levels))).astype(np.int64)} for b in (1, 4)]
    return [{"codes": rng.integers(0, levels, size=(b, n, len(levels))).astype(np.int64),
             "state": np.zeros((b, state_size), np.float32)} for b, n in ((1, 6), (2, 3))]


def _quantize(info: GepardInfo, path: Path, graph: str, precision: str, state_size: int) -> dict[str, Any]:
    feeds = _quant_feeds(info, graph, state_size)
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds),
                          audio=graph == "codec_stream", gemm=graph == "frame_embed")


def export_gepard(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                  source: dict[str, Any], codec: Path | None = None) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    fp32_int8_int4(spec.RULES.name, precision)
    info = read_checkpoint(src, codec)
    archive = codec_archive(src, codec)
    torch.manual_seed(0)
    s = info.backbone
    specs = {"backbone": spec.backbone_spec(s.num_layers, s.hidden_size, s.num_kv_heads, s.head_dim, info.num_logits),
             "frame_embed": spec.frame_embed_spec(s.hidden_size)}
    weights = CheckpointTensors(src)
    with StageRunner(["backbone", "frame embed", "tables", "codec"], progress, precision, family=spec.FAMILY,
                     source=source) as run:
        run.graph("backbone", lambda: _backbone_stage(weights, info, specs["backbone"], tmp))
        run.graph("frame embed", lambda: _frame_embed_stage(weights, info, specs["frame_embed"], tmp))
        with run.stage("tables"):
            tables = save_tables(tmp, weights.get, ((spec.EMBED_TOKENS, "model.embed_tokens.weight"),
                                                    (spec.NULL_PREFIX, "null_prefix")))
        with run.stage("codec"):
            run.reports["codec_stream"], specs["codec_stream"], state_size, layout = _codec_stage(archive, tmp)
        run.quantize(QUANTIZED, lambda name: _quantize(info, tmp / specs[name].filename, name, precision, state_size))
    copy_files(src, tmp / "tokenizer", TOKENIZER_FILES)
    cfg, sidecar = read_configs(src)
    return run.manifest(
        tmp,
        model_size=model_size(s.hidden_size),
        sizes=info.to_json(),
        sample_rate=info.sample_rate,
        samples_per_frame=spec.SAMPLES_PER_FRAME,
        vocoder_state_size=state_size,
        vocoder_state_layout=layout,
        speakers={v: i for i, v in enumerate(spec.VOICES)},  # the one voice GET /v1/models lists
        tables=tables,
        graphs=specs,
        configs={CONFIG: cfg, SIDECAR: sidecar},
    )
