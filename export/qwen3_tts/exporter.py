"""Qwen3-TTS checkpoint -> validated ONNX graphs + embedding tables + manifest.json.

Called by export.exporter.export_checkpoint (which owns the partial directory and the rename into
place) for a Qwen3-TTS checkpoint. Each stage holds only the weights it traces (export.memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ttscore.contract import qwen3_tts as contract
from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import CheckpointError, TTSError
from ttscore.runtime.families.qwen3_tts.checkpoint import Qwen3TTSInfo
from ttscore.runtime.families.qwen3_tts.tokenizer import TOKENIZER_FILES

logger = logging.getLogger(__name__)

# Quantized precisions: the graphs whose constant-weight MatMuls are quantized, each checked against
# its fp32 export (the error is reported per graph in the manifest, `validation.vs_fp32`).
QUANTIZED_GRAPHS = ("talker", "code_predictor", "code2wav_stream")
# The vocoder keeps a quantized graph only while its audio stays within
# export.quantize.VOCODER_MIN_SNR_DB of fp32's; otherwise it stays fp32 and the manifest says why.


def graph_specs(info: Qwen3TTSInfo, state_size: int | None = None) -> dict[str, spec.GraphSpec]:
    t = info.talker
    specs = {
        "talker": spec.talker_spec(t.num_layers, t.hidden_size, t.num_kv_heads, t.head_dim, info.codec_vocab_size),
        "code_predictor": spec.code_predictor_spec(t.hidden_size, info.num_code_groups),
        "code2wav": spec.code2wav_spec(info.num_code_groups),
    }
    if state_size is not None:
        specs["code2wav_stream"] = spec.code2wav_stream_spec(
            info.num_code_groups, state_size, info.samples_per_frame
        )
    if info.variant == "base":
        specs["speaker_encoder"] = spec.speaker_encoder_spec(spec.MEL_BINS, int(info.speaker_embed_dim or 0))
        specs["speech_encoder"] = spec.speech_encoder_spec(info.num_code_groups)
    return specs


def _quantize(model: Any, path: Path, graph: str, precision: str) -> dict[str, Any]:
    """Quantize one validated fp32 graph (export.quantize.quantize_graph); returns the manifest fields
    `quantized` and `vs_fp32`. `model` is the reference model (only its configs are read: the
    weights may stay on the meta device)."""
    from export.quantize import INT8_BLOCK, quantize_graph

    from .talker import validate_int8

    if graph == "code2wav_stream":
        return quantize_graph(path, precision, compare_vocoder, audio=True)
    # int8 (perf/README.md, issue 29): the code predictor in blocks of 256 along K (8-bit MatMulNBits),
    # faster than MatMulInteger at batch 1 and 8 and closer to fp32; the talker stays dynamic
    # MatMulInteger, as fast per decode step and 1.5x faster on a burst's prefill (MatMulNBits is
    # slower at many rows), which the code predictor never runs.
    block = INT8_BLOCK if graph == "code_predictor" else None
    return quantize_graph(path, precision, lambda fp32, q: validate_int8(model, fp32, q), int8_block_size=block)


def compare_vocoder(fp32_path: Path, quant_path: Path, *, seed: int = 0) -> dict[str, Any]:
    """Streamed decode of random codes (two chunks, state carried) by both graphs: audio error."""
    import numpy as np

    from export.quantize import snr_db
    from export.tracing import ort_session

    a, b = ort_session(fp32_path), ort_session(quant_path)
    codes_in = next(i for i in a.get_inputs() if i.name == "codes")
    state_in = next(i for i in a.get_inputs() if i.name == "state")
    groups, state_size = int(codes_in.shape[2]), int(state_in.shape[1])
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 1024, size=(2, 12, groups)).astype(np.int64)
    outs = []
    for sess in (a, b):
        state = np.zeros((2, state_size), np.float32)
        pcm = []
        for lo, hi in ((0, 4), (4, 12)):
            feed = {"codes": codes[:, lo:hi], "state": state, "position": np.full(2, lo, np.int64)}
            chunk, state = sess.run(["pcm", "new_state"], feed)
            pcm.append(chunk)
        outs.append(np.concatenate(pcm, axis=1))
    ref, got = outs
    return {"audio_max_abs": float(f"{np.abs(got - ref).max():.3g}"), "snr_db": snr_db(ref, got)}


def export_qwen3_tts(src: Path, tmp: Path, info: Qwen3TTSInfo, precision: str,
                     progress: Callable[[int, int, str], None] | None, source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time, each holding only the weights it needs (see
    export.memory); returns the manifest (the caller writes it and renames `tmp` into place)."""
    import torch

    from export.stages import StageRunner, copy_files, json_configs

    from .reference import StagedReference

    stages = ["loading the checkpoint", "talker", "code predictor", "embedding tables", "code2wav"]
    stages += ["speaker and speech encoders"] if info.variant == "base" else []
    torch.manual_seed(0)
    with StageRunner(stages, progress, precision, family=contract.FAMILY, source=source) as run:
        reports = run.reports
        with run.stage("loading the checkpoint", "load"):
            try:
                ref = StagedReference(src)
            except TTSError:
                raise
            except Exception as exc:
                raise CheckpointError(f"cannot load {src} with the reference implementation: {exc}") from exc
        run.graph("talker", lambda: _talker_stage(ref, tmp))
        run.graph("code predictor", lambda: _code_predictor_stage(ref, tmp))
        run.graph("embedding tables", lambda: _tables_stage(ref, tmp), "tables")
        with run.stage("code2wav"):
            c2w = _code2wav_stage(ref, tmp)
        # One report validates both graphs (offline vs reference, streaming vs offline and reference).
        reports["code2wav_stream"] = reports["code2wav"] = c2w
        state_size = int(c2w["state_size"])
        if info.variant == "base":
            run.announce("speaker and speech encoders")
            with run.measure("speaker_encoder"):
                reports["speaker_encoder"] = _speaker_encoder_stage(ref, tmp)
            with run.measure("speech_encoder"):
                reports["speech_encoder"] = _speech_encoder_stage(ref, tmp)

        specs = graph_specs(info, state_size)
        run.quantize(QUANTIZED_GRAPHS, lambda name: _quantize(ref.model, tmp / specs[name].filename, name, precision))
    copy_files(src, tmp / "tokenizer", TOKENIZER_FILES)

    configs = json_configs(src, "config.json", "generation_config.json", "speech_tokenizer/config.json")
    return run.manifest(
        tmp,
        variant=info.variant,
        model_size=info.model_size,
        sizes={
            "talker": info.talker.__dict__,
            "code_predictor": info.code_predictor.__dict__,
            "codec_vocab_size": info.codec_vocab_size,
            "codebook_size": info.codebook_size,
            "num_code_groups": info.num_code_groups,
            "text_vocab_size": info.text_vocab_size,
        },
        special_text_ids=info.special_text_ids,
        codec_ids=info.codec_ids,
        speaker_dialects=info.speaker_dialects,
        speakers=info.speakers,
        languages=info.supported_languages,
        sample_rate=info.sample_rate,
        samples_per_frame=info.samples_per_frame,
        vocoder_state_size=state_size,
        vocoder_state_layout=c2w["state_layout"],
        graphs=specs,
        tables=reports.get("tables", {}),
        configs=configs,
    )


# Each stage is a function so that every reference to its weights (wrappers, state dicts, the
# speech tokenizer) is gone when it returns and the next stage starts without them.


def _talker_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from export.memory import release_memory

    from .reference import TALKER_WEIGHTS
    from .talker import check_talker, export_talker, talker_reference

    with ref.loaded(TALKER_WEIGHTS) as tts:
        logger.info("exporting talker")
        reference = talker_reference(tts)
        report = export_talker(tts, tmp, validate=False)
    # The PyTorch weights are gone before ONNX Runtime loads the graph: at 1.7B each is ~5.7 GB.
    release_memory()
    report.update(check_talker(reference, tmp / report["file"]))
    return report


def _code_predictor_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from .reference import CODE_PREDICTOR_WEIGHTS
    from .talker import export_code_predictor

    # Validation runs the reference on the graph's own codes (teacher forcing), so both stay
    # loaded here; the code predictor is small (0.7 GB at 1.7B).
    with ref.loaded(CODE_PREDICTOR_WEIGHTS) as tts:
        logger.info("exporting code predictor")
        return export_code_predictor(tts, tmp)


def _tables_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from .reference import TABLE_WEIGHTS
    from .talker import export_tables

    with ref.loaded(TABLE_WEIGHTS) as tts:
        logger.info("writing embedding tables")
        return export_tables(tts, tmp)


def _code2wav_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from .code2wav import export_code2wav

    with ref.speech_tokenizer() as st_model:
        logger.info("exporting code2wav")
        return export_code2wav(st_model, tmp)


def _speaker_encoder_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from .encoders import export_mel_filters, export_speaker_encoder
    from .reference import SPEAKER_ENCODER_WEIGHTS

    with ref.loaded(SPEAKER_ENCODER_WEIGHTS) as tts:
        logger.info("exporting speaker encoder")
        report = export_speaker_encoder(tts, tmp)
    export_mel_filters(tmp)
    return report


def _speech_encoder_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from .encoders import export_speech_encoder

    with ref.speech_tokenizer() as st_model:
        logger.info("exporting speech encoder")
        return export_speech_encoder(st_model, tmp)
