"""Deterministic random-weight Qwen3-ForcedAligner checkpoints in the released layout
(Qwen/Qwen3-ForcedAligner-0.6B, as qwen-asr 0.0.6 loads it; ttscore.runtime.qwen3_forced_aligner.checkpoint documents it).

``make_tiny_aligner(out)`` writes::

    config.json  generation_config.json  preprocessor_config.json
    tokenizer_config.json  vocab.json  merges.txt  model.safetensors (bfloat16, thinker.* names)

`config.json` has the release's schema: model_type `qwen3_asr`, `thinker_config` (model_type
`qwen3_forced_aligner`, `classify_num`, the audio token ids, `audio_config`, `text_config` with its mRoPE
`rope_scaling`), `timestamp_token_id`, `timestamp_segment_time` (80 ms) and `support_languages`. Real size is the
release's dimensions (audio 24 layers of 1024, text 28 layers of 1024 over 16/8 heads, 5000 classes); tiny is a few
layers of 32-64. The tokenizer is a small byte-level BPE (Qwen2's slow-tokenizer files) whose added tokens
(`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, `<|audio_start|>`, `<|audio_end|>`, `<|audio_pad|>`,
`<timestamp>`) follow its vocabulary at every size, so the token ids are not the release's (151669, 151670,
151676, 151705 there); the config names whichever ids the tokenizer has, as the release's does.

Weights draw per tensor from export.tiny_weights (sha256(seed, name) streams): same arguments, same bytes. The
text stack's per-head q/k norms are drawn around 3 (sharp attention), so a random checkpoint's slots get classes
that differ, as a trained one's do.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    TensorInit,
    byte_level_bpe,
    checkpoint_writer,
    json_bytes,
    save_weights,
    tiny_size,
)
from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.runtime.qwen3_forced_aligner.checkpoint import is_aligner, parse_config, tensor_shapes

_CORPUS = ("Hello, this is the aligner. The quick brown fox jumps over the lazy dog at three o'clock. "
           "今天天气很好。今日はいい天気ですね。안녕하세요. Numbers one two three.")
ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", spec.AUDIO_START, spec.AUDIO_END, spec.AUDIO_PAD,
         spec.TIMESTAMP)
SUPPORT_LANGUAGES = ("Chinese", "English", "Cantonese", "French", "German", "Italian", "Japanese", "Korean",
                     "Portuguese", "Russian", "Spanish")
SEGMENT_MS = 80


@lru_cache(maxsize=1)
def _bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    model = json.loads(byte_level_bpe([_CORPUS]).to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), [(a, b) for a, b in merges]


def token_ids() -> dict[str, int]:
    """The added tokens' ids: right after the BPE vocabulary, in ADDED's order."""
    base = len(_bpe()[0])
    return {tok: base + i for i, tok in enumerate(ADDED)}


def tokenizer_files() -> dict[str, bytes]:
    vocab, merges = _bpe()
    ids = token_ids()
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
        "model_max_length": 131072, "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "audio_bos_token": spec.AUDIO_START, "audio_eos_token": spec.AUDIO_END, "audio_token": spec.AUDIO_PAD,
        "extra_special_tokens": {"audio_bos_token": spec.AUDIO_START, "audio_eos_token": spec.AUDIO_END,
                                 "audio_token": spec.AUDIO_PAD},
        "additional_special_tokens": [t for t in ADDED if t != "<|endoftext|>"],
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for t, i in ids.items()},
    }
    merges_txt = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    return {"vocab.json": json.dumps(vocab, ensure_ascii=False).encode("utf-8"),
            "merges.txt": merges_txt.encode("utf-8"), "tokenizer_config.json": json_bytes(cfg)}


def model_config(size: str = "tiny") -> dict[str, Any]:
    ids = token_ids()
    if tiny_size(size):
        audio = {"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 128,
                 "output_dim": 48, "downsample_hidden_size": 32}
        text = {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "vocab_size": -(-(max(ids.values()) + 1) // 64) * 64}
        classes, mrope = 64, [4, 2, 2]
    else:
        audio = {"d_model": 1024, "encoder_layers": 24, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                 "output_dim": 1024, "downsample_hidden_size": 480}
        text = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
                "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 152064}
        classes, mrope = 5000, [24, 20, 20]
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": spec.MODEL_TYPE,
        "support_languages": list(SUPPORT_LANGUAGES),
        "thinker_config": {
            "model_type": spec.THINKER_MODEL_TYPE,
            "classify_num": classes,
            "audio_token_id": ids[spec.AUDIO_PAD],
            "audio_start_token_id": ids[spec.AUDIO_START],
            "audio_end_token_id": ids[spec.AUDIO_END],
            "user_token_id": 872 if size == "real" else ids["<|im_start|>"],
            "initializer_range": 0.02,
            "audio_config": {**audio, "num_mel_bins": 128, "n_window": 50, "n_window_infer": 800,
                             "conv_chunksize": 500, "max_source_positions": 1500, "activation_function": "gelu",
                             "scale_embedding": False, "dropout": 0.0, "attention_dropout": 0.0,
                             "activation_dropout": 0.0, "model_type": "qwen3_asr_audio_encoder"},
            "text_config": {**text, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                            "max_position_embeddings": 65536, "attention_bias": False, "attention_dropout": 0.0,
                            "tie_word_embeddings": False, "use_cache": True, "model_type": "qwen3_asr_text",
                            "rope_scaling": {"rope_type": "default", "mrope_section": mrope, "interleaved": True,
                                             "mrope_interleaved": True}},
        },
        "timestamp_token_id": ids[spec.TIMESTAMP],
        "timestamp_segment_time": SEGMENT_MS,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "transformers_version": "4.57.6",
    }


def preprocessor_config() -> dict[str, Any]:
    """transformers' WhisperFeatureExtractor at 128 bins, as Qwen3ASRProcessor saves it."""
    return {"chunk_length": 30, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": 128, "hop_length": spec.HOP_LENGTH, "n_fft": spec.N_FFT, "n_samples": 480000,
            "nb_max_frames": 3000, "padding_side": "right", "padding_value": 0.0, "processor_class": "Qwen3ASRProcessor",
            "return_attention_mask": True, "sampling_rate": spec.SAMPLE_RATE}


def checkpoint_weights(cfg: dict[str, Any], seed: int, dtype: Any) -> dict[str, Any]:
    init = TensorInit(seed, "qwen3-forced-aligner", dtype)
    for name, shape in tensor_shapes(parse_config(cfg)).items():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            init.normal(name, shape, 0.3, mean=3.0)
        elif name.endswith("bias"):
            init.normal(name, shape, 0.05)
        elif len(shape) == 1:
            init.normal(name, shape, 0.1, mean=1.0)
        elif name.endswith("embed_tokens.weight"):
            init.normal(name, shape, 1.0)
        else:
            fan_in = 1
            for d in shape[1:]:
                fan_in *= d
            init.normal(name, shape, (4.0 if name.endswith("lm_head.weight") else 1.0) / fan_in ** 0.5)
    return init.tensors


def make_tiny_aligner(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write the checkpoint directory (replacing an empty one or an aligner checkpoint) and return it."""
    import torch

    cfg = model_config(size)
    with checkpoint_writer(out, f"a {spec.DISPLAY} checkpoint", is_aligner) as tmp:
        (tmp / "config.json").write_bytes(json_bytes(cfg))
        (tmp / "generation_config.json").write_bytes(json_bytes({"transformers_version": "4.57.6"}))
        (tmp / "preprocessor_config.json").write_bytes(json_bytes(preprocessor_config()))
        for name, data in tokenizer_files().items():
            (tmp / name).write_bytes(data)
        save_weights(checkpoint_weights(cfg, seed, torch.bfloat16), tmp / "model.safetensors")
    return Path(out)
