"""OmniVoice's tiny checkpoint and its export, made once per test session (the tests that use them
import these fixtures; the directory under the session's base temp is the cache), and a checkpoint
the project did not make (`omnivoice_foreign`) and its export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from artifacts import export_fixture, tiny_fixture

from ttscore.contract import omnivoice as spec

__all__ = ["omnivoice_artifacts", "omnivoice_foreign", "omnivoice_foreign_artifacts", "omnivoice_tiny"]


omnivoice_tiny = tiny_fixture("omnivoice_tiny", "OmniVoice-tiny", "export.omnivoice.tiny:make_tiny_omnivoice")
omnivoice_artifacts = export_fixture("omnivoice_artifacts", "omnivoice_tiny")
omnivoice_foreign_artifacts = export_fixture("omnivoice_foreign_artifacts", "omnivoice_foreign")


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


@pytest.fixture(scope="session")
def omnivoice_foreign() -> Path:
    """Built with the reference's own classes and init (OmniVoiceConfig + transformers' Qwen3Config,
    OmniVoice(config).save_pretrained), dimensions and a tokenizer unlike make-tiny's (special tokens
    first, another vocabulary), a codec of other dimensions with torch's and transformers' default
    init (its encoder side too)."""
    from artifacts import STORE

    def make(out: Path) -> None:
        import torch
        from safetensors.torch import save_file
        from transformers import Qwen3Config

        from export.omnivoice.codec import codec_modules
        from export.omnivoice.reference import omnivoice_module

        mod = omnivoice_module()
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

    return STORE.checkpoint("OmniVoice-foreign", make, sources=[Path(__file__)])
