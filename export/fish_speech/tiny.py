"""A random-weight Fish Speech S2 Pro checkpoint in fishaudio/s2-pro's layout (`make-tiny --family fish_speech`).

Writes `config.json` as raw JSON in Fish field names (model_type `fish_qwen3_omni`, `text_config` and
`audio_decoder_config` with `dim, n_head, n_local_heads, head_dim, n_layer, ...`: the names upstream's
loader and vLLM-Omni's FishSpeechConfig read; vLLM-Omni's `to_dict()` would write Qwen names instead),
`model.safetensors` (bf16, `text_model.model.*` and `audio_decoder.*`), `codec.pth` (the modded DAC's
state dict in vLLM-Omni's dac_modules names, weight norm as parametrizations on the convs and as
weight_g/weight_v on the quantizer projections; small dimensions that the reader takes from the shapes),
and a byte-level BPE `tokenizer.json` whose special tokens sit at the real ids: `<|endoftext|>` 151643,
`<|im_start|>` 151644, `<|im_end|>` 151645 (the Slow AR's stop id, hard-coded in vLLM-Omni), Qwen3's other
specials up to 151668, `<|audio_pad|>` 151677, `<|semantic:0..4095|>` 151678..155773. Fish's own tokens
between (`<|voice|>`, `<|audio_start|>`, `<|audio_end|>`, ...) are looked up by name; their ids here are
this file's choice. Filler entries keep the BPE vocabulary at 151643 ids, so the embedding has the real
155776 rows. `--size real` has the published dimensions (about 4.4 B + 0.39 B parameters).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    CHAT_LM_ADDED,
    CHAT_LM_SPLIT,
    TensorInit,
    byte_level_bpe,
    checkpoint_writer,
    json_bytes,
    save_weights,
    tiny_size,
    write_files,
)
from ttscore.contract import fish_speech as spec
from ttscore.runtime.families.fish_speech.checkpoint import (
    CODEC,
    CONFIG,
    TOKENIZER,
    WEIGHTS,
    CodecDims,
    codec_shapes,
    is_fish_speech,
    parse_config,
    tensor_shapes,
)

TEXT_VOCAB = 151643  # the BPE's ids (Qwen3's), before the special tokens
FISH_SPECIALS = ("<|phoneme_start|>", "<|phoneme_end|>", "<|text|>", spec.VOICE, "<|interleave|>", spec.AUDIO_START,
                 spec.AUDIO_END, "<|pad|>", "<|audio_pad|>")
_CORPUS = ("Hello, this is Fish Speech. The quick brown fox jumps over the lazy dog. Good morning, how are you "
           "today? system user assistant convert the provided text to speech reference to the following: Text "
           "Speech numbers one two three.")


def config(size: str = "tiny") -> dict[str, Any]:
    tiny = tiny_size(size)
    text = dict(vocab_size=155776, dim=32 if tiny else 2560, n_head=4 if tiny else 32, n_local_heads=2 if tiny else 8,
                head_dim=8 if tiny else 128, n_layer=2 if tiny else 36, intermediate_size=64 if tiny else 9728,
                attention_qk_norm=True, rope_base=1000000.0, max_seq_len=32768, tie_word_embeddings=True,
                codebook_size=4096, num_codebooks=10, dropout=0.0, norm_eps=1e-6)
    audio = dict(vocab_size=4096, num_codebooks=10, dim=32 if tiny else 2560, n_head=4 if tiny else 32,
                 n_local_heads=2 if tiny else 8, head_dim=8 if tiny else 128, n_layer=2 if tiny else 4,
                 intermediate_size=64 if tiny else 9728, max_seq_len=11, text_dim=32 if tiny else 2560,
                 attention_qk_norm=False, rope_base=1000000.0, dropout=0.0, norm_eps=1e-6)
    return {"architectures": ["FishQwen3OmniForCausalLM"], "model_type": spec.MODEL_TYPE, "dtype": "bfloat16",
            "text_config": text, "audio_decoder_config": audio, "semantic_start_token_id": 151678,
            "semantic_end_token_id": 155773, "audio_pad_token_id": 151677, "eos_token_id": spec.IM_END_ID,
            "pad_token_id": 151643}


def codec_dims(size: str = "tiny") -> CodecDims:
    tiny = tiny_size(size)
    return CodecDims(encoder_dim=4 if tiny else 64, encoder_rates=(2, 4, 8, 8), encoder_layers=(0, 0, 0, 1 if tiny else 4),
                     encoder_ffn=192 if tiny else 3072, latent_dim=64 if tiny else 1024, codebook_dim=8,
                     semantic_codebook_size=4096, n_residual=9, residual_codebook_size=spec.RESIDUAL_CODEBOOK_SIZE,
                     downsample=(2, 2), quantizer_layers=(1, 1) if tiny else (8, 8), quantizer_ffn=192 if tiny else 3072,
                     decoder_dim=32 if tiny else 1536, decoder_rates=(8, 8, 4, 2))


def special_tokens() -> dict[str, int]:
    ids = {t: TEXT_VOCAB + i for i, t in enumerate(CHAT_LM_ADDED)}
    ids.update({t: 151669 + i for i, t in enumerate(FISH_SPECIALS)})
    ids.update({f"<|semantic:{i}|>": 151678 + i for i in range(4096)})
    return ids


@lru_cache(maxsize=1)
def tokenizer_json() -> str:
    """A byte-level BPE trained on a few sentences, its vocabulary filled to Qwen3's 151643 ids with entries no
    merge produces, and the special tokens at their ids."""
    from tokenizers import Regex, pre_tokenizers

    tok = byte_level_bpe([_CORPUS], pre_tokenizer=pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CHAT_LM_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for i in range(len(vocab), TEXT_VOCAB):
        vocab[f"<unused_{i}>"] = i
    data["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for t, i in special_tokens().items()]
    return json.dumps(data, ensure_ascii=False)


def tokenizer_config() -> dict[str, Any]:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "add_prefix_space": False, "bos_token": None,
            "eos_token": spec.IM_END, "pad_token": "<|endoftext|>", "model_max_length": 32768}


def model_weights(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    import torch

    init = TensorInit(seed, spec.FAMILY, torch.bfloat16)
    for name, shape in tensor_shapes(parse_config(cfg)).items():
        if name.endswith("norm.weight"):
            init.normal(name, shape, 0.1, mean=1.0)
        elif "embeddings" in name:
            init.normal(name, shape, 0.5)
        else:
            init.fan_in(name, shape)
    return init.tensors


def codec_weights(dims: CodecDims, seed: int) -> dict[str, Any]:
    import torch

    init = TensorInit(seed, f"{spec.FAMILY}-codec", torch.float32)
    for name, shape in codec_shapes(dims).items():
        if name.endswith("alpha"):
            init.uniform(name, shape, 0.5, 1.5)
        elif name.endswith(("original0", "weight_g")):
            init.uniform(name, shape, 0.3, 1.0)
        elif name.endswith("gamma"):
            init.uniform(name, shape, 0.05, 0.2)
        elif name.endswith("norm.weight"):
            init.normal(name, shape, 0.1, mean=1.0)
        elif name.endswith("codebook.weight"):
            init.normal(name, shape, 1.0)
        elif name.endswith("bias"):
            init.normal(name, shape, 0.02)
        else:
            init.fan_in(name, shape)
    return init.tensors


def make_tiny_fish(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write the checkpoint directory (replacing an empty one or a Fish Speech checkpoint) and return it."""
    import torch

    cfg = config(size)
    with checkpoint_writer(out, f"a {spec.DISPLAY} checkpoint", is_fish_speech) as tmp:
        write_files(tmp, {CONFIG: json_bytes(cfg), TOKENIZER: tokenizer_json(),
                          "tokenizer_config.json": json_bytes(tokenizer_config())})
        save_weights(model_weights(cfg, seed), tmp / WEIGHTS)
        torch.save(codec_weights(codec_dims(size), seed), tmp / CODEC)
    return Path(out)
