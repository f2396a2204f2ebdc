"""An OmniVoice checkpoint the project did not make: built with the reference's own classes and
init (OmniVoiceConfig + transformers' Qwen3Config, OmniVoice(config).save_pretrained), dimensions
and a tokenizer unlike make-tiny's (special tokens first, another vocabulary), and a codec of other
dimensions with torch's and transformers' default init (its encoder side too). It exports, and the
runtime's codes equal the reference's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ttscore.contract import omnivoice as spec

pytestmark = [pytest.mark.export, pytest.mark.parity, pytest.mark.slow]

CODEC = {
    "model_type": "higgs_audio_v2_tokenizer", "sample_rate": 24000, "target_bandwidths": [0.5, 1, 1.5, 2],
    "codebook_size": 1024, "codebook_dim": 6,
    "acoustic_model_config": {"model_type": "dac", "encoder_hidden_size": 4, "downsampling_ratios": [8, 5, 4, 2, 3],
                              "decoder_hidden_size": 48, "upsampling_ratios": [8, 5, 4, 2, 3], "hidden_size": 12},
    "semantic_model_config": {"model_type": "hubert", "hidden_size": 20, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "intermediate_size": 24, "conv_dim": [6, 6, 6, 6, 6, 6, 6], "num_conv_pos_embeddings": 8,
                              "num_conv_pos_embedding_groups": 2},
}


def _tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec.SPECIAL_TOKENS])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=list(spec.SPECIAL_TOKENS))
    tok.train_from_iterator(["pack my box with five dozen liquor jugs " * 3, "sphinx of black quartz judge my vow"],
                            trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config

    from export.omnivoice.codec import codec_modules
    from export.omnivoice.reference import omnivoice_module

    mod = omnivoice_module()
    out = tmp_path_factory.mktemp("omnivoice-foreign") / "ckpt"
    llm = Qwen3Config(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
                      num_key_value_heads=3, head_dim=8, vocab_size=1100, rope_theta=10000.0)
    torch.manual_seed(7)
    model = mod.OmniVoice(mod.OmniVoiceConfig(llm_config=llm))
    with torch.no_grad():  # trained weights are far from the 0.02 init: make positions and logits matter
        for module in model.llm.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0, module.in_features ** -0.5)
        model.audio_heads.weight.normal_(0, 0.5)
        model.audio_embeddings.weight.normal_(0, 1.0)
    model.save_pretrained(str(out))
    _tokenizer(out, 1100)
    codec = codec_modules(CODEC, encoder=True)  # every tensor of HiggsAudioV2TokenizerModel, transformers' init
    with torch.no_grad():
        for q in codec.quantizer.quantizers:
            q.codebook.embed.normal_()
    (out / "audio_tokenizer").mkdir()
    (out / "audio_tokenizer" / "config.json").write_text(json.dumps(CODEC))
    (out / "audio_tokenizer" / "preprocessor_config.json").write_text(json.dumps(
        {"feature_extractor_type": "DacFeatureExtractor", "feature_size": 1, "hop_length": 960, "sampling_rate": 24000}))
    save_file({k: v.contiguous() for k, v in codec.state_dict().items()}, str(out / "audio_tokenizer" / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def foreign_artifacts(foreign: Path) -> Path:
    from export.exporter import export_checkpoint

    out = foreign.parent / "art"
    export_checkpoint(foreign, out)
    return out


def test_foreign_checkpoint_exports_and_matches_the_reference(foreign: Path, foreign_artifacts: Path) -> None:
    import torch

    from export.omnivoice.reference import load_reference, omnivoice_module
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

    ours = load_model(foreign_artifacts)
    assert ours.info.hidden_size == 48 and ours.info.num_layers == 3
    ref = load_reference(foreign)
    mod = omnivoice_module()
    text, instruct = "pack my box, judge my vow.", "elderly, high pitch"
    config = mod.OmniVoiceGenerationConfig(num_step=6, position_temperature=0.0, class_temperature=0.0)
    with torch.no_grad():
        want = ref._generate_iterative(ref._preprocess_all(text=[text], instruct=[instruct]), config)[0].numpy()
    (ev,) = list(Generator(ours).synthesize(OmniVoiceRequest(text=text, instructions=instruct, num_step=6,
                                                             position_temperature=0.0, class_temperature=0.0)))
    assert ev.codes is not None
    assert len(np.unique(want)) > 20  # not a degenerate utterance
    np.testing.assert_array_equal(ev.codes.T, want)
    with torch.no_grad():
        audio: Any = ref.audio_tokenizer.decode(torch.from_numpy(want)[None]).audio_values[0, 0].numpy()
    assert np.abs(ev.pcm - audio).max() <= 1e-4 * np.abs(audio).max()


def test_foreign_codec_encoder_equals_the_transformers_5_tokenizer(foreign: Path, foreign_artifacts: Path) -> None:
    """The foreign audio tokenizer loads strictly in HiggsAudioV2TokenizerModel (transformers 5.14), and
    the exported codec_encoder's codes equal its encode, raw clips and a preprocessed reference clip."""
    from test_omnivoice_clone import ref5_codes, speechy

    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder, preprocess

    manifest = read_manifest(foreign_artifacts)
    assert manifest.graphs[spec.CODEC_ENCODER.name]["validation"]["mismatched_codes"] == {"codes": 0}
    enc = ReferenceEncoder(foreign_artifacts, manifest, None)
    assert enc.graph is not None
    clips = [speechy(n * spec.HOP / spec.SAMPLE_RATE, spec.SAMPLE_RATE, 40 + n) for n in (3, 33)]
    clip = speechy(2.0, 16000, 9)
    clips.append(preprocess(clip, 16000))
    want = ref5_codes(foreign / "audio_tokenizer", clips)
    for c, w in zip(clips[:2], want[:2], strict=True):
        np.testing.assert_array_equal(enc.graph.run({"audio": c})["codes"], w)
    np.testing.assert_array_equal(enc.codes(clip, 16000), want[2])
