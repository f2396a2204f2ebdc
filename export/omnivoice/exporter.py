"""OmniVoice checkpoint -> generator.onnx + codec_decoder.onnx (+ codec_encoder.onnx when the audio
tokenizer has its encoder side) + manifest.json, each graph checked against the reference
(`omnivoice==0.2.1` forward; the Higgs codec over transformers' DacModel and HubertModel) through
export/tracing.py.s helper stack; `--precision int8|int4` quantizes the graphs of `QUANTIZED` after, each
measured against its fp32 form (export.quantize.quantize_graph)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from export.family import ExportProgress
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph
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
# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.quantize_graph),
# each measured against its fp32 export (`vs_fp32`): the generator (the cost: a full bidirectional pass per
# unmasking step, 32 steps over cond + uncond rows), its logits' SNR and how many argmax codes change; the codec
# decoder keeps its quantized form only at VOCODER_MIN_SNR_DB or more. codec_encoder stays fp32: its output is
# argmax codes (the nearest codebook entry), which a quantized encoder would change for a reference clip (the
# cloning prompt), and it runs once per clip, not per step.
QUANTIZED = (contract.GENERATOR.name, contract.CODEC_DECODER.name)
ENCODER_KEPT = "fp32 (its output is argmax codes, which quantization would change for a reference clip)"


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


def _quant_feeds(graph: str, validation_feeds: dict[str, np.ndarray], seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Inputs for comparing a quantized graph with its fp32 form. generator: the export's validation batch (two
    prompts, cond and uncond rows, right padding: the first unmasking step) and the same batch with half of its
    masked codes filled with random codes (a later step). codec_decoder: random codes, one and two rows."""
    rng = np.random.default_rng(seed)
    if graph == contract.CODEC_DECODER.name:
        return [{"codes": rng.integers(0, contract.CODEBOOK_SIZE, (b, contract.NUM_CODEBOOKS, n))}
                for b, n in ((1, 12), (2, 7))]
    ids = validation_feeds["input_ids"].copy()
    fill = (ids == contract.MASK_ID) & (rng.random(ids.shape) < 0.5)
    ids[fill] = rng.integers(0, contract.CODEBOOK_SIZE, int(fill.sum()))
    return [validation_feeds, {**validation_feeds, "input_ids": ids}]


def _quantize(path: Path, graph: str, precision: str, validation_feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    feeds = _quant_feeds(graph, validation_feeds)
    logits = ("logits",) if graph == contract.GENERATOR.name else ()
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds, argmax=logits),
                          audio=graph == contract.CODEC_DECODER.name)


def export_omnivoice(src: Path, tmp: Path, precision: str, progress: ExportProgress | None,
                     source: dict[str, Any]) -> dict[str, Any]:
    import torch
    from safetensors import safe_open

    from export.omnivoice.codec import Codec, has_encoder
    from export.omnivoice.graphs import CodecDecoderGraph, CodecEncoderGraph, Generator
    from export.omnivoice.reference import language_ids, load_reference, reference_batch, reference_logits

    fp32_int8_int4(contract.RULES.name, precision)
    info = read_checkpoint(src)
    tmp = Path(tmp)
    graphs = {contract.GENERATOR.name: contract.GENERATOR, contract.CODEC_DECODER.name: contract.CODEC_DECODER}
    with safe_open(str(src / CODEC_DIR / "model.safetensors"), "pt") as f:
        encoder = has_encoder(f.keys())
    stages = ["generator graph", "codec decoder graph", *(["codec encoder graph"] if encoder else [])]
    with torch_threads(), StageRunner(stages, progress, precision, family=contract.FAMILY, source=source) as run:
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
            generator_feeds = {k: v.numpy() for k, v in feeds.items()}
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
        run.quantize(QUANTIZED, lambda name: _quantize(tmp / graphs[name].filename, name, precision, generator_feeds))
        if precision != "fp32" and encoder:
            validation[contract.CODEC_ENCODER.name].update(quantized=None, vs_fp32={"kept": ENCODER_KEPT})
    copy_files(src, tmp, TOKENIZER_FILES)
    return run.manifest(
        tmp, model_size=source.get("model_size", "custom"), sizes=info.to_json(), sample_rate=info.sample_rate,
        samples_per_frame=info.hop, vocoder_state_size=1, vocoder_state_layout=[["whole_utterance", 1]],
        graphs=graphs,
        tables={LANGUAGE_TABLE: language_ids()}, configs=json_configs(src, CONFIG, f"{CODEC_DIR}/{CONFIG}"),
    )
