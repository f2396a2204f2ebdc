"""OmniVoice: make-tiny writes the released layout (the reference loads it strictly), and export
validates the generator and codec decoder graphs against the reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_tiny, omnivoice_artifacts)

from ttscore.contract import omnivoice as spec
from ttscore.contract.errors import CheckpointError, InvalidRequest
from ttscore.contract.manifest import read_manifest

pytestmark = [pytest.mark.export, pytest.mark.slow]


def test_tiny_layout_loads_strictly_in_the_reference(omnivoice_tiny: Path) -> None:
    from safetensors import safe_open

    from export.families import family_of
    from export.omnivoice.codec import Codec
    from export.omnivoice.reference import load_reference

    assert family_of(omnivoice_tiny).name == spec.FAMILY
    cfg = json.loads((omnivoice_tiny / "config.json").read_text())
    assert cfg["model_type"] == "omnivoice" and cfg["llm_config"]["model_type"] == "qwen3"
    with safe_open(str(omnivoice_tiny / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert {"audio_embeddings.weight", "audio_heads.weight", "codebook_layer_offsets",
            "llm.embed_tokens.weight", "llm.norm.weight", "llm.layers.0.self_attn.q_norm.weight"} <= names
    model = load_reference(omnivoice_tiny)  # strict: a missing or unexpected tensor raises
    ids = model.text_tokenizer("".join(spec.SPECIAL_TOKENS), add_special_tokens=False).input_ids
    assert len(ids) == len(spec.SPECIAL_TOKENS) and all(i >= spec.AUDIO_VOCAB for i in ids)
    codec = Codec(omnivoice_tiny / "audio_tokenizer")  # strict too
    assert codec.config.frame_rate == spec.SAMPLE_RATE // spec.HOP
    with safe_open(str(omnivoice_tiny / "audio_tokenizer" / "model.safetensors"), "pt") as f:
        codec_names = set(f.keys())
    assert "quantizer.quantizers.7.codebook.embed" in codec_names and "fc2.weight" in codec_names
    assert any(n.startswith("acoustic_decoder.block.4.conv_t1") for n in codec_names)
    # the encoder side, named as HiggsAudioV2TokenizerModel's tensors
    assert codec.has_encoder
    assert {"fc.weight", "fc1.weight", "quantizer.quantizers.0.project_in.weight", "acoustic_encoder.conv1.weight",
            "encoder_semantic.conv.weight", "decoder_semantic.conv2.weight",
            "semantic_model.feature_extractor.conv_layers.0.layer_norm.weight",
            "semantic_model.encoder.pos_conv_embed.conv.parametrizations.weight.original0"} <= codec_names


def test_legacy_weight_norm_names_load_too(omnivoice_tiny: Path, tmp_path: Path) -> None:
    """HuBERT's positional conv saved as weight_g / weight_v (torch's legacy weight-norm names) loads as
    transformers 5.x loads it (renamed to parametrizations.weight.original0 / original1)."""
    import shutil

    import refenv
    import torch
    from safetensors.torch import load_file, save_file

    from export.omnivoice.codec import Codec

    shutil.copytree(omnivoice_tiny / "audio_tokenizer", tmp_path / "tok")
    tensors = load_file(str(tmp_path / "tok" / "model.safetensors"))
    prefix = "semantic_model.encoder.pos_conv_embed.conv."
    tensors[prefix + "weight_g"] = tensors.pop(prefix + "parametrizations.weight.original0")
    tensors[prefix + "weight_v"] = tensors.pop(prefix + "parametrizations.weight.original1")
    save_file(tensors, str(tmp_path / "tok" / "model.safetensors"))
    audio = torch.from_numpy(np.sin(np.arange(5 * spec.HOP, dtype=np.float32) / 7))[None, None]
    want = Codec(omnivoice_tiny / "audio_tokenizer").encode(audio).audio_codes
    torch.testing.assert_close(Codec(tmp_path / "tok").encode(audio).audio_codes, want, rtol=0, atol=0)
    refenv.run(refenv.env_for(spec.FAMILY), refenv.TESTS / "omnivoice_codec_ref5.py", {}, [str(tmp_path / "tok"), "load"])


def test_tiny_codec_loads_strictly_in_transformers_5(omnivoice_tiny: Path) -> None:
    """transformers 5.14's HiggsAudioV2TokenizerModel.from_pretrained reports no missing, unexpected or
    mismatched tensor (the script raises otherwise) and holds exactly the checkpoint's tensors."""
    import refenv
    from safetensors import safe_open

    out = refenv.run(refenv.env_for(spec.FAMILY), refenv.TESTS / "omnivoice_codec_ref5.py", {},
                     [str(omnivoice_tiny / "audio_tokenizer"), "load"])
    with safe_open(str(omnivoice_tiny / "audio_tokenizer" / "model.safetensors"), "pt") as f:
        assert int(out["tensors"]) == len(list(f.keys()))


def test_check_refuses_an_incomplete_checkpoint(omnivoice_tiny: Path, tmp_path: Path) -> None:
    from export.omnivoice.family import FAMILY

    (tmp_path / "config.json").write_text((omnivoice_tiny / "config.json").read_text())
    with pytest.raises(CheckpointError, match="missing: model.safetensors"):
        FAMILY.check(tmp_path)


def test_export_manifest_and_validation(omnivoice_artifacts: Path) -> None:
    m = read_manifest(omnivoice_artifacts)
    assert m.family == spec.FAMILY and m.sample_rate == spec.SAMPLE_RATE and m.samples_per_frame == spec.HOP
    assert set(m.graphs) == {spec.GENERATOR.name, spec.CODEC_DECODER.name, spec.CODEC_ENCODER.name}
    for name in (spec.GENERATOR.name, spec.CODEC_DECODER.name):
        errors = m.graphs[name]["validation"]["max_rel_error"]  # |diff| / max(1, peak of the reference)
        assert errors and max(errors.values()) <= 1e-4, (name, errors)  # measured <= ~2e-5
    # the encoder's codes equal the torch modules' on every validation clip
    assert m.graphs[spec.CODEC_ENCODER.name]["validation"]["mismatched_codes"] == {"codes": 0}
    for entry in m.graphs.values():
        assert (omnivoice_artifacts / entry["file"]).is_file()
    assert (omnivoice_artifacts / "tokenizer.json").is_file()


def test_generator_graph_takes_any_batch_and_length(omnivoice_tiny: Path, omnivoice_artifacts: Path) -> None:
    """Three prompts (none, a reference clip's codes, voice design) padded into one batch: the graph
    equals the reference forward at every target position."""
    import torch

    from export.omnivoice.reference import load_reference, reference_batch, reference_logits
    from export.tracing import ort_run, ort_session

    model = load_reference(omnivoice_tiny)
    ref = torch.from_numpy(np.random.default_rng(3).integers(0, 1024, (8, 11)))
    items = [{"text": "how are you today", "target_len": 20},
             {"text": "hi", "target_len": 3, "ref_text": "speech synthesis", "ref_codes": ref},
             {"text": "the lazy dog", "target_len": 12, "instruct": "male, british accent", "lang": "en"}]
    batch = reference_batch(model, items)
    feeds = {k: batch[k].numpy() for k in spec.GENERATOR.input_names}
    (got,) = ort_run(ort_session(omnivoice_artifacts / spec.GENERATOR.filename), feeds)
    want = reference_logits(model, batch).numpy()
    for row, t in enumerate(batch["t_lens"] * 2):
        np.testing.assert_allclose(got[row, :, :t], want[row, :, :t], atol=1e-4, rtol=1e-4)


def test_a_decoder_only_audio_tokenizer_exports_and_cloning_from_audio_is_refused(omnivoice_tiny: Path,
                                                                                   tmp_path: Path) -> None:
    """A checkpoint whose audio_tokenizer/ has only the decoder side (as this project's make-tiny wrote
    before) still exports, without a codec_encoder graph; cloning from audio then says why."""
    import shutil

    import soundfile as sf
    from safetensors.torch import load_file, save_file

    from export.exporter import export_checkpoint
    from export.omnivoice.codec import has_encoder
    from ttscore.runtime.families.omnivoice.offline import OFFLINE
    from ttscore.runtime.family import SayOptions

    ckpt = tmp_path / "ckpt"
    shutil.copytree(omnivoice_tiny, ckpt)
    tensors = load_file(str(ckpt / "audio_tokenizer" / "model.safetensors"))
    decoder = {k: v for k, v in tensors.items() if not has_encoder([k])}
    assert len(decoder) < len(tensors) and "fc2.weight" in decoder
    save_file(decoder, str(ckpt / "audio_tokenizer" / "model.safetensors"))
    export_checkpoint(ckpt, tmp_path / "art")
    m = read_manifest(tmp_path / "art")
    assert set(m.graphs) == {spec.GENERATOR.name, spec.CODEC_DECODER.name}
    sf.write(tmp_path / "ref.wav", (0.3 * np.sin(np.arange(24000) / 5)).astype(np.float32), 24000)
    with pytest.raises(InvalidRequest, match="needs the codec encoder") as info:
        OFFLINE.say(tmp_path / "art", SayOptions(text="hello", ref_audio=str(tmp_path / "ref.wav")))
    assert info.value.param == "ref_audio"


def test_int8_export_is_measured_against_fp32(omnivoice_tiny: Path, tmp_path: Path) -> None:
    """--precision int8: the generator quantized, its logits' SNR and changed argmax codes measured against the
    fp32 graph; codec_decoder quantized only at the audio bar; codec_encoder stays fp32 (argmax codes) and the
    manifest says why; the int8 export synthesizes offline, one estimated utterance of audio."""
    from export.exporter import export_checkpoint
    from export.quantize import quantized_ops
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.omnivoice.offline import OFFLINE
    from ttscore.runtime.family import SayOptions

    out = tmp_path / "int8"
    export_checkpoint(omnivoice_tiny, out, precision="int8")
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["precision"] == "int8"
    gen = raw["graphs"][spec.GENERATOR.name]["validation"]
    assert gen["quantized"].startswith("int8") and gen["vs_fp32"]["snr_db"] > 20
    changed, positions = gen["vs_fp32"]["argmax_changed"]["logits"]
    assert positions > 0 and changed < 0.2 * positions
    assert quantized_ops(out / spec.GENERATOR.filename) == {"MatMulInteger"}
    dec = raw["graphs"][spec.CODEC_DECODER.name]["validation"]
    assert "snr_db" in dec["vs_fp32"] and (dec["quantized"] is not None) == (dec["vs_fp32"]["snr_db"] >= 30)
    assert bool(quantized_ops(out / spec.CODEC_DECODER.filename)) == (dec["quantized"] is not None)
    enc = raw["graphs"][spec.CODEC_ENCODER.name]["validation"]
    assert enc["quantized"] is None and "argmax codes" in enc["vs_fp32"]["kept"]
    assert not quantized_ops(out / spec.CODEC_ENCODER.filename)
    text = "Quantized speech, measured."
    job = OFFLINE.say(out, SayOptions(text=text, seed=1))
    events = list(Generator(job.model).synthesize(job.request))
    frames = sum(e.frames for e in events)
    pcm = np.concatenate([e.pcm for e in events])
    assert frames == spec.checked_frames(text, None, None, 1.0, None)
    assert pcm.shape == (frames * spec.HOP,) and np.isfinite(pcm).all() and np.abs(pcm).max() > 0
