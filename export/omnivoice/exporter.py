"""OmniVoice checkpoint -> generator.onnx + codec_decoder.onnx + manifest.json, each graph checked
against the reference (`omnivoice==0.2.1` forward; the Higgs codec decoder over transformers' DacModel)
through export/common's helper stack."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from export.common import (
    check_close,
    export_bound,
    export_inline,
    max_abs,
    ort_run,
    ort_session,
    torch_threads,
    versions,
)
from export.family import ExportProgress
from export.memory import MemoryMonitor
from ttscore.contract import omnivoice as contract
from ttscore.contract.errors import ExportError
from ttscore.contract.manifest import build_manifest
from ttscore.runtime.families.omnivoice.checkpoint import (
    CODEC_DIR,
    CONFIG,
    LANGUAGE_TABLE,
    TOKENIZER_FILES,
    read_checkpoint,
)

GENERATOR_RTOL = 1e-4  # logits: max |diff| / max(1, max |reference|)
CODEC_RTOL = 5e-4  # audio: max |diff| / max(1, max |reference|) (measured 1.8e-5 tiny, 9.7e-5 real size)


def _check_rel(what: str, got: Any, want: Any, rtol: float) -> dict[str, dict[str, float]]:
    """max |got - want| / max(1, max |want|) <= rtol (ExportError otherwise); the validation report:
    that relative error and the absolute one."""
    want = np.asarray(want, dtype=np.float32)
    got = np.asarray(got, dtype=np.float32)
    scale = max(1.0, float(np.abs(want).max()))
    rel = check_close(what, got / scale, want / scale, rtol)
    return {"max_rel_error": {what: rel}, "max_abs_error": {what: max_abs(got, want)}}


def validation_items() -> list[dict[str, Any]]:
    """Two prompts of different lengths: auto voice, and voice design with a reference clip's codes."""
    import torch

    rng = np.random.default_rng(0)
    ref = torch.from_numpy(rng.integers(0, contract.CODEBOOK_SIZE, (contract.NUM_CODEBOOKS, 6)))
    return [
        {"text": "hello world", "target_len": 9},
        {"text": "the quick brown fox", "target_len": 14, "ref_text": "nice to meet you", "ref_codes": ref,
         "lang": "en", "instruct": "female, low pitch"},
    ]


def export_omnivoice(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
                     source: dict[str, Any]) -> dict[str, Any]:
    import torch

    from export.omnivoice.graphs import CodecDecoderGraph, Generator
    from export.omnivoice.reference import CodecDecoder, load_reference, reference_batch, reference_logits

    if precision != "fp32":
        raise ExportError(f"{contract.RULES.name} exports fp32 only for now, not {precision}")
    info = read_checkpoint(src)
    tmp = Path(tmp)
    validation: dict[str, dict[str, Any]] = {}
    with torch_threads(), MemoryMonitor() as mon:
        if progress:
            progress(1, 3, "generator graph")
        with mon.stage("generator"):
            model = load_reference(src)
            gen = Generator(model).eval()
            batch = reference_batch(model, validation_items())
            feeds = {k: batch[k] for k in contract.GENERATOR.input_names}
            path = export_bound(gen, tuple(feeds.values()), contract.GENERATOR, tmp)
            want = reference_logits(model, batch).numpy()
            (got,) = ort_run(ort_session(path), {k: v.numpy() for k, v in feeds.items()})
            validation[contract.GENERATOR.name] = _check_rel("logits", got, want, GENERATOR_RTOL)
            del model, gen
        if progress:
            progress(2, 3, "codec decoder graph")
        with mon.stage("codec_decoder"):
            codec = CodecDecoder(src / CODEC_DIR)
            graph = CodecDecoderGraph(codec).eval()
            rng = np.random.default_rng(1)
            codes = torch.from_numpy(rng.integers(0, contract.CODEBOOK_SIZE, (2, contract.NUM_CODEBOOKS, 7)))
            path = export_inline(graph, (codes,), contract.CODEC_DECODER, tmp)
            codes = torch.from_numpy(rng.integers(0, contract.CODEBOOK_SIZE, (1, contract.NUM_CODEBOOKS, 12)))
            with torch.no_grad():
                want_audio = codec.decode_audio(codes).numpy()
            (audio,) = ort_run(ort_session(path), {"codes": codes.numpy()})
            if audio.shape != (1, 1, 12 * info.hop):
                raise ExportError(f"codec_decoder: audio shape {audio.shape}, want (1, 1, {12 * info.hop})")
            validation[contract.CODEC_DECODER.name] = _check_rel("audio", audio, want_audio, CODEC_RTOL)
            del codec, graph
    memory = mon.summary()
    if progress:
        progress(3, 3, "manifest")
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    from export.omnivoice.reference import language_ids

    config = json.loads((src / CONFIG).read_text(encoding="utf-8"))
    codec_config = json.loads((src / CODEC_DIR / CONFIG).read_text(encoding="utf-8"))
    return build_manifest(
        tmp, family=contract.FAMILY, variant="base", model_size=source.get("model_size", "custom"),
        precision=precision, source=source, sizes=info.to_json(), sample_rate=info.sample_rate,
        samples_per_frame=info.hop, vocoder_state_size=1, vocoder_state_layout=[["whole_utterance", 1]],
        graphs={contract.GENERATOR.name: contract.GENERATOR, contract.CODEC_DECODER.name: contract.CODEC_DECODER},
        validation=validation, tables={LANGUAGE_TABLE: language_ids()}, configs={CONFIG: config, f"{CODEC_DIR}/{CONFIG}": codec_config}, memory=memory,
        versions=versions(),
    )
