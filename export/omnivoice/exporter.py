"""OmniVoice checkpoint -> generator.onnx + codec_decoder.onnx (+ codec_encoder.onnx when the audio
tokenizer has its encoder side) + manifest.json, each graph checked against the reference
(`omnivoice==0.2.1` forward; the Higgs codec over transformers' DacModel and HubertModel) through
export/tracing.py.s helper stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from export.family import ExportProgress
from export.quantize import only_fp32
from export.stages import StageRunner, copy_files, json_configs
from export.tracing import (
    check_relative,
    export_bound,
    export_inline,
    ort_run,
    ort_session,
    torch_threads,
    validation_audio,
)
from ttscore.contract import omnivoice as contract
from ttscore.contract.errors import ExportError
from ttscore.runtime.families.omnivoice.checkpoint import (
    CODEC_DIR,
    CONFIG,
    LANGUAGE_TABLE,
    TOKENIZER_FILES,
    read_checkpoint,
)

GENERATOR_RTOL = 1e-4  # logits: max |diff| / max(1, max |reference|)
CODEC_RTOL = 5e-4  # audio: max |diff| / max(1, max |reference|) (measured 1.8e-5 tiny, 9.7e-5 real size)
# codec_encoder: codes must equal the torch modules' (an argmin over the codebook); clips of these many frames.
ENCODER_CLIPS = (7, 26)


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


def _export_encoder(codec: Any, graph: Any, tmp: Path) -> dict[str, Any]:
    """Export the codec encoder and check its codes equal the torch modules' on clips of several
    lengths (the graph is traced on the first): the report counts the codes that differ (must be 0)."""
    import torch

    clips = [validation_audio(n * contract.HOP / contract.SAMPLE_RATE, 10 + i, contract.SAMPLE_RATE)
             for i, n in enumerate(ENCODER_CLIPS)]
    path = export_inline(graph, (torch.from_numpy(clips[0]),), contract.CODEC_ENCODER, tmp)
    session = ort_session(path)
    mismatched = 0
    for clip in clips:
        with torch.no_grad():
            want = codec.encode_codes(torch.from_numpy(clip)[None, None])[0].numpy()
        (got,) = ort_run(session, {"audio": clip})
        if got.shape != want.shape or got.dtype != np.int64:
            raise ExportError(f"codec_encoder: codes {got.dtype} {got.shape}, want int64 {want.shape}")
        mismatched += int((got != want).sum())
    if mismatched:
        raise ExportError(f"codec_encoder: {mismatched} codes differ from the torch modules' on clips of "
                          f"{ENCODER_CLIPS} frames")
    return {"mismatched_codes": {"codes": mismatched}, "clip_frames": list(ENCODER_CLIPS)}


def export_omnivoice(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
                     source: dict[str, Any]) -> dict[str, Any]:
    import torch
    from safetensors import safe_open

    from export.omnivoice.codec import Codec, has_encoder
    from export.omnivoice.graphs import CodecDecoderGraph, CodecEncoderGraph, Generator
    from export.omnivoice.reference import language_ids, load_reference, reference_batch, reference_logits

    only_fp32(contract.RULES.name, precision)
    info = read_checkpoint(src)
    tmp = Path(tmp)
    graphs = {contract.GENERATOR.name: contract.GENERATOR, contract.CODEC_DECODER.name: contract.CODEC_DECODER}
    with safe_open(str(src / CODEC_DIR / "model.safetensors"), "pt") as f:
        encoder = has_encoder(f.keys())
    stages = ["generator graph", "codec decoder graph", *(["codec encoder graph"] if encoder else [])]
    with torch_threads(), StageRunner(stages, progress, family=contract.FAMILY, source=source) as run:
        validation = run.reports
        with run.stage("generator graph", "generator"):
            model = load_reference(src)
            gen = Generator(model).eval()
            batch = reference_batch(model, validation_items())
            feeds = {k: batch[k] for k in contract.GENERATOR.input_names}
            path = export_bound(gen, tuple(feeds.values()), contract.GENERATOR, tmp)
            want = reference_logits(model, batch).numpy()
            (got,) = ort_run(ort_session(path), {k: v.numpy() for k, v in feeds.items()})
            validation[contract.GENERATOR.name] = check_relative("logits", got, want, GENERATOR_RTOL)
            del model, gen
        with run.stage("codec decoder graph", "codec_decoder"):
            codec = Codec(src / CODEC_DIR)  # strict: the encoder side too when there is one
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
            validation[contract.CODEC_DECODER.name] = check_relative("audio", audio, want_audio, CODEC_RTOL)
            del graph
        if encoder:
            with run.stage("codec encoder graph", "codec_encoder"):
                validation[contract.CODEC_ENCODER.name] = _export_encoder(codec, CodecEncoderGraph(codec).eval(), tmp)
            graphs[contract.CODEC_ENCODER.name] = contract.CODEC_ENCODER
        del codec
    copy_files(src, tmp, TOKENIZER_FILES)
    return run.manifest(
        tmp, model_size=source.get("model_size", "custom"), sizes=info.to_json(), sample_rate=info.sample_rate,
        samples_per_frame=info.hop, vocoder_state_size=1, vocoder_state_layout=[["whole_utterance", 1]],
        graphs=graphs,
        tables={LANGUAGE_TABLE: language_ids()}, configs=json_configs(src, CONFIG, f"{CODEC_DIR}/{CONFIG}"),
    )
