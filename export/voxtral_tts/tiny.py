"""A random-weight Voxtral TTS checkpoint in Mistral's released layout (`make-tiny --family voxtral_tts`).

Writes `params.json` (the language model's keys at the top level, `multimodal.audio_model_args` and
`multimodal.audio_tokenizer_args` with the `voice` map; `n_decoding_steps` left out as in the public
checkpoint, so vLLM-Omni's default 7 applies), `consolidated.safetensors` with Mistral's tensor names
(q/k stored in Mistral's interleaved rotary layout: random weights have no layout of their own, so any
reader must permute them for rotate-half exactly as for the real checkpoint), a byte-level `tekken.json`
(version v13, the special tokens at their real ranks: `[AUDIO]` 24, `[BEGIN_AUDIO]` 25,
`[NEXT_AUDIO_TEXT]` 35, `[REPEAT_AUDIO_TEXT]` 36) with an `audio` section, and
`voice_embedding/<voice>.pt` presets. `--size real` has the published dimensions (Ministral-3B backbone).
"""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    TensorInit,
    checkpoint_writer,
    json_bytes,
    tiny_size,
    write_files,
)
from ttscore.contract import voxtral_tts as spec
from ttscore.runtime.families.voxtral_tts.checkpoint import (
    PARAMS,
    TEKKEN,
    VOICES_DIR,
    WEIGHTS,
    parse_params,
    tensor_shapes,
)

NUM_SPECIAL = {"tiny": 40, "real": 1000}
# The special tokens mistral-common's v13 instruct tokenizer looks up (the rest are `<SPECIAL_n>`
# placeholders); 0-2, 24, 25, 35, 36 are the real ranks, the others only need to exist.
SPECIAL_NAMES = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[AVAILABLE_TOOLS]",
                 6: "[/AVAILABLE_TOOLS]", 7: "[TOOL_RESULTS]", 8: "[/TOOL_RESULTS]", 9: "[TOOL_CALLS]",
                 10: "[IMG]", 11: "<pad>", 12: "[IMG_BREAK]", 13: "[IMG_END]", 14: "[PREFIX]", 15: "[MIDDLE]",
                 16: "[SUFFIX]", 17: "[SYSTEM_PROMPT]", 18: "[/SYSTEM_PROMPT]", 19: "[TOOL_CONTENT]",
                 20: "[ARGS]", 21: "[CALL_ID]", 22: "[TRANSCRIBE]", 23: "[THINK]", 26: "[/THINK]",
                 27: "[STREAMING_PAD]", 28: "[STREAMING_WORD]", 29: "[MODEL_SETTINGS]", 30: "[/MODEL_SETTINGS]",
                 24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 35: "[NEXT_AUDIO_TEXT]", 36: "[REPEAT_AUDIO_TEXT]"}
PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
           r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
# Preset voices: name -> prompt frames (tiny: two; real: the published twenty, frame counts invented).
VOICES = {"tiny": {"neutral_female": 5, "casual_male": 3},
          "real": {v: 40 for v in ("casual_male", "casual_female", "cheerful_female", "neutral_male", "neutral_female",
                                   *(f"{lang}_{g}" for lang in ("fr", "de", "es", "it", "nl", "pt", "hi")
                                     for g in ("male", "female")), "ar_male")}}


def params(size: str = "tiny") -> dict[str, Any]:
    tiny = tiny_size(size)
    dim = 64 if tiny else 3072
    voices = VOICES[size]
    return {
        "dim": dim, "n_layers": 2 if tiny else 26, "head_dim": 16 if tiny else 128,
        "hidden_dim": 128 if tiny else 9216, "n_heads": 4 if tiny else 32, "n_kv_heads": 2 if tiny else 8,
        "rope_theta": 1000000.0, "norm_eps": 1e-05, "vocab_size": NUM_SPECIAL[size] + 256 if tiny else 131072,
        "tied_embeddings": True, "max_seq_len": 65536, "model_type": spec.FAMILY,
        "multimodal": {
            "audio_model_args": {
                "semantic_codebook_size": 64 if tiny else 8192, "acoustic_codebook_size": 21,
                "n_acoustic_codebook": 8 if tiny else 36, "audio_token_id": 24, "begin_audio_token_id": 25,
                "audio_encoding_args": {"sampling_rate": 24000, "frame_rate": 12.5},
                "acoustic_transformer_args": {
                    "input_dim": dim, "dim": dim, "n_layers": 2 if tiny else 3, "head_dim": 16 if tiny else 128,
                    "hidden_dim": 128 if tiny else 9216, "n_heads": 4 if tiny else 32, "n_kv_heads": 2 if tiny else 8,
                    "use_biases": False, "norm_eps": 1e-05, "sigma": 1e-05},
            },
            "audio_tokenizer_args": {
                "channels": 1, "sampling_rate": 24000, "pretransform_patch_size": 240, "patch_proj_kernel_size": 7,
                "semantic_codebook_size": 64 if tiny else 8192, "semantic_dim": 16 if tiny else 256,
                "acoustic_codebook_size": 21, "acoustic_dim": 8 if tiny else 36, "conv_weight_norm": True,
                "causal": True, "attn_sliding_window_size": 16, "half_attn_window_upon_downsampling": True,
                "dim": 32 if tiny else 1024, "hidden_dim": 64 if tiny else 4096, "head_dim": 8 if tiny else 128,
                "n_heads": 4 if tiny else 8, "n_kv_heads": 4 if tiny else 8, "qk_norm_eps": 1e-06, "qk_norm": True,
                "use_biases": False, "norm_eps": 0.01, "layer_scale": True, "layer_scale_init": None,
                "encoder_transformer_lengths_str": "1,1,1,1" if tiny else "2,2,2,2",
                "encoder_convs_kernels_str": "4,4,4,3", "encoder_convs_strides_str": "2,2,2,1",
                "decoder_transformer_lengths_str": "1,1,1,1" if tiny else "2,2,2,2",
                "decoder_convs_kernels_str": "3,4,4,4", "decoder_convs_strides_str": "1,2,2,2",
                "voice": {name: i for i, name in enumerate(voices)},
            },
        },
    }


def tekken(size: str = "tiny") -> dict[str, Any]:
    n_special = NUM_SPECIAL[size]
    special = [{"rank": r, "token_str": SPECIAL_NAMES.get(r, f"<SPECIAL_{r}>"), "is_control": True}
               for r in range(n_special)]
    vocab = [{"rank": b, "token_bytes": base64.b64encode(bytes([b])).decode(), "token_str": None} for b in range(256)]
    return {
        "config": {"pattern": PATTERN, "num_vocab_tokens": 256, "default_vocab_size": n_special + 256,
                   "default_num_special_tokens": n_special, "version": "v13"},
        "vocab": vocab, "special_tokens": special, "version": 1, "type": "Tekken",
        "audio": {"sampling_rate": 24000, "frame_rate": 12.5,
                  "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
                  "voice_num_audio_tokens": dict(VOICES[size])},
    }


def weights(cfg: dict[str, Any], seed: int, dtype: Any) -> dict[str, Any]:
    import numpy as np

    info = parse_params(cfg)
    init = TensorInit(seed, "voxtral_tts", dtype)
    for name, shape in tensor_shapes(info).items():
        if name.endswith("time_embedding.inv_freq"):
            half = shape[0]
            init._put(name, np.exp(-math.log(10000.0) * np.arange(half, dtype=np.float32) / half).astype(np.float32))
        elif name.endswith("cluster_usage"):
            init.uniform(name, shape, 0.5, 2.0)
        elif name.endswith(("_scale",)):
            init.uniform(name, shape, 0.05, 0.2)
        elif name.endswith("norm.weight"):
            init.normal(name, shape, 0.1, mean=1.0)
        elif name.endswith("original0"):
            init.uniform(name, shape, 0.5, 1.5)
        elif name.endswith("embedding_sum") or "embeddings" in name:
            init.normal(name, shape, 1.0 if "embedding_sum" in name else 0.5)
        elif name.endswith("acoustic_codebook_output.weight"):  # velocities of order 0.3: few codes clamp
            init.normal(name, shape, 0.3 / math.sqrt(shape[1]))
        else:
            init.fan_in(name, shape)
    return init.tensors


def make_tiny_voxtral(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    import numpy as np
    import torch
    from safetensors.torch import save_file

    cfg = params(size)
    dtype = torch.float32 if size == "tiny" else torch.bfloat16
    with checkpoint_writer(out, "a Voxtral TTS checkpoint", None) as tmp:
        write_files(tmp, {PARAMS: json_bytes(cfg), TEKKEN: json_bytes(tekken(size))})
        save_file(weights(cfg, seed, dtype), str(tmp / WEIGHTS))
        (tmp / VOICES_DIR).mkdir()
        for name, frames in VOICES[size].items():
            rng = np.random.default_rng([seed, sum(name.encode())])
            rows = torch.from_numpy(rng.standard_normal((frames, cfg["dim"]), dtype=np.float32) * 0.5).to(dtype)
            torch.save(rows, tmp / VOICES_DIR / f"{name}.pt")
    return Path(out)
