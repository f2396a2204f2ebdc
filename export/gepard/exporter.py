"""Gepard-1.0 checkpoint -> validated ONNX graphs + tables + manifest.json.

Called by export.exporter.export_checkpoint (which owns the partial directory and the rename into
place). Graphs: `backbone` (the Qwen3.5 stack over explicit K/V + the 32 heads and the stop head of
the last position), `frame_embed` (the 32 codes -> the next input), `codec_stream` (NanoCodec's decoder
as an exact streaming graph). Tables: the token embedding and `null_prefix`. Each graph is checked
against the PyTorch modules of export/gepard/graphs.py and codec.py (themselves proven equal to
transformers' Qwen3_5TextModel and to the whole NanoCodec decode by tests/export_tests/test_gepard_*.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.decoder_step import export_decoder_step
from export.quantize import only_fp32
from export.stages import stage_announcer
from export.tracing import (
    ErrorTracker,
    export_inline,
    file_size,
    ort_run,
    ort_session,
    torch_threads,
    versions,
)
from ttscore.contract import gepard as spec
from ttscore.contract.errors import CheckpointError
from ttscore.contract.graphs import GraphSpec
from ttscore.contract.manifest import build_manifest
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


class Weights:
    """The checkpoint's tensors by name, read one at a time as float32."""

    def __init__(self, src: Path) -> None:
        from ttscore.runtime.weights import read_weights

        self.files = read_weights(src, "model").tensors

    def get(self, name: str) -> Any:
        import torch
        from safetensors import safe_open

        with safe_open(str(self.files[name]), framework="pt") as f:
            return f.get_tensor(name).to(torch.float32)

    def load(self, module: Any) -> None:
        """Every parameter of `module` from the tensor of the same name (audio_embed_scale as a scalar)."""
        state = {p: self.get(p).reshape(t.shape) for p, t in module.state_dict().items()}
        module.load_state_dict(state, strict=True)


def _finish(tr: ErrorTracker, name: str, path: Path, tol: float) -> dict[str, Any]:
    tr.enforce(tol, name)
    return {"file": path.name, "max_abs_error": tr.report(), "tolerance": tol, "bytes": file_size(path)}






def _backbone_stage(w: Weights, info: GepardInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """The backbone as a decoder step with an explicit past (export.decoder_step)."""
    from export.gepard.graphs import BackboneStep

    s = info.backbone

    def make() -> Any:
        model = BackboneStep(info).eval()
        w.load(model)
        return model

    path, tr = export_decoder_step(make, gspec, out, layers=s.num_layers, kv_heads=s.num_kv_heads,
                                   head_dim=s.head_dim, hidden=s.hidden_size, outputs=("logits", "stop_prob"))
    return _finish(tr, gspec.name, path, TOLERANCE)


def _frame_embed_stage(w: Weights, info: GepardInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    import torch

    from export.gepard.graphs import FrameEmbed

    rng = np.random.default_rng(4)
    levels = np.array(info.head_levels)
    with torch_threads(), torch.inference_mode():
        model = FrameEmbed(info).eval()
        w.load(model)
        cases = [(rng.integers(0, levels, size=(b, len(levels)))).astype(np.int64) for b in (1, 3)]
        want = [model(torch.from_numpy(c)).numpy() for c in cases]
        path = export_inline(model, (torch.from_numpy(cases[1]),), gspec, out)
        del model
    sess = ort_session(path)
    tr = ErrorTracker()
    for c, wnt in zip(cases, want, strict=True):
        tr.add("embeds", ort_run(sess, {"codes": c})[0], wnt, f"batch {c.shape[0]}")
    return _finish(tr, gspec.name, path, TOLERANCE)


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
    state = np.zeros((2, state_size), np.float32)
    pieces = []
    for a, b in ((0, 1), (1, 4), (4, 8)):
        pcm, state = ort_run(sess, {"codes": codes[:, a:b], "state": state})
        pieces.append(pcm)
    tr.add("pcm", np.concatenate(pieces, axis=1), want, "chunks 1+3+4 vs whole")
    report = _finish(tr, gspec.name, path, CODEC_TOLERANCE)
    return report, gspec, state_size, layout


def export_gepard(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                  source: dict[str, Any], codec: Path | None = None) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    from export.memory import MemoryMonitor

    only_fp32(spec.RULES.name, precision)
    info = read_checkpoint(src, codec)
    archive = codec_archive(src, codec)
    stages = ["backbone", "frame embed", "tables", "codec", "manifest"]

    stage = stage_announcer(stages, progress)

    torch.manual_seed(0)
    s = info.backbone
    specs = {"backbone": spec.backbone_spec(s.num_layers, s.hidden_size, s.num_kv_heads, s.head_dim, info.num_logits),
             "frame_embed": spec.frame_embed_spec(s.hidden_size)}
    reports: dict[str, Any] = {}
    weights = Weights(src)
    tables: dict[str, Any] = {}
    with MemoryMonitor() as mon:
        stage("backbone")
        with mon.stage("backbone"):
            reports["backbone"] = _backbone_stage(weights, info, specs["backbone"], tmp)
        stage("frame embed")
        with mon.stage("frame_embed"):
            reports["frame_embed"] = _frame_embed_stage(weights, info, specs["frame_embed"], tmp)
        stage("tables")
        with mon.stage("tables"):
            for name, tensor in ((spec.EMBED_TOKENS, "model.embed_tokens.weight"), (spec.NULL_PREFIX, "null_prefix")):
                arr = weights.get(tensor).numpy()
                np.save(tmp / f"{name}.npy", arr)
                tables[name] = {"shape": list(arr.shape)}
                del arr
        stage("codec")
        with mon.stage("codec"):
            reports["codec_stream"], specs["codec_stream"], state_size, layout = _codec_stage(archive, tmp)
    memory = mon.summary()

    stage("manifest")
    tok_dir = tmp / "tokenizer"
    tok_dir.mkdir()
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, tok_dir / name)
    cfg, sidecar = read_configs(src)
    return build_manifest(
        tmp,
        family=spec.FAMILY,
        source=source,
        variant="base",
        model_size="real" if s.hidden_size >= 1024 else "tiny",
        precision=precision,
        sizes=info.to_json(),
        sample_rate=info.sample_rate,
        samples_per_frame=spec.SAMPLES_PER_FRAME,
        vocoder_state_size=state_size,
        vocoder_state_layout=layout,
        speakers={v: i for i, v in enumerate(spec.VOICES)},  # the one voice GET /v1/models lists
        tables=tables,
        memory=memory,
        graphs=specs,
        validation=reports,
        configs={CONFIG: cfg, SIDECAR: sidecar},
        versions=versions(),
    )
