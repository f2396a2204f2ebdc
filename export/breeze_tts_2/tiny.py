"""Deterministic random-weight Breeze-TTS-2 checkpoints in the released on-disk layout.

``make_tiny_breeze(out)`` writes::

    config.json  model.safetensors  tokenizer.json  tokenizer_config.json  special_tokens_map.json
    audio_tokenizer/{config.json, configuration.json, model.safetensors, preprocessor_config.json}

`config.json` follows vLLM-Omni's BreezeTTS2Config (backbone_config = Qwen3, depth_decoder_config =
Llama with llama3 RoPE, text_encoder_config = T5Gemma2 text encoder incl. `dropout_rate`, which
transformers 5.14's T5Gemma2TextConfig has no default for); 16 codebooks x 2051 rows and the
2052-row code-0 head stay real at every size. `model.safetensors` holds the released tensor names
(`text_encoder.*`, `text_encoder_proj`, `backbone_model.*`, `lm_head`, `depth_decoder.*`,
`embed_text_tokens`; the flat audio table is stored once, as `depth_decoder.model.embed_tokens`,
tied to the backbone's audio input). The tokenizer is a small Gemma-style byte-fallback BPE with
<pad> <eos> <bos> <unk>, [S0]..[S9], <ins_bos>, <ins_eos>, <|AUDIO|>, <|audio_eos|> (the config's
audio ids are the tokenizer's). `audio_tokenizer/` is the project's tiny Qwen3-TTS 12 Hz tokenizer
(export/qwen3_tts/tiny.py), unchanged.

Weights draw per tensor from export.tiny_weights (sha256(seed, name) streams): same arguments, same
bytes. The names come from the runtime's `tensor_shapes(config)` (the loader's strict check); tests load them strictly into the reference
classes (T5Gemma2TextEncoder, Qwen3Model, LlamaModel + heads) in the ref5 environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    TensorInit,
    checkpoint_writer,
    json_bytes,
    save_weights,
    tiny_size,
    write_files,
)
from ttscore.contract import breeze_tts_2 as spec
from ttscore.runtime.checkpoint_kit import config_model_type
from ttscore.runtime.families.breeze_tts_2.checkpoint import tensor_shapes

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")  # ids 0..3 (Gemma's order: pad 0, eos 1, bos 2, unk 3)
ADDED = (*(f"[{v}]" for v in spec.VOICES), spec.INSTRUCTION_BOS, spec.INSTRUCTION_EOS,
         spec.AUDIO_TAG, spec.AUDIO_EOS)
_CORPUS = (
    "Hello world. This is a small test of the speech system. The quick brown fox jumps over the lazy dog. "
    "Speak clearly and naturally. A calm warm voice, slowly and softly. Good morning, how are you today? "
    "Numbers one two three four five. Breeze speaks Mandarin and English. Testing, testing, one two three."
)


def _sizes(size: str) -> dict[str, Any]:
    if tiny_size(size):
        return {"text": dict(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                             num_key_value_heads=1, head_dim=24, query_pre_attn_scalar=24, sliding_window=6),
                "backbone": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=16),
                "depth": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=8)}
    return {"text": dict(hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
                         num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256, sliding_window=512),
            "backbone": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                             num_key_value_heads=8, head_dim=128),
            "depth": dict(hidden_size=1024, intermediate_size=8192, num_hidden_layers=12, num_attention_heads=8,
                          num_key_value_heads=2, head_dim=128)}


# ---- tokenizer ----------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def tokenizer_json() -> str:
    """Gemma-style: spaces -> "▁", BPE with byte fallback (<0x00>..<0xFF>), <bos> prepended."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=[*SPECIALS, *byte_tokens], show_progress=False,
                                  initial_alphabet=sorted(set(_CORPUS.replace(" ", "▁"))))
    tok.train_from_iterator([_CORPUS], trainer=trainer)
    tok.add_special_tokens(list(ADDED))
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", bos)])
    return str(tok.to_str())


def token_id(token: str) -> int:
    from tokenizers import Tokenizer

    i = Tokenizer.from_str(tokenizer_json()).token_to_id(token)
    assert i is not None, token
    return int(i)


def vocab_size() -> int:
    from tokenizers import Tokenizer

    return int(Tokenizer.from_str(tokenizer_json()).get_vocab_size(with_added_tokens=True))


def tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "GemmaTokenizer",
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False,
        "additional_special_tokens": list(ADDED),
        "model_max_length": 1000000000000000019884624838656,
        "padding_side": "left",
    }


# ---- config -------------------------------------------------------------------------------------

def model_config(size: str = "tiny") -> dict[str, Any]:
    s = _sizes(size)
    real = size == "real"
    text_vocab = 262158 if real else vocab_size()
    t = s["text"]
    layers = t["num_hidden_layers"]
    text = {
        **t,
        "model_type": "t5gemma2_text",
        "max_position_embeddings": 32768 if real else 512,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "eoi_token_index": 256000,
        "vocab_size": text_vocab,
        # Every 6th layer full (the released pattern); the tiny one has a full layer in 3.
        "layer_types": ["full_attention" if (i + 1) % (6 if real else 3) == 0 else "sliding_attention"
                        for i in range(layers)],
        "rope_parameters": {"full_attention": {"factor": 8.0, "rope_theta": 1000000.0, "rope_type": "linear"},
                            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
        "attention_bias": False, "attention_dropout": 0.0, "dropout_rate": 0.0,
        "tie_word_embeddings": True, "use_bidirectional_attention": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "bfloat16",
    }
    b = s["backbone"]
    backbone = {
        **b, "model_type": "qwen3", "vocab_size": 151936 if real else 32, "max_position_embeddings": spec.MAX_CONTEXT,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "attention_bias": False,
        "attention_dropout": 0.0, "tie_word_embeddings": False, "use_sliding_window": False, "dtype": "bfloat16",
    }
    d = s["depth"]
    depth = {
        **d, "model_type": "breeze_depth_decoder_model",
        "backbone_hidden_size": b["hidden_size"], "audio_embed_size": b["hidden_size"],
        "max_position_embeddings": 33, "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 0.0078125, "low_freq_factor": 0.001953125,
                         "original_max_position_embeddings": 16, "rope_type": "llama3"},
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "num_codebooks": spec.NUM_CODEBOOKS, "vocab_size": spec.CODEBOOK_VOCAB, "dtype": "bfloat16",
    }
    return {
        "architectures": ["BreezeForConditionalGeneration"],
        "model_type": "breeze",
        "backbone_config": backbone,
        "text_encoder_config": text,
        "depth_decoder_config": depth,
        "codec_config": {"codebook_size": spec.CODEBOOK_SIZE, "sampling_rate": spec.SAMPLE_RATE},
        "audio_embed_size": b["hidden_size"],
        "audio_num_codebooks": spec.NUM_CODEBOOKS,
        "num_codebooks": spec.NUM_CODEBOOKS,
        "audio_vocab_size": spec.CODEBOOK_VOCAB,
        "vocab_size": spec.CODEBOOK_VOCAB,
        "audio_token_id": 262144 if real else token_id(spec.AUDIO_TAG),
        "audio_eos_token_id": 262145 if real else token_id(spec.AUDIO_EOS),
        "backbone_model_type": "qwen3",
        "text_encoder_proj_type": "linear",
        "text_vocab_size": text_vocab,
        "codebook_eos_token_id": spec.CODEBOOK_EOS_TOKEN_ID,
        "codebook_pad_token_id": 2050,
        "tie_codebooks_embeddings": True,
        "tie_word_embeddings": False,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "hidden_size": b["hidden_size"],
        "max_position_embeddings": spec.MAX_CONTEXT,
        "sampling_rate": spec.SAMPLE_RATE,
        "dtype": "bfloat16",
        "transformers_version": "5.14.1",
    }


def checkpoint_weights(cfg: dict[str, Any], seed: int, dtype: Any) -> dict[str, Any]:
    """Scales: linear ~ 1/sqrt(fan_in); embeddings ~ N(0, 1) (the audio table 1/sqrt(16), since a frame
    sums 16 rows); Qwen3/Llama norms 1 +- 0.1; T5Gemma2 norms are zero-centred (scale 1 + w), w ~ 0.1."""
    init = TensorInit(seed, "breeze", dtype)
    for name, shape in tensor_shapes(cfg).items():
        if name.endswith("norm.weight"):
            centred = name.startswith("text_encoder.")
            init.normal(name, shape, 0.1, mean=0.0 if centred else 1.0)
        elif name == "depth_decoder.codebooks_head.weight":
            init.normal(name, shape, 1.0 / shape[1] ** 0.5)
        elif name == "depth_decoder.model.embed_tokens.weight":
            init.normal(name, shape, 0.25)
        elif name.endswith("embed_tokens.weight") or name == "embed_text_tokens.weight" or name.endswith("eoi_embedding"):
            init.normal(name, shape, 1.0)
        elif name == "lm_head.weight":
            init.normal(name, shape, 2.0 / shape[1] ** 0.5)  # peaked enough that greedy code 0 varies
        else:
            init.normal(name, shape, 1.0 / shape[-1] ** 0.5)
    return init.tensors


def parameter_count(size: str = "tiny") -> int:
    import math

    return sum(math.prod(s) for s in tensor_shapes(model_config(size)).values())


# ---- writing ------------------------------------------------------------------------------------

def make_tiny_breeze(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write the checkpoint directory (replacing an empty one or a Breeze checkpoint) and return it."""
    import torch

    from export.qwen3_tts import tiny as qwen_tiny

    _sizes(size)
    cfg = model_config(size)
    st_cfg = qwen_tiny.speech_tokenizer_config("tiny" if size == "tiny" else "1.7b")
    with checkpoint_writer(out, "a Breeze-TTS-2 checkpoint", config_model_type("breeze")) as tmp:
        write_files(tmp, {
            "config.json": json_bytes(cfg),
            "tokenizer.json": tokenizer_json(),
            "tokenizer_config.json": json_bytes(tokenizer_config()),
            "special_tokens_map.json": json_bytes({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                                                   "unk_token": "<unk>", "additional_special_tokens": list(ADDED)}),
            f"{spec.AUDIO_TOKENIZER_DIR}/config.json": json_bytes(st_cfg),
            f"{spec.AUDIO_TOKENIZER_DIR}/configuration.json": json_bytes(qwen_tiny.SPEECH_TOKENIZER_CONFIGURATION),
            f"{spec.AUDIO_TOKENIZER_DIR}/preprocessor_config.json": json_bytes(qwen_tiny.SPEECH_TOKENIZER_PREPROCESSOR),
        })
        save_weights(qwen_tiny._speech_tokenizer_weights(st_cfg, seed), tmp / spec.AUDIO_TOKENIZER_DIR / "model.safetensors")
        save_weights(checkpoint_weights(cfg, seed, torch.bfloat16), tmp / "model.safetensors")
    return Path(out)
