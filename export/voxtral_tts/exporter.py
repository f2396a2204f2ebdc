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
import json
import shutil
from collections.abc import Callable, Sequence
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
from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.graphs import GraphSpec
from ttscore.contract.manifest import build_manifest
from ttscore.runtime.families.voxtral_tts.checkpoint import (
    PARAMS,
    TEKKEN,
    VOICES_DIR,
    WEIGHTS,
    VoxtralInfo,
    read_checkpoint,
)

TOLERANCE = 1e-4  # max abs error of the graphs' float outputs vs the torch modules (tiny: ~1e-6)
CODE_TOLERANCE = 0.0  # semantic codes: exactly


def _finish(tr: ErrorTracker, name: str, path: Path, tol: dict[str, float]) -> dict[str, Any]:
    tr.enforce(tol, name)
    return {"file": path.name, "max_abs_error": tr.report(), "tolerance": tol, "bytes": file_size(path)}






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
    return _finish(tr, gspec.name, path, {"hidden": TOLERANCE, "semantic_code": CODE_TOLERANCE})


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
        want = [model(*(torch.from_numpy(c[k]) for k in gspec.input_names)).numpy() for c in cases]
        path = export_inline(model, tuple(torch.from_numpy(cases[1][k]) for k in gspec.input_names), gspec, out)
        del model
    sess = ort_session(path)
    tr = ErrorTracker()
    for c, w in zip(cases, want, strict=True):
        tr.add("velocity", ort_run(sess, c)[0], w, f"batch {len(c['x'])}")
    return _finish(tr, gspec.name, path, {"velocity": TOLERANCE})


def _codec_stage(src: Path, info: VoxtralInfo, out: Path) -> tuple[dict[str, Any], GraphSpec, int, list[Any]]:
    """codec_stream: chunks of 1, 3, 4 and 22 frames through the graph with its state == the torch
    whole decode of the 30 frames (past every attention window), two rows at once; and 1 frame alone."""
    import torch

    from export.voxtral_tts.graphs import CodecDecoder, CodecStream, load

    rng = np.random.default_rng(5)

    def codes(b: int, t: int) -> np.ndarray:
        sem = rng.integers(0, info.semantic_codebook_size, (b, 1, t))
        ac = rng.integers(0, info.acoustic_codebook_size, (b, info.n_acoustic_codebook, t))
        return np.concatenate([sem, ac], axis=1).astype(np.int64)

    cases = [codes(2, 30), codes(1, 1)]
    with torch_threads(), torch.inference_mode():
        whole = load(CodecDecoder(info), src)
        want = [whole(torch.from_numpy(c)).numpy() for c in cases]
        del whole
        stream = load(CodecStream(info), src)
        size = stream.state_size
        layout = [[name, list(shape)] for name, shape in stream.layout]
        gspec = spec.codec_stream_spec(1 + info.n_acoustic_codebook, size)
        path = export_inline(stream, (torch.from_numpy(cases[0][:, :, :3]), torch.zeros(2, size)), gspec, out)
        del stream
    sess = ort_session(path)
    tr = ErrorTracker()
    for c, w, chunks in zip(cases, want, ((1, 3, 4, 22), (1,)), strict=True):
        state = np.zeros((c.shape[0], size), np.float32)
        pieces, a = [], 0
        for n in chunks:
            pcm, state = ort_run(sess, {"codes": c[:, :, a:a + n], "state": state})
            pieces.append(pcm)
            a += n
        tr.add("pcm", np.concatenate(pieces, axis=1), w, f"chunks {'+'.join(map(str, chunks))} vs whole")
    return _finish(tr, gspec.name, path, {"pcm": TOLERANCE}), gspec, size, layout


def _tables(src: Path, info: VoxtralInfo, out: Path) -> dict[str, Any]:
    import torch
    from safetensors import safe_open

    tables: dict[str, Any] = {}
    with safe_open(str(src / WEIGHTS), framework="pt") as f:
        for name, tensor in ((spec.TOK_EMBEDDINGS, "mm_audio_embeddings.tok_embeddings.weight"),
                             (spec.AUDIO_EMBEDDINGS, "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight")):
            arr = f.get_tensor(tensor).to(torch.float32).numpy()
            np.save(out / f"{name}.npy", arr)
            tables[name] = {"shape": list(arr.shape)}
            del arr
    for voice in info.voices:
        rows = torch.load(src / VOICES_DIR / f"{voice}.pt", map_location="cpu").to(torch.float32).numpy()
        if rows.ndim != 2 or rows.shape[1] != info.lm.dim:
            raise InvalidRequest(f"{VOICES_DIR}/{voice}.pt: shape {list(rows.shape)}, want [frames, {info.lm.dim}]",
                                 "checkpoint")
        name = spec.VOICE_TABLE_PREFIX + voice
        np.save(out / f"{name}.npy", rows)
        tables[name] = {"shape": list(rows.shape)}
    return tables


def export_voxtral(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                   source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    from export.memory import MemoryMonitor

    only_fp32(spec.DISPLAY, precision)
    src = Path(src)
    info = read_checkpoint(src)
    stages = ["lm_step", "velocity", "codec", "tables", "manifest"]

    stage = stage_announcer(stages, progress)

    torch.manual_seed(0)
    lm = info.lm
    specs = {"lm_step": spec.lm_step_spec(lm.n_layers, lm.dim, lm.n_kv_heads, lm.head_dim),
             "velocity": spec.velocity_spec(info.n_acoustic_codebook, lm.dim)}
    reports: dict[str, Any] = {}
    with MemoryMonitor() as mon:
        stage("lm_step")
        with mon.stage("lm_step"):
            reports["lm_step"] = _lm_stage(src, info, specs["lm_step"], tmp)
        stage("velocity")
        with mon.stage("velocity"):
            reports["velocity"] = _velocity_stage(src, info, specs["velocity"], tmp)
        stage("codec")
        with mon.stage("codec"):
            reports["codec_stream"], specs["codec_stream"], state_size, layout = _codec_stage(src, info, tmp)
        stage("tables")
        with mon.stage("tables"):
            tables = _tables(src, info, tmp)
    memory = mon.summary()
    stage("manifest")
    tok_dir = tmp / "tokenizer"
    tok_dir.mkdir()
    shutil.copy2(src / TEKKEN, tok_dir / TEKKEN)
    return build_manifest(
        tmp,
        family=spec.FAMILY,
        source=source,
        variant="base",
        model_size="real" if lm.dim >= 1024 else "tiny",
        precision=precision,
        sizes=dataclasses.asdict(info),
        sample_rate=info.codec.sampling_rate,
        samples_per_frame=info.codec.samples_per_frame,
        vocoder_state_size=state_size,
        vocoder_state_layout=layout,
        speakers=dict(info.voices),
        tables=tables,
        memory=memory,
        graphs=specs,
        validation=reports,
        configs={PARAMS: json.loads((src / PARAMS).read_text())},
        versions=versions(),
    )
