"""Deterministic random-weight Qwen3-TTS 12 Hz checkpoints in the exact real on-disk layout.

``make_tiny(variant, out)`` writes::

    config.json  generation_config.json  model.safetensors  preprocessor_config.json
    tokenizer_config.json  vocab.json  merges.txt
    speech_tokenizer/{config.json, configuration.json, model.safetensors, preprocessor_config.json}

What is kept real at every size: the JSON schemas, every token id (text specials, codec specials,
languages, speakers), the vocab sizes (text 151936, codec 3072, codebook 2048, 16 code groups),
24 kHz audio with 1920 samples per frame, the code2wav sliding window (72) and rate schedule, and
the tensor names. ``size="tiny"`` shrinks only widths and depths; ``"0.6b"`` / ``"1.7b"`` use the
real shapes (random bf16 weights, for memory/throughput work without downloading anything).

Design notes
- Weights are drawn per tensor from a numpy PCG64 stream seeded by ``sha256(seed, tensor name)``, so
  a file depends only on (seed, variant, size), not on module construction order, torch version or
  CPU features. The torch modules are instantiated on the ``meta`` device only to enumerate the
  exact state-dict names and shapes the reference expects; any parameter this module does not know
  how to initialize is an error (a reference update must not silently produce zeros).
- Scales are chosen so every component matters in a parity test: linear/conv weights ~ 1/sqrt(fan_in),
  embeddings ~ N(0, 1), norm weights 1 +- 0.1, non-zero biases, layer scales ~ 0.3 rather than the
  real 0.01 init (which would make the code2wav transformer nearly invisible in the output), RVQ
  codebooks filled (the module default is all-zero = silence), and the final code2wav conv scaled so
  the waveform RMS lands around 0.1-0.3 with few samples clipped at +-1.
- The text tokenizer is a small byte-level BPE (256 byte tokens + a few hundred merges learned here
  from a fixed English corpus) padded with unreachable filler entries to the real 151643 BPE ids, so
  the added special tokens get their real ids (151643..151675) in any consumer, and the
  pieces the prompt builder slices on ("assistant", "user", "\\n") are single tokens at their real
  Qwen ids (77091, 872, 198).
- Writes go to a temporary sibling directory that is renamed into place at the end; a failure never
  leaves a half-written directory that looks like a checkpoint.

Reference quirks this fixture reproduces on purpose (runtime authors must match them)
- ``Qwen3TTSModel.from_pretrained`` loads the processor with ``fix_mistral_regex=True``. With
  transformers 4.57.3 and a local ``config.json`` whose ``transformers_version`` is missing or in
  (4.57.2, 5.0) that flag *replaces* Qwen2's pre-tokenizer split regex with the Mistral one: camel
  case splits ("HelloWorld" -> "Hello" "World"), contractions are no longer a special alternative,
  "/" may follow punctuation runs. The released checkpoints are in that range (loading them without
  the flag prints transformers' Mistral-regex warning); this fixture writes 4.57.3 and its BPE learns
  "HelloWorld", so the difference is visible in tests.
- ``spk_id`` / ``spk_is_dialect`` must be dicts (``{}``) for VoiceDesign and Base: the reference calls
  ``spk_id.keys()`` for every variant.
- The instruct switch is ``tts_model_size in "0b6"`` (a substring test): "0b6" drops instruct for
  CustomVoice, "1b7" and "tiny" keep it.
- The speech tokenizer decoder config carries ``semantic_codebook_size`` 4096 etc. that the reference
  ignores: every RVQ codebook, the first included, has ``codebook_size`` (2048) rows.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    CHAT_LM_ADDED,
    CHAT_LM_SPECIAL,
    CHAT_LM_SPLIT,
    TensorInit,
    check_complete,
    checkpoint_writer,
    init_common,
    json_bytes,
    learn_bpe_merges,
    module_tensors,
    save_weights,
    write_files,
)
from ttscore.runtime.checkpoint_kit import config_model_type

logger = logging.getLogger(__name__)

VARIANTS = ("custom_voice", "voice_design", "base")
SIZES = ("tiny", "0.6b", "1.7b")

TRANSFORMERS_VERSION = "4.57.3"  # as the released configs; decides fix_mistral_regex (module notes)

# ---- real token ids -------------------------------------------------------------------------------
IM_START_ID, IM_END_ID = 151644, 151645
TTS_PAD_ID, TTS_BOS_ID, TTS_EOS_ID = 151671, 151672, 151673
ASSISTANT_TOKEN_ID = 77091
TEXT_VOCAB_SIZE = 151936  # text embedding rows (the BPE has 151643 ids, then added tokens, then padding)
BPE_VOCAB_SIZE = 151643  # ids below this are BPE tokens; added tokens start here

CODEC_VOCAB_SIZE = 3072
CODEBOOK_SIZE = 2048
NUM_CODE_GROUPS = 16
CODEC_IDS = {
    "codec_pad_id": 2148,
    "codec_bos_id": 2149,
    "codec_eos_token_id": 2150,
    "codec_think_id": 2154,
    "codec_nothink_id": 2155,
    "codec_think_bos_id": 2156,
    "codec_think_eos_id": 2157,
}
# Order as in the released configs (the reference lists supported languages in key order).
LANGUAGE_IDS = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
}
DIALECT_IDS = {"beijing_dialect": 2074, "sichuan_dialect": 2062}  # CustomVoice only
SPEAKER_IDS = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}
SPEAKER_DIALECTS: dict[str, str | bool] = {name: False for name in SPEAKER_IDS} | {
    "eric": "sichuan_dialect",
    "dylan": "beijing_dialect",
}

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920

GENERATION_CONFIG: dict[str, Any] = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}


# ---- sizes ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Stack:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int


@dataclass(frozen=True)
class _Size:
    name: str  # tts_model_size as written in config.json
    talker: _Stack
    text_hidden: int
    mrope_section: tuple[int, int, int]
    code_predictor: _Stack
    speaker_channels: tuple[int, int, int, int, int]
    speaker_attention: int
    speaker_se: int
    dtype: str  # dtype of model.safetensors
    encoder: dict[str, Any]  # MimiConfig overrides
    decoder: dict[str, Any]  # code2wav decoder overrides


def _size(size: str, variant: str) -> _Size:
    if size == "tiny":
        # VoiceDesign gets a narrower code predictor so the small_to_mtp_projection path (present
        # in the real 1.7B models) is exercised by the tiny fixtures too.
        cp_hidden = 32 if variant == "voice_design" else 64
        return _Size(
            name="tiny",
            talker=_Stack(64, 2, 4, 2, 16, 128),
            text_hidden=32,
            mrope_section=(4, 2, 2),  # sums to head_dim / 2, interleaved like the real [24, 20, 20]
            code_predictor=_Stack(cp_hidden, 2, 4, 2, 16, 2 * cp_hidden),
            speaker_channels=(32, 32, 32, 32, 96),
            speaker_attention=16,
            speaker_se=16,
            dtype="float32",
            encoder=dict(
                hidden_size=32,
                num_filters=8,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=16,
                intermediate_size=64,
                codebook_dim=16,
                vector_quantization_hidden_dimension=16,
                upsample_groups=32,
            ),
            decoder=dict(
                latent_dim=64,
                codebook_dim=32,
                vector_quantization_hidden_dimension=32,
                decoder_dim=96,
                hidden_size=32,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=16,
                intermediate_size=64,
                num_hidden_layers=2,
            ),
        )
    if size in ("0.6b", "1.7b"):
        big = size == "1.7b"
        return _Size(
            name="1b7" if big else "0b6",
            talker=_Stack(2048, 28, 16, 8, 128, 6144) if big else _Stack(1024, 28, 16, 8, 128, 3072),
            text_hidden=2048,
            mrope_section=(24, 20, 20),
            code_predictor=_Stack(1024, 5, 16, 8, 128, 3072),  # 1.7B: plus a 2048 -> 1024 projection
            speaker_channels=(512, 512, 512, 512, 1536),
            speaker_attention=128,
            speaker_se=128,
            dtype="bfloat16",
            encoder={},  # the defaults in _encoder_config / _decoder_config are the released values
            decoder={},
        )
    raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")


# ---- configs --------------------------------------------------------------------------------------
def model_config(variant: str, size: str = "tiny") -> dict[str, Any]:
    """config.json contents, written by hand in the released schema.

    (``save_pretrained`` would write a speaker-encoder config that does not reload.)
    """
    _check_variant(variant)
    s = _size(size, variant)
    t, cp = s.talker, s.code_predictor
    if sum(s.mrope_section) * 2 != t.head_dim:
        raise AssertionError("mrope_section must sum to head_dim / 2")
    languages = dict(LANGUAGE_IDS)
    if variant == "custom_voice":
        languages |= DIALECT_IDS
        spk_id: dict[str, int] = dict(SPEAKER_IDS)
        spk_is_dialect: dict[str, str | bool] = dict(SPEAKER_DIALECTS)
    else:
        # The reference reads spk_id.keys() for every variant, so it must be a dict, not null.
        spk_id, spk_is_dialect = {}, {}
    code_predictor = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": cp.head_dim,
        "hidden_act": "silu",
        "hidden_size": cp.hidden,
        "initializer_range": 0.02,
        "intermediate_size": cp.intermediate,
        "layer_types": ["full_attention"] * cp.layers,
        "max_length": NUM_CODE_GROUPS + 4,
        "max_position_embeddings": 65536,
        "max_window_layers": 28,
        "model_type": "qwen3_tts_talker_code_predictor",
        "num_attention_heads": cp.heads,
        "num_code_groups": NUM_CODE_GROUPS,
        "num_hidden_layers": cp.layers,
        "num_key_value_heads": cp.kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": CODEBOOK_SIZE,
    }
    talker: dict[str, Any] = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "code_predictor_config": code_predictor,
        **CODEC_IDS,
        "codec_language_id": languages,
        "head_dim": t.head_dim,
        "hidden_act": "silu",
        "hidden_size": t.hidden,
        "initializer_range": 0.02,
        "intermediate_size": t.intermediate,
        "max_position_embeddings": 32768,
        "model_type": "qwen3_tts_talker",
        "num_attention_heads": t.heads,
        "num_code_groups": NUM_CODE_GROUPS,
        "num_hidden_layers": t.layers,
        "num_key_value_heads": t.kv_heads,
        "position_id_per_seconds": 13,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "interleaved": True,
            "mrope_section": list(s.mrope_section),
            "rope_type": "default",
            "type": "default",
        },
        "rope_theta": 1000000,
        "sliding_window": None,
        "spk_id": spk_id,
        "spk_is_dialect": spk_is_dialect,
        "text_hidden_size": s.text_hidden,
        "text_vocab_size": TEXT_VOCAB_SIZE,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": CODEC_VOCAB_SIZE,
    }
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "assistant_token_id": ASSISTANT_TOKEN_ID,
        "im_end_token_id": IM_END_ID,
        "im_start_token_id": IM_START_ID,
        "model_type": "qwen3_tts",
    }
    if variant == "base":
        cfg["speaker_encoder_config"] = {
            "enc_attention_channels": s.speaker_attention,
            "enc_channels": list(s.speaker_channels),
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_dim": t.hidden,
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_res2net_scale": 8,
            "enc_se_channels": s.speaker_se,
            "mel_dim": 128,
            "sample_rate": SAMPLE_RATE,
        }
    cfg |= {
        "talker_config": talker,
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "torch_dtype": s.dtype,
        "transformers_version": TRANSFORMERS_VERSION,
        "tts_bos_token_id": TTS_BOS_ID,
        "tts_eos_token_id": TTS_EOS_ID,
        "tts_model_size": s.name,
        "tts_model_type": variant,
        "tts_pad_token_id": TTS_PAD_ID,
    }
    return cfg


def _encoder_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """The Mimi encoder config (MimiConfig fields; the defaults are the real Mimi)."""
    cfg: dict[str, Any] = {
        "_frame_rate": 12.5,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "audio_channels": 1,
        "codebook_dim": 256,
        "codebook_size": CODEBOOK_SIZE,
        "compress": 2,
        "dilation_growth_rate": 2,
        "head_dim": 64,
        "hidden_act": "gelu",
        "hidden_size": 512,
        "initializer_range": 0.02,
        "intermediate_size": 2048,
        "kernel_size": 7,
        "last_kernel_size": 3,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "model_type": "mimi",
        "norm_eps": 1e-05,
        "num_attention_heads": 8,
        "num_filters": 64,
        "num_hidden_layers": 8,
        "num_key_value_heads": 8,
        "num_quantizers": 32,
        "num_residual_layers": 1,
        "num_semantic_quantizers": 1,
        "pad_mode": "constant",
        "residual_kernel_size": 3,
        "rope_theta": 10000.0,
        "sampling_rate": SAMPLE_RATE,
        "sliding_window": 250,
        "trim_right_ratio": 1.0,
        "upsample_groups": 512,
        "upsampling_ratios": [8, 6, 5, 4],
        "use_cache": False,
        "use_causal_conv": True,
        "use_conv_shortcut": False,
        "use_streaming": False,
        "vector_quantization_hidden_dimension": 256,
    }
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise AssertionError(f"unknown encoder fields {sorted(unknown)}")
    return cfg | overrides


def _decoder_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """The code2wav decoder config; defaults are the released values.

    num_semantic_quantizers / semantic_codebook_size / vector_quantization_hidden_dimension are in
    the released file but unused by the reference (every codebook has codebook_size entries).
    """
    cfg: dict[str, Any] = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "codebook_dim": 512,
        "codebook_size": CODEBOOK_SIZE,
        "decoder_dim": 1536,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "latent_dim": 1024,
        "layer_scale_initial_scale": 0.01,
        "max_position_embeddings": 8000,
        "num_attention_heads": 16,
        "num_hidden_layers": 8,
        "num_key_value_heads": 16,
        "num_quantizers": NUM_CODE_GROUPS,
        "num_semantic_quantizers": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000,
        "semantic_codebook_size": 4096,
        "sliding_window": 72,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "vector_quantization_hidden_dimension": 512,
    }
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise AssertionError(f"unknown decoder fields {sorted(unknown)}")
    return cfg | overrides


def speech_tokenizer_config(size: str = "tiny") -> dict[str, Any]:
    """speech_tokenizer/config.json contents (the same speech tokenizer serves every variant)."""
    s = _size(size, "custom_voice")
    enc = _encoder_config(s.encoder)
    dec = _decoder_config(s.decoder)
    # Invariants the serving stack relies on, whatever the widths.
    hop = 1
    for r in enc["upsampling_ratios"]:
        hop *= r
    if hop * enc["compress"] != SAMPLES_PER_FRAME or enc["sampling_rate"] != SAMPLE_RATE:
        raise AssertionError("encoder must keep 1920 samples per frame at 24 kHz")
    up = 1
    for r in dec["upsample_rates"] + dec["upsampling_ratios"]:
        up *= r
    if up != SAMPLES_PER_FRAME or enc["num_quantizers"] < NUM_CODE_GROUPS:
        raise AssertionError("decoder must keep 1920 samples per frame and >= 16 encoder quantizers")
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "decode_upsample_rate": SAMPLES_PER_FRAME,
        "decoder_config": dec,
        "encode_downsample_rate": SAMPLES_PER_FRAME,
        "encoder_config": enc,
        "encoder_valid_num_quantizers": NUM_CODE_GROUPS,
        "input_sample_rate": SAMPLE_RATE,
        "model_type": "qwen3_tts_tokenizer_12hz",
        "output_sample_rate": SAMPLE_RATE,
        "torch_dtype": "float32",
        "transformers_version": TRANSFORMERS_VERSION,
    }


def generation_config(greedy: bool = False) -> dict[str, Any]:
    cfg = dict(GENERATION_CONFIG)
    if greedy:
        cfg["do_sample"] = False
        cfg["subtalker_dosample"] = False
    return cfg


SPEECH_TOKENIZER_PREPROCESSOR = {
    "chunk_length_s": None,
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "overlap": None,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": SAMPLE_RATE,
}
SPEECH_TOKENIZER_CONFIGURATION = {"framework": "pytorch", "task": "feature-extraction", "allow_remote": True}
ROOT_PREPROCESSOR = {"processor_class": "Qwen3TTSProcessor"}


# ---- text tokenizer -------------------------------------------------------------------------------
# The tiny BPE is trained over Qwen2's pre-tokenizer split (CHAT_LM_SPLIT, the regex of Qwen2TokenizerFast).
# The reference ends up with a different one at run time (module notes, fix_mistral_regex).
# Added tokens of the Qwen3 / Qwen3-TTS text tokenizer: (id, content, special): Qwen3's, then Qwen3-TTS's.
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    *((151643 + i, t, i < CHAT_LM_SPECIAL) for i, t in enumerate(CHAT_LM_ADDED)),
    (151669, "<|audio_start|>", True),
    (151670, "<|audio_end|>", True),
    (151671, "<tts_pad>", True),
    (151672, "<tts_text_bos>", True),
    (151673, "<tts_text_eod>", True),
    (151674, "<tts_text_bos_single>", True),
    (151675, "<|audio_pad|>", True),
)

# BPE pieces placed at their real Qwen2 ids (so e.g. config.assistant_token_id is right).
_PINNED_IDS = {"assistant": ASSISTANT_TOKEN_ID, "user": 872}
_NUM_MERGES = 480

# Training text for the tiny BPE (fixed: changing it changes every tokenized prompt in the tests).
_CORPUS = """
Hello world. Hello there, how are you today? I am fine, thank you very much.
The quick brown fox jumps over the lazy dog. A speech model turns text into sound.
Please read the following sentence slowly and clearly, with a calm and warm voice.
This is a test of the text to speech system. It should speak in a natural tone.
Good morning! Good evening. The weather is nice and the sky is clear and blue.
She said that the voice was young, bright and happy; he said it sounded old and sad.
We are testing streaming audio: one, two, three, four, five, six, seven, eight, nine, ten.
Speak with a gentle female voice. Speak with a deep male voice. Read it like a story.
The user asks a question and the assistant answers it. The assistant reads the text aloud.
What time is it? It is ten past nine in the morning, and the train leaves at noon.
Thank you for calling. Your request has been received and will be handled soon.
In the beginning there was only silence, and then a single note filled the room.
"""
_CORPUS_BOOST = {
    "assistant": 400,
    "user": 400,
    "\n": 300,
    "\n\n": 50,
    "Hello": 60,
    " world": 60,
    " the": 60,
    " voice": 40,
    " speak": 20,
    ".": 40,
    ",": 30,
    # Camel case is one pre-token under Qwen2's regex but two under the regex the reference really
    # uses (see the module notes on fix_mistral_regex), so this token makes the difference visible.
    "HelloWorld": 30,
}


@lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (Qwen2 uses the same)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def _byte_encode(text: str) -> str:
    table = _bytes_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))


@lru_cache(maxsize=1)
def _learn_merges() -> tuple[tuple[str, str], ...]:
    """Classic BPE over the fixed corpus; ties broken by the pair itself, so fully deterministic."""
    import regex

    counts: Counter[str] = Counter()
    for piece in regex.findall(CHAT_LM_SPLIT, _CORPUS.strip()):
        counts[_byte_encode(piece)] += 1
    for piece, n in _CORPUS_BOOST.items():
        counts[_byte_encode(piece)] += n
    words: dict[tuple[str, ...], int] = {}
    for piece, n in counts.items():
        words[tuple(piece)] = words.get(tuple(piece), 0) + n
    return learn_bpe_merges(words, _NUM_MERGES)


@lru_cache(maxsize=1)
def _vocab() -> dict[str, int]:
    """Byte tokens at ids 0..255 (GPT-2 order, as in Qwen2), merges after, fillers up to 151643."""
    vocab: dict[str, int] = {ch: i for i, ch in enumerate(_bytes_to_unicode().values())}
    pinned_ids = set(_PINNED_IDS.values())
    next_id = 256
    for a, b in _learn_merges():
        tok = a + b
        if tok in vocab:
            continue
        if tok in _PINNED_IDS:
            vocab[tok] = _PINNED_IDS[tok]
            continue
        while next_id in pinned_ids:
            next_id += 1
        vocab[tok] = next_id
        next_id += 1
    missing = set(_PINNED_IDS) - set(vocab)
    if missing:
        raise AssertionError(f"the tiny BPE did not learn {sorted(missing)}")
    used = set(vocab.values())
    # Unreachable fillers (no merge produces them; the pre-tokenizer never yields "<unused_N>" as a
    # single piece), so the added tokens land on their real ids in every tokenizer implementation.
    for i in range(BPE_VOCAB_SIZE):
        if i not in used:
            vocab[f"<unused_{i}>"] = i
    if len(vocab) != BPE_VOCAB_SIZE:
        raise AssertionError("vocab ids must be exactly 0..151642")
    return dict(sorted(vocab.items(), key=lambda kv: kv[1]))


def tokenizer_config() -> dict[str, Any]:
    """tokenizer_config.json in the Qwen2 format (there is no tokenizer.json, as in the release)."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, content, special in ADDED_TOKENS
        },
        "additional_special_tokens": [c for i, c, special in ADDED_TOKENS if special and i != 151643],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "extra_special_tokens": {},
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def _tokenizer_files() -> dict[str, bytes]:
    merges = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in _learn_merges())
    return {
        "vocab.json": json.dumps(_vocab(), ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
        "merges.txt": merges.encode("utf-8"),
        "tokenizer_config.json": json_bytes(tokenizer_config()),
    }


# ---- weights --------------------------------------------------------------------------------------
def _init_module_tensors(init: TensorInit, model: Any, gains: dict[str, float]) -> None:
    """Initialize every parameter / persistent buffer of ``model`` (a meta-device module) by type.

    ``gains`` maps a module-name regex (full match) to a multiplier on that module's weight scale.
    The common types by export.tiny_weights.init_common.
    """
    for m in module_tensors(model, gains=gains):
        full, shapes, kind, gain = m.full, m.shapes, m.kind, m.gain
        if init_common(init, m, linear_bias=0.1, norm_bias=0.1):
            continue
        if kind.endswith("LayerScale"):
            init.normal(full["scale"], shapes["scale"], 0.03, mean=0.3)
        elif kind == "Qwen3TTSTokenizerV2ConvNeXtBlock":
            init.normal(full["gamma"], shapes["gamma"], 0.03, mean=0.3)
        elif kind == "SnakeBeta":
            # log-parameters: alpha = exp(a) sets the frequency, 1/exp(b) the magnitude
            init.normal(full["alpha"], shapes["alpha"], 0.2)
            init.normal(full["beta"], shapes["beta"], 0.2)
        elif kind == "EuclideanCodebook":
            # code2wav codebooks: embedding = embedding_sum / cluster_usage. The module default is
            # all-zero (silent audio); fill both so that the division is exercised.
            init.uniform(full["cluster_usage"], shapes["cluster_usage"], 0.5, 2.0)
            init.normal(full["embedding_sum"], shapes["embedding_sum"], 1.0)
        elif kind == "MimiEuclideanCodebook":
            init.const(full["initialized"], shapes["initialized"], 1.0)
            init.uniform(full["cluster_usage"], shapes["cluster_usage"], 0.5, 2.0)
            init.normal(full["embed_sum"], shapes["embed_sum"], gain)
        else:
            raise AssertionError(f"no init rule for {kind} ({m.name}): {sorted(full)}")
    check_complete(init, model)


def _reference_classes() -> dict[str, Any]:
    from .reference import reference_imports

    with reference_imports():
        from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
        from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Config,
        )
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Model,
        )
    return {
        "config": Qwen3TTSConfig,
        "model": Qwen3TTSForConditionalGeneration,
        "st_config": Qwen3TTSTokenizerV2Config,
        "st_model": Qwen3TTSTokenizerV2Model,
    }


def parameter_counts(variant: str, size: str = "tiny") -> dict[str, int]:
    """Parameter counts by component, from meta-device modules (nothing is allocated).

    Keys: talker (decoder stack, codec embedding, codec head), text (text embedding + projection),
    code_predictor, speaker_encoder (Base only), code2wav (speech tokenizer decoder), speech_encoder.
    """
    import copy

    classes = _reference_classes()
    model = _meta_module(classes["model"], classes["config"](**copy.deepcopy(model_config(variant, size))))
    st = _meta_module(
        classes["st_model"], classes["st_config"](**copy.deepcopy(speech_tokenizer_config(size)))
    )
    counts: dict[str, int] = {}
    for name, t in model.state_dict().items():
        if name.startswith("speaker_encoder."):
            group = "speaker_encoder"
        elif name.startswith("talker.code_predictor."):
            group = "code_predictor"
        elif name.startswith(("talker.model.text_embedding.", "talker.text_projection.")):
            group = "text"
        else:
            group = "talker"
        counts[group] = counts.get(group, 0) + t.numel()
    for name, t in st.state_dict().items():
        group = "code2wav" if name.startswith("decoder.") else "speech_encoder"
        counts[group] = counts.get(group, 0) + t.numel()
    return counts


def _meta_module(cls: Any, config: Any) -> Any:
    import torch

    with torch.device("meta"):
        return cls(config)


def _talker_weights(cfg: dict[str, Any], seed: int, dtype: Any) -> dict[str, Any]:
    import copy

    classes = _reference_classes()
    config = classes["config"](**copy.deepcopy(cfg))
    model = _meta_module(classes["model"], config)
    init = TensorInit(seed, "model", dtype)
    # The x-vector replaces a codec embedding (~N(0, 1)) in the prompt; keep it on that scale.
    _init_module_tensors(init, model, gains={r"speaker_encoder\.fc": 0.2})
    return init.tensors


def _speech_tokenizer_weights(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    import copy

    import torch

    classes = _reference_classes()
    config = classes["st_config"](**copy.deepcopy(cfg))
    model = _meta_module(classes["st_model"], config)
    last = len(model.decoder.decoder) - 1
    gains = {
        # Final code2wav conv: sets the waveform level (RMS ~0.1-0.3, few samples at the +-1 clamp).
        rf"decoder\.decoder\.{last}\.conv": 0.08,
        # Residual units add a damped branch, so the level does not triple per upsampling block.
        r"decoder\.decoder\.\d+\.block\.\d+\.conv2\.conv": 0.3,
        # Mimi codebooks sized like the projected encoder output, so nearest-neighbour codes vary.
        r"encoder\.quantizer\..*\.codebook": 0.5,
    }
    init = TensorInit(seed, "speech_tokenizer", torch.float32)
    _init_module_tensors(init, model, gains)
    return init.tensors


# ---- writing --------------------------------------------------------------------------------------
def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")


def make_tiny(variant: str, out: Path, seed: int = 0, size: str = "tiny", greedy: bool = False) -> Path:
    """Write a deterministic random-weight checkpoint directory and return its path.

    ``out`` may already exist only if it is empty or holds a Qwen3-TTS checkpoint (it is replaced);
    anything else raises FileExistsError. Same arguments -> byte-identical files.
    """
    import torch

    _check_variant(variant)
    _size(size, variant)  # validates size
    cfg = model_config(variant, size)
    st_cfg = speech_tokenizer_config(size)
    dtype = torch.bfloat16 if cfg["torch_dtype"] == "bfloat16" else torch.float32
    with checkpoint_writer(out, f"a Qwen3-TTS {size} {variant} checkpoint", config_model_type("qwen3_tts")) as tmp:
        write_files(tmp, {
            "config.json": json_bytes(cfg),
            "generation_config.json": json_bytes(generation_config(greedy)),
            "preprocessor_config.json": json_bytes(ROOT_PREPROCESSOR),
            **_tokenizer_files(),
            "speech_tokenizer/config.json": json_bytes(st_cfg),
            "speech_tokenizer/configuration.json": json_bytes(SPEECH_TOKENIZER_CONFIGURATION),
            "speech_tokenizer/preprocessor_config.json": json_bytes(SPEECH_TOKENIZER_PREPROCESSOR),
        })
        save_weights(_speech_tokenizer_weights(st_cfg, seed), tmp / "speech_tokenizer" / "model.safetensors")
        weights = _talker_weights(cfg, seed, dtype)
        save_weights(weights, tmp / "model.safetensors")
        del weights
    return Path(out)


def iter_files(path: Path) -> Iterator[Path]:
    """Every file of a checkpoint directory, relative to it, in a stable order."""
    root = Path(path)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            yield p.relative_to(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--greedy", action="store_true", help="generation_config.json with do_sample false")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logger.setLevel(logging.INFO)
    make_tiny(args.variant, args.out, seed=args.seed, size=args.size, greedy=args.greedy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
