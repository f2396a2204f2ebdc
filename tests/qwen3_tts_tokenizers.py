"""Tiny Qwen3-TTS speech tokenizers (the reference's Qwen3TTSTokenizerV2Model, from qwen_tts) for the tests
that export its encoder or its decoder (tests/export_tests/test_export_encoders.py, test_export_code2wav.py):
the Mimi encoder's and the decoder's tiny configurations and the model built from an encoder and a decoder
configuration."""

from __future__ import annotations

from typing import Any

TINY_MIMI: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=64,
    num_filters=8,
    codebook_dim=16,
    vector_quantization_hidden_dimension=16,
    upsample_groups=32,
    codebook_size=2048,
    num_quantizers=32,
    upsampling_ratios=[8, 6, 5, 4],
    frame_rate=12.5,
    sampling_rate=24000,
)

# The decoder's transformer and widths; the code2wav tests add its codebooks, window and rates.
TINY_DECODER: dict[str, Any] = dict(
    latent_dim=64,
    codebook_dim=32,
    decoder_dim=96,
    hidden_size=32,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=64,
    num_hidden_layers=2,
)


def tokenizer_model(seed: int, encoder_config: dict[str, Any], decoder_config: dict[str, Any]) -> Any:
    """Qwen3TTSTokenizerV2Model of these configurations (16 valid encoder codebooks, eager attention), in
    float32 and eval mode, with torch's default init after torch.manual_seed(seed)."""
    import torch

    from export.qwen3_tts.reference import reference_imports

    with reference_imports():
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Config,
        )
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    torch.manual_seed(seed)
    cfg = Qwen3TTSTokenizerV2Config(encoder_config=encoder_config, decoder_config=decoder_config,
                                    encoder_valid_num_quantizers=16)
    cfg.encoder_config._attn_implementation = "eager"
    cfg.decoder_config._attn_implementation = "eager"
    return Qwen3TTSTokenizerV2Model(cfg).float().eval()
