"""`triton-tts export`: checkpoint directory -> validated ONNX artifacts + manifest.json.

Everything is written into a temporary sibling directory and renamed into place only after every
graph passed validation against PyTorch, so a failed export never leaves a directory that looks
valid. The source checkpoint is never written to.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import CheckpointError, ExportError, TTSError
from ttscore.contract.manifest import MANIFEST, MANIFEST_FORMAT
from ttscore.runtime.families.qwen3_tts.checkpoint import CheckpointInfo, read_checkpoint
from ttscore.runtime.families.qwen3_tts.tokenizer import TOKENIZER_FILES
from ttscore.runtime.weights import checkpoint_fingerprint, file_digest

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "int8", "int4")
# Quantized precisions: the graphs whose constant-weight MatMuls are quantized, each checked against
# its fp32 export (the error is reported per graph in the manifest, `validation.vs_fp32`).
QUANTIZED_GRAPHS = ("talker", "code_predictor", "code2wav_stream")
# The vocoder keeps a quantized graph only while its audio stays within
# export.common.VOCODER_MIN_SNR_DB of fp32's; otherwise it stays fp32 and the manifest says why.

# Progress hook: (stage number from 1, number of stages, what the stage does), called as each starts.
ExportProgress = Callable[[int, int, str], None]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(checkpoint: Path, memo: dict[str, str] | None = None) -> str:
    """Identity of a checkpoint's files by content, for export caches (ttscore.runtime.weights)."""
    return checkpoint_fingerprint(checkpoint, memo)


def source_record(src: Path) -> dict[str, Any]:
    """The manifest's `source`: path, fingerprint and every file's checksum."""
    memo: dict[str, str] = {}
    files = {}
    for p in sorted(src.rglob("*")):
        if p.is_file():
            files[str(p.relative_to(src))] = {"sha256": file_digest(p, memo), "bytes": p.stat().st_size}
    return {"path": str(src), "fingerprint": fingerprint(src, memo), "files": files}


def graph_specs(info: CheckpointInfo, state_size: int | None = None) -> dict[str, spec.GraphSpec]:
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


def export_checkpoint(
    checkpoint: str | Path, out: str | Path, *, precision: str = "fp32", device: str = "cpu",
    progress: ExportProgress | None = None,
) -> dict[str, Any]:
    """Export + validate. Returns the manifest. Raises CheckpointError / ExportError.
    `progress` is told of each stage as it starts."""
    if precision not in PRECISIONS:
        raise ExportError(f"precision must be one of {', '.join(PRECISIONS)} on this build, got {precision!r}")
    if device != "cpu":
        raise ExportError("TensorRT engines are built on a GPU host (device=gpu); this machine has none")
    src = Path(checkpoint).resolve()
    dst = Path(out).resolve()
    from ttscore.runtime.families.voxcpm2 import checkpoint as voxcpm2_checkpoint

    # The checkpoint's config.json decides the family (the one dispatch point of export).
    voxcpm2_info = voxcpm2_checkpoint.read_checkpoint(src) if voxcpm2_checkpoint.is_voxcpm2(src) else None
    info = read_checkpoint(src) if voxcpm2_info is None else None
    if dst == src or src in dst.parents:
        raise ExportError("the output directory must not be inside the source checkpoint")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    started = time.time()
    try:
        if voxcpm2_info is not None:
            from .voxcpm2.exporter import export_voxcpm2

            manifest = export_voxcpm2(src, tmp, voxcpm2_info, precision, progress, source_record(src))
        else:
            assert info is not None
            manifest = _export_into(src, tmp, info, precision, progress)
        manifest["export_seconds"] = round(time.time() - started, 1)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
        if dst.exists():
            old = dst.parent / f".{dst.name}.old-{os.getpid()}"
            dst.rename(old)
            tmp.rename(dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dst)
        return manifest
    except TTSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # every failure becomes a typed export error
        shutil.rmtree(tmp, ignore_errors=True)
        logger.exception("export failed")
        raise ExportError(f"export failed: {type(exc).__name__}: {exc}") from exc


def _quantize(model: Any, path: Path, graph: str, precision: str) -> dict[str, Any]:
    """Quantize one validated fp32 graph (export.common.quantize_graph); returns the manifest fields
    `quantized` and `vs_fp32`. `model` is the reference model (only its configs are read: the
    weights may stay on the meta device)."""
    from .common import quantize_graph
    from .talker import validate_int8

    if graph == "code2wav_stream":
        return quantize_graph(path, precision, compare_vocoder, audio=True)
    return quantize_graph(path, precision, lambda fp32, q: validate_int8(model, fp32, q))


def compare_vocoder(fp32_path: Path, quant_path: Path, *, seed: int = 0) -> dict[str, Any]:
    """Streamed decode of random codes (two chunks, state carried) by both graphs: audio error."""
    import numpy as np

    from .common import ort_session, snr_db

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


def _export_into(src: Path, tmp: Path, info: CheckpointInfo, precision: str,
                 progress: ExportProgress | None = None) -> dict[str, Any]:
    """Every graph, one stage at a time, each holding only the weights it needs (see export.memory)."""
    import onnx
    import onnxruntime
    import torch

    from .memory import MemoryMonitor
    from .reference import StagedReference

    stages = ["loading the checkpoint", "talker", "code predictor", "embedding tables", "code2wav"]
    stages += ["speaker and speech encoders"] if info.variant == "base" else []
    stages += [f"{precision} quantization"] if precision != "fp32" else []
    stages += ["manifest"]

    def stage(label: str) -> None:
        logger.info("export stage: %s", label)
        if progress is not None:
            progress(stages.index(label) + 1, len(stages), label)

    torch.manual_seed(0)
    reports: dict[str, Any] = {}
    with MemoryMonitor() as mon:
        stage("loading the checkpoint")
        with mon.stage("load"):
            try:
                ref = StagedReference(src)
            except TTSError:
                raise
            except Exception as exc:
                raise CheckpointError(f"cannot load {src} with the reference implementation: {exc}") from exc
        stage("talker")
        with mon.stage("talker"):
            reports["talker"] = _talker_stage(ref, tmp)
        stage("code predictor")
        with mon.stage("code_predictor"):
            reports["code_predictor"] = _code_predictor_stage(ref, tmp)
        stage("embedding tables")
        with mon.stage("tables"):
            reports["tables"] = _tables_stage(ref, tmp)
        stage("code2wav")
        with mon.stage("code2wav"):
            c2w = _code2wav_stage(ref, tmp)
        # One report validates both graphs (offline vs reference, streaming vs offline and reference).
        reports["code2wav_stream"] = reports["code2wav"] = c2w
        state_size = int(c2w["state_size"])
        if info.variant == "base":
            stage("speaker and speech encoders")
            with mon.stage("speaker_encoder"):
                reports["speaker_encoder"] = _speaker_encoder_stage(ref, tmp)
            with mon.stage("speech_encoder"):
                reports["speech_encoder"] = _speech_encoder_stage(ref, tmp)

        specs = graph_specs(info, state_size)
        if precision != "fp32":
            stage(f"{precision} quantization")
            for name in QUANTIZED_GRAPHS:
                with mon.stage(f"{precision}_{name}"):
                    reports[name] = {**reports[name], **_quantize(ref.model, tmp / specs[name].filename, name, precision)}
    memory = mon.summary()

    stage("manifest")
    tok_dir = tmp / "tokenizer"
    tok_dir.mkdir()
    for name in TOKENIZER_FILES:
        shutil.copy2(src / name, tok_dir / name)

    configs = {
        "config.json": json.loads((src / "config.json").read_text(encoding="utf-8")),
        "generation_config.json": json.loads((src / "generation_config.json").read_text(encoding="utf-8")),
        "speech_tokenizer/config.json": json.loads(
            (src / "speech_tokenizer" / "config.json").read_text(encoding="utf-8")
        ),
    }
    graphs: dict[str, Any] = {}
    for name, gspec in specs.items():
        entry = gspec.to_json()
        entry["validation"] = reports.get(name, {})
        if not (tmp / gspec.filename).is_file():
            raise ExportError(f"export produced no {gspec.filename}")
        graphs[name] = entry

    return {
        "format_version": MANIFEST_FORMAT,
        "family": "qwen3_tts",
        "source": source_record(src),
        "variant": info.variant,
        "model_size": info.model_size,
        "precision": precision,
        "device": "cpu",
        "sizes": {
            "talker": info.talker.__dict__,
            "code_predictor": info.code_predictor.__dict__,
            "codec_vocab_size": info.codec_vocab_size,
            "codebook_size": info.codebook_size,
            "num_code_groups": info.num_code_groups,
            "text_vocab_size": info.text_vocab_size,
        },
        "special_text_ids": info.special_text_ids,
        "codec_ids": info.codec_ids,
        "speakers": info.speakers,
        "speaker_dialects": info.speaker_dialects,
        "languages": info.supported_languages,
        "sample_rate": info.sample_rate,
        "samples_per_frame": info.samples_per_frame,
        "code2wav": {"state_size": state_size, "state_layout": c2w["state_layout"]},
        "export": memory,
        "graphs": graphs,
        "tables": reports.get("tables", {}),
        "configs": configs,
        "versions": {
            "onnx_opset": 18,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }


# Each stage is a function so that every reference to its weights (wrappers, state dicts, the
# speech tokenizer) is gone when it returns and the next stage starts without them.


def _talker_stage(ref: Any, tmp: Path) -> dict[str, Any]:
    from .memory import release_memory
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
