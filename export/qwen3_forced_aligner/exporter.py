"""Qwen3-ForcedAligner checkpoint -> validated ONNX graphs + tables + manifest.json.

Called by export.exporter.export_checkpoint (which owns the partial directory and the rename into place). Graphs:
`audio_encoder` (padded mel chunks -> audio embeddings) and `aligner` (token ids + audio embeddings -> each
position's class and logits), each checked against the torch modules of export/qwen3_forced_aligner/graphs.py (themselves
proven equal to qwen-asr 0.0.6 by tests/export_tests/test_aligner_parity.py) over several input shapes: clips of
one short chunk and of several attention windows (windowed and whole-clip attention), one row and two left-padded
rows. Table: Whisper's mel filter bank (the front end runs in numpy, ttscore.runtime.qwen3_forced_aligner.frontend). fp32 only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.stages import StageRunner, copy_files, json_configs, model_size, save_table
from export.tracing import export_checked, torch_threads
from export.weights import CheckpointTensors
from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.contract.errors import ExportError
from ttscore.runtime.qwen3_forced_aligner.checkpoint import (
    CONFIG,
    PREPROCESSOR,
    TOKENIZER_FILES,
    TOWER,
    AlignerInfo,
    read_checkpoint,
)
from ttscore.runtime.qwen3_forced_aligner.frontend import chunk_layout, log_mel

TOLERANCE = {"audio_embeds": 1e-4}  # max abs error vs the torch module (tiny: ~1e-6)
# The classes must be the same (what the aligner gives). The logits' bound is absolute: fp32 reordering over 28 layers
# at the real size measured 3.6e-3 on random weights (tiny: ~1e-5), so 1e-2.
ALIGNER_TOLERANCE = {"logits": 1e-2, "classes": 0.0}
TOKENIZER_DIR = "tokenizer"


def mel_filters(num_mel_bins: int) -> np.ndarray:
    """Whisper's Slaney mel filter bank [201, bins] as transformers' WhisperFeatureExtractor builds it."""
    from transformers.audio_utils import mel_filter_bank

    return np.asarray(mel_filter_bank(num_frequency_bins=1 + spec.N_FFT // 2, num_mel_filters=num_mel_bins,
                                      min_frequency=0.0, max_frequency=spec.SAMPLE_RATE / 2,
                                      sampling_rate=spec.SAMPLE_RATE, norm="slaney", mel_scale="slaney"),
                      dtype=np.float32)


def _encoder_cases(info: AlignerInfo, filters: np.ndarray) -> list[dict[str, np.ndarray]]:
    """A clip shorter than a chunk, and one of several windows both windowed and attended whole."""
    rng = np.random.default_rng(6)
    a = info.audio
    per_window = a.n_window_infer // a.chunk_frames
    chunk_seconds = a.chunk_frames * spec.HOP_LENGTH / spec.SAMPLE_RATE
    cases: list[dict[str, np.ndarray]] = []
    for seconds, whole in ((0.6 * chunk_seconds, False), ((per_window + 1.3) * chunk_seconds, False),
                           ((per_window + 1.3) * chunk_seconds, True)):
        clip = (rng.standard_normal(int(seconds * spec.SAMPLE_RATE)) * 0.1).astype(np.float32)
        lay = chunk_layout(log_mel(clip, filters), a.chunk_frames, per_window)
        window = np.zeros_like(lay.window_id) if whole else lay.window_id
        cases.append({"chunks": lay.chunks, "valid_index": lay.valid_index, "window_id": window})
    return cases


def _aligner_cases(info: AlignerInfo) -> list[dict[str, np.ndarray]]:
    """A prompt of one row, and two left-padded rows, each with audio placeholders, words and timestamp slots."""
    rng = np.random.default_rng(7)
    h = info.text.hidden_size
    cases: list[dict[str, np.ndarray]] = []
    for lengths in ((30,), (26, 19)):
        audio = 7
        t = max(lengths)
        ids = np.zeros((len(lengths), t), np.int64)
        mask = np.zeros((len(lengths), t), np.int64)
        for b, n in enumerate(lengths):
            row = [info.audio_start_token_id, *[info.audio_token_id] * audio, info.audio_end_token_id]
            while len(row) < n:
                row += [int(rng.integers(0, min(info.text.vocab_size, info.audio_token_id))),
                        info.timestamp_token_id, info.timestamp_token_id]
            ids[b, t - n:] = row[:n]
            mask[b, t - n:] = 1
        cases.append({"input_ids": ids, "attention_mask": mask,
                      "audio_embeds": rng.standard_normal((len(lengths), audio, h)).astype(np.float32)})
    return cases


def _encoder_stage(w: CheckpointTensors, info: AlignerInfo, filters: np.ndarray, out: Path) -> dict[str, Any]:
    import torch

    from export.qwen3_forced_aligner.graphs import AudioEncoder

    with torch_threads(), torch.inference_mode():
        model = AudioEncoder(info.audio).eval()
        w.load(model, lambda name: TOWER + name)
    gspec = spec.audio_encoder_spec(info.audio.num_mel_bins, info.audio.output_dim)
    return export_checked(model, gspec, _encoder_cases(info, filters), out, TOLERANCE, example=1)


def _aligner_stage(w: CheckpointTensors, info: AlignerInfo, out: Path) -> dict[str, Any]:
    import torch

    from export.qwen3_forced_aligner.graphs import Aligner

    with torch_threads(), torch.inference_mode():
        model = Aligner(info).eval()
        w.load(model, lambda name: "thinker." + name)
    gspec = spec.aligner_spec(info.text.hidden_size, info.classify_num)
    return export_checked(model, gspec, _aligner_cases(info), out, ALIGNER_TOLERANCE, example=1)


def export_aligner(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                   source: dict[str, Any]) -> dict[str, Any]:
    """Both graphs and the mel table into `tmp`; returns the manifest."""
    if precision != "fp32":
        raise ExportError(f"{spec.DISPLAY} exports fp32 only, got --precision {precision}")
    info = read_checkpoint(src)
    weights = CheckpointTensors(src)
    filters = mel_filters(info.audio.num_mel_bins)
    specs = {"audio_encoder": spec.audio_encoder_spec(info.audio.num_mel_bins, info.audio.output_dim),
             "aligner": spec.aligner_spec(info.text.hidden_size, info.classify_num)}
    tables: dict[str, Any] = {}
    with StageRunner(["audio encoder", "aligner", "tables"], progress, precision, family=spec.COMPONENT,
                     source=source) as run:
        run.graph("audio encoder", lambda: _encoder_stage(weights, info, filters, tmp))
        run.graph("aligner", lambda: _aligner_stage(weights, info, tmp))
        with run.stage("tables"):
            save_table(tmp, spec.MEL_FILTERS, filters, tables)
    copy_files(src, tmp / TOKENIZER_DIR, TOKENIZER_FILES)
    return run.manifest(
        tmp,
        model_size=model_size(info.text.hidden_size),
        sizes=info.to_json(),
        sample_rate=spec.SAMPLE_RATE,
        samples_per_frame=spec.HOP_LENGTH,
        vocoder_state_size=0,
        vocoder_state_layout=[],
        vocoder=False,  # it makes no audio
        tables=tables,
        graphs=specs,
        configs=json_configs(src, CONFIG, PREPROCESSOR),
    )
