"""The Qwen3-TTS 12 Hz family's side of the contract: its fixed facts, exported graphs and request rules.

Everything here is shared by export, the runtime, the Triton models and the gateway, so each
constant and rule has this one home.
"""

from __future__ import annotations

from collections.abc import Mapping

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec, streaming_vocoder_spec
from ttscore.contract.rules import SEEDED, FamilyRules, FieldRule, KnobRule, RefAudioBounds, seed_field

FAMILY = "qwen3_tts"
VARIANTS = ("custom_voice", "voice_design", "base")
# Spec task names <-> checkpoint variants.
TASK_OF_VARIANT = {"custom_voice": "CustomVoice", "voice_design": "VoiceDesign", "base": "Base"}
VARIANT_OF_TASK = {task: variant for variant, task in TASK_OF_VARIANT.items()}

NUM_CODE_GROUPS = 16  # codebooks per frame
SAMPLE_RATE = 24000  # of the vocoder's output (and the speech encoder's input)
SAMPLES_PER_FRAME = 1920  # 12.5 frames per second

# Request rules: server bounds of the per-request knobs (outside them a request is rejected, never
# clamped) and their defaults. The gateway checks them in API field names before any work starts and
# the generation model checks them again on its own wire (a direct gRPC client skips the gateway).
# 1..4096 as vLLM-Omni 0.30.0's adapter bounds a request (the spec gives the default only).
MAX_NEW_TOKENS_LIMIT = 4096
DEFAULT_MAX_NEW_TOKENS = 2048
MAX_CHUNK_FRAMES = 300
DEFAULT_CHUNK_FRAMES = 25
DEFAULT_INITIAL_CHUNK_FRAMES = 1
MAX_TEXT_CHARS = 4096  # per generation (OpenAI's limit for `input`)

# Reference audio for voice cloning (voice_features and uploads): accepted sample rates and length.
REF_AUDIO_MIN_RATE = 8000
REF_AUDIO_MAX_RATE = 192000
REF_AUDIO_MIN_SECONDS = 0.1
REF_AUDIO_MAX_SECONDS = 60.0

# `extra_params` as vLLM-Omni 0.30.0 applies them: to the talker's sampling (code 0) only; the code predictor
# keeps the checkpoint's subtalker settings. Temperature 0 is greedy (vLLM's rule).
KNOBS = (
    KnobRule("temperature", 0.0, 100.0),
    KnobRule("top_k", 0, 1 << 30, integer=True),  # 0: off
    KnobRule("top_p", 0.0, 1.0, lo_open=True),
)


def talker_sampling(knobs: Mapping[str, int | float]) -> dict[str, object]:
    """speech_generation's talker sampling inputs for checked `extra_params`, as vLLM's sampler reads them:
    a temperature samples at it (0: greedy) whatever the checkpoint's generation_config says."""
    out: dict[str, object] = dict(knobs)
    if "temperature" in out:
        out["do_sample"] = out["temperature"] != 0
        if out["temperature"] == 0:
            del out["temperature"]
    return out


RULES = FamilyRules(
    family=FAMILY,
    sampling=SEEDED,  # one uniform per code from the request's default_rng(seed)
    tasks=tuple(TASK_OF_VARIANT.values()),
    fields=(
        FieldRule("max_new_tokens", 1, MAX_NEW_TOKENS_LIMIT, DEFAULT_MAX_NEW_TOKENS),
        FieldRule("initial_codec_chunk_frames", 1, MAX_CHUNK_FRAMES, DEFAULT_INITIAL_CHUNK_FRAMES),
        FieldRule("codec_chunk_frames", 1, MAX_CHUNK_FRAMES, DEFAULT_CHUNK_FRAMES),
        seed_field(),
    ),
    exclusive={"Base": ("ref_audio", "ref_text", "x_vector_only_mode")},
    required={"VoiceDesign": ("instructions",)},
    display_name="Qwen3-TTS",
    default_voice="vivian",
    ref_audio=RefAudioBounds(REF_AUDIO_MIN_RATE, REF_AUDIO_MAX_RATE, REF_AUDIO_MIN_SECONDS, REF_AUDIO_MAX_SECONDS),
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
    variants=TASK_OF_VARIANT,
    extra_params=KNOBS,
)


# --- talker -------------------------------------------------------------------------------------
# One graph serves prefill (T = prompt length, P = 0) and decode (T = 1). Past K/V of a batch may be
# ragged: `attention_mask` marks the valid past slots (1) and padding (0); the T new tokens are always
# valid and causal among themselves. Outputs hold only the new tokens' K/V (post-RoPE), which the
# runtime appends to each request's own cache.


talker_past_key, talker_past_value = kv.past_key, kv.past_value
talker_new_key, talker_new_value = kv.new_key, kv.new_value


def talker_spec(num_layers: int, hidden: int, kv_heads: int, head_dim: int, codec_vocab: int) -> GraphSpec:
    past = []
    new = []
    for i in range(num_layers):
        past += [
            TensorSpec(talker_past_key(i), "float32", ("batch", kv_heads, "past", head_dim)),
            TensorSpec(talker_past_value(i), "float32", ("batch", kv_heads, "past", head_dim)),
        ]
        new += [
            TensorSpec(talker_new_key(i), "float32", ("batch", kv_heads, "seq", head_dim)),
            TensorSpec(talker_new_value(i), "float32", ("batch", kv_heads, "seq", head_dim)),
        ]
    return GraphSpec(
        name="talker",
        inputs=(
            TensorSpec("inputs_embeds", "float32", ("batch", "seq", hidden)),
            TensorSpec("attention_mask", "int64", ("batch", "total")),  # total = past + seq
            TensorSpec("position_ids", "int64", ("batch", "seq")),
            *past,
        ),
        outputs=(
            TensorSpec("logits", "float32", ("batch", codec_vocab)),  # last position only
            TensorSpec("hidden", "float32", ("batch", hidden)),  # last position, after final norm
            *new,
        ),
    )


# --- code predictor -----------------------------------------------------------------------------
# One call per frame: the 5-layer predictor prefilled with [talker hidden, embed(code0)] and then
# stepped G-2 times, all unrolled in the graph with its own KV cache. Sampling happens inside the
# graph: `noise` holds one uniform(0,1) draw per generated code, consumed by inverse-CDF sampling
# after temperature / top-k / top-p, so a request is reproducible from its seed. Rows with
# do_sample = false take the argmax.


def code_predictor_spec(hidden: int, num_groups: int) -> GraphSpec:
    g = num_groups - 1
    return GraphSpec(
        name="code_predictor",
        inputs=(
            TensorSpec("hidden", "float32", ("batch", hidden)),
            TensorSpec("code0", "int64", ("batch",)),
            TensorSpec("noise", "float32", ("batch", g)),
            TensorSpec("do_sample", "bool", ("batch",)),
            TensorSpec("temperature", "float32", ("batch",)),
            TensorSpec("top_k", "int64", ("batch",)),
            TensorSpec("top_p", "float32", ("batch",)),
        ),
        outputs=(
            TensorSpec("codes", "int64", ("batch", g)),  # codes of groups 1..G-1
            # talker codec_embedding(code0) + sum of predictor embeddings of codes 1..G-1:
            # the codec part of the next talker input.
            TensorSpec("codec_embed_sum", "float32", ("batch", hidden)),
        ),
    )


# --- code2wav -----------------------------------------------------------------------------------
# Exact streaming: a pure function (codes, state, position) -> (pcm, new_state). `state` is one
# flat float vector per stream holding every causal-conv history, the transposed-conv overlap and
# the last (window - 1) post-RoPE K/V of each transformer layer; its layout is fixed at export
# (manifest: code2wav.state_size) and zeros are the initial state. `position` is the number of
# frames already decoded on that stream. Any chunking gives the same audio as one whole decode.


def code2wav_stream_spec(num_groups: int, state_size: int, samples_per_frame: int) -> GraphSpec:
    return streaming_vocoder_spec("code2wav_stream", TensorSpec("codes", "int64", ("batch", "frames", num_groups)),
                                  state_size, TensorSpec("position", "int64", ("batch",)))


def code2wav_spec(num_groups: int) -> GraphSpec:
    """Whole-utterance decode (the reference decoder's forward, no chunking)."""
    return GraphSpec(
        name="code2wav",
        inputs=(TensorSpec("codes", "int64", ("batch", "frames", num_groups)),),
        outputs=(TensorSpec("pcm", "float32", ("batch", "samples")),),
    )


# --- Base (voice cloning) -----------------------------------------------------------------------


def speaker_encoder_spec(mel_bins: int, embed_dim: int) -> GraphSpec:
    return GraphSpec(
        name="speaker_encoder",
        inputs=(TensorSpec("mels", "float32", ("batch", "mel_frames", mel_bins)),),
        outputs=(TensorSpec("x_vector", "float32", ("batch", embed_dim)),),
    )


def speech_encoder_spec(num_groups: int) -> GraphSpec:
    """Mimi encoder: 24 kHz audio of any length -> ceil(samples / samples_per_frame) frames of codes.

    Feed the clip unpadded: zero-padding it first changes the last frame's codes vs the reference."""
    return GraphSpec(
        name="speech_encoder",
        inputs=(TensorSpec("audio", "float32", ("batch", "samples")),),
        outputs=(TensorSpec("codes", "int64", ("batch", "frames", num_groups)),),
    )


# --- precomputed tables (numpy .npy, memory-mapped at serve time) -------------------------------
# text_embeddings.npy : [text_vocab, hidden]   text_projection(text_embedding(id)) for every id
# codec_embeddings.npy: [codec_vocab, hidden]  talker codec_embedding
# group_embeddings.npy: [G-1, codebook, hidden] code predictor codec_embedding tables (groups 1..G-1)
# mel_filters.npy     : [mel_bins, n_fft//2+1] slaney mel basis for the speaker encoder (Base)
TABLES = ("text_embeddings", "codec_embeddings", "group_embeddings")
MEL_FILTERS = "mel_filters"

# Speaker-encoder front end (reference: Qwen3TTSForConditionalGeneration.extract_speaker_embedding).
MEL_N_FFT = 1024
MEL_HOP = 256
MEL_WIN = 1024
MEL_BINS = 128
MEL_FMIN = 0
MEL_FMAX = 12000


# --- wire: speech_generation inputs and the voice_features ensemble (ttscore.contract.tensors) ----

_QWEN_SPEECH_INPUTS: tuple[wire.TensorIO, ...] = (
    wire.TEXT,
    wire.string_input("task_type", "custom_voice, voice_design or base; the checkpoint's variant when absent."),
    wire.string_input("speaker", "Preset speaker name (CustomVoice)."),
    wire.string_input("language", "Language name or Auto."),
    wire.string_input("instructions", "Style / voice description (VoiceDesign, 1.7B CustomVoice)."),
    wire.string_input("ref_text", "Transcript of the reference audio (Base ICL)."),
    wire.TensorIO("ref_codes", "INT64", (-1, NUM_CODE_GROUPS), True, "Reference codes [T,16] from voice_features."),
    wire.TensorIO("x_vector", "FP32", (-1,), True, "Speaker embedding from voice_features (Base)."),
    wire.TensorIO("x_vector_only", "BOOL", (1,), True, "Clone from the x-vector only (no ICL)."),
    wire.TensorIO("non_streaming_mode", "BOOL", (1,), True, "Whole text in the prompt (model default when absent)."),
    wire.MAX_NEW_TOKENS,
    wire.SEED,
    wire.TensorIO("do_sample", "BOOL", (1,), True, "False = greedy."),
    wire.TensorIO("temperature", "FP32", (1,), True, "Sampling knobs: default from generation_config.json."),
    wire.TensorIO("top_k", "INT32", (1,), True, ""),
    wire.TensorIO("top_p", "FP32", (1,), True, ""),
    wire.TensorIO("repetition_penalty", "FP32", (1,), True, ""),
    wire.TensorIO("subtalker_do_sample", "BOOL", (1,), True, "Code-predictor sampling switch."),
    wire.TensorIO("subtalker_temperature", "FP32", (1,), True, "Code-predictor sampling knobs."),
    wire.TensorIO("subtalker_top_k", "INT32", (1,), True, ""),
    wire.TensorIO("subtalker_top_p", "FP32", (1,), True, ""),
    wire.INITIAL_CHUNK_FRAMES,
    wire.CHUNK_FRAMES,
)
VOICE_FEATURES = "voice_features"
VOICE_FEATURES_INPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("audio", "FP32", (-1,), doc="Reference audio, mono float32 in [-1, 1]."),
    wire.TensorIO("sample_rate", "INT32", (1,), doc="Its sample rate (resampled to 24 kHz)."),
)
VOICE_FEATURES_OUTPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("x_vector", "FP32", (-1,), doc="Speaker embedding (Base checkpoints)."),
    wire.TensorIO("ref_codes", "INT64", (-1, NUM_CODE_GROUPS), doc="Reference codes for in-context cloning."),
)
WIRE = wire.FamilyWire(FAMILY, _QWEN_SPEECH_INPUTS, {VOICE_FEATURES: (VOICE_FEATURES_INPUTS, VOICE_FEATURES_OUTPUTS)})
