"""The Fish Speech family's side of the contract: its fixed facts, exported graphs and request rules.

Fish Speech S2 Pro (fishaudio/s2-pro, model_type `fish_qwen3_omni`; licence: Fish Audio Research
License, non-commercial) is a dual autoregressive model: a Qwen3-like Slow AR over frames samples one
semantic token per frame (its logits masked to the 4096 semantic ids and `<|im_end|>`), a small Fast AR
samples the frame's 9 residual codes one after another, and the frame's next input is the token's
embedding plus the 10 codebook embeddings, over sqrt(11). A modded DAC codec (1 semantic + 9 residual
codebooks, 2048 samples a frame) turns the frames into 44.1 kHz audio; its encoder turns a reference
clip into the codes of a cloning prompt. The reference is vLLM-Omni 0.30.0's fish_speech package.
"""

from __future__ import annotations

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec, streaming_vocoder_spec
from ttscore.contract.kv import lockstep_step_inputs, ragged_step_inputs, step_spec
from ttscore.contract.rules import SEEDED, FamilyRules, KnobRule, RefAudioBounds, budget_and_seed

# The family's K/V tensor names (ttscore.contract.kv).
past_key, past_value, new_key, new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value

FAMILY = "fish_speech"
DISPLAY = "Fish Speech S2 Pro"
HUB_ORG = "fishaudio"
MODEL_TYPE = "fish_qwen3_omni"  # config.json's model_type

SAMPLE_RATE = 44100  # vLLM-Omni dac_utils.DAC_SAMPLE_RATE
NUM_CODEBOOKS = 10  # 1 semantic + 9 residual
# vLLM-Omni hard-codes these: `<|im_end|>` (the one non-semantic id the Slow AR may sample: its stop token)
# and the residual codebooks' size (the Fast AR's logits are cut to their first 1024).
IM_END_ID = 151645
RESIDUAL_CODEBOOK_SIZE = 1024

# Sampling defaults (vLLM-Omni's deploy config fish_qwen3_omni.yaml and FishSpeechFastAR's defaults).
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 30
DEFAULT_TOP_P = 0.9
# The Fast AR (residual codes) always samples at these: vLLM-Omni 0.30.0's runner hands it the model's
# subtalker_sampling_params (none in the deploy file), so `extra_params` reach the Slow AR only.
FAST_AR_SAMPLING = (DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P)
DEFAULT_MAX_NEW_TOKENS = 2048
MAX_NEW_TOKENS_LIMIT = 4096

# The prompt (vLLM-Omni prompt_utils): the special tokens it looks up by name.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VOICE = "<|voice|>"
AUDIO_START = "<|audio_start|>"
AUDIO_END = "<|audio_end|>"
TEXT_ONLY_SYSTEM_PROMPT = "convert the provided text to speech"
CLONE_SYSTEM_PROMPT_PREFIX = "convert the provided text to speech reference to the following:\n\nText:\n"
CLONE_SYSTEM_PROMPT_SUFFIX = "\n\nSpeech:\n"

# --- graphs -------------------------------------------------------------------------------------
# Tables (numpy .npy beside the graphs): the text embedding [V, D], the codebook embeddings
# [codebook_size * num_codebooks, D], the Fast AR's embedding [fast vocab, Df], and (when the widths differ)
# fast_project_in's weight [Df, D] and bias [Df].
EMBEDDINGS = "embeddings"
CODEBOOK_EMBEDDINGS = "codebook_embeddings"
FAST_EMBEDDINGS = "fast_embeddings"
PROJECT_IN_WEIGHT = "fast_project_in_weight"
PROJECT_IN_BIAS = "fast_project_in_bias"
GRAPH_NAMES = ("slow_step", "fast_step", "dac_stream", "dac_encode")


def slow_step_spec(layers: int, dim: int, kv_heads: int, head_dim: int, candidates: int) -> GraphSpec:
    """The Slow AR over explicit past K/V (prefill, then one frame a step; `attention_mask` [B, P + T] marks valid
    slots of ragged rows): the last position's final-normed hidden state [B, D] and the logits of the ids it may
    sample [B, candidates] (the semantic ids in order, then <|im_end|>), the new K/V (rotated)."""
    return step_spec(
        "slow_step", ragged_step_inputs(dim),
        (
            TensorSpec("hidden", "float32", ("batch", dim)),
            TensorSpec("logits", "float32", ("batch", candidates)),
        ),
        layers, kv_heads, head_dim,
    )


def fast_step_spec(layers: int, dim: int, kv_heads: int, head_dim: int) -> GraphSpec:
    """The Fast AR over its own past K/V (every row of a batch at the same step): the last position's logits
    over the residual codes [B, RESIDUAL_CODEBOOK_SIZE] and the new K/V."""
    return step_spec(
        "fast_step", lockstep_step_inputs(dim),
        (
            TensorSpec("logits", "float32", ("batch", RESIDUAL_CODEBOOK_SIZE)),
        ),
        layers, kv_heads, head_dim,
    )


def dac_stream_spec(state_size: int) -> GraphSpec:
    """The DAC decoder as an exact streaming graph: codes [B, 10, n] + `state` [B, S] (zeros start an utterance;
    each row at its own frame count) -> pcm [B, n * samples_per_frame] + new_state. Chunks decoded
    one after another equal one whole decode."""
    return streaming_vocoder_spec(
        "dac_stream", TensorSpec("codes", "int64", ("batch", NUM_CODEBOOKS, "frames")), state_size
    )


def dac_encode_spec() -> GraphSpec:
    """The DAC encoder: audio [B, samples] at 44.1 kHz (zero-padded to whole frames) -> codes [B, 10, frames]."""
    return GraphSpec(
        "dac_encode",
        (TensorSpec("audio", "float32", ("batch", "samples")),),
        (TensorSpec("codes", "int64", ("batch", NUM_CODEBOOKS, "frames")),),
    )


# --- requests -----------------------------------------------------------------------------------
# The project's sampling noise comes from the request's seed (42 without one: serving is deterministic by
# default); vLLM-Omni's comes from vLLM's sampler, which a per-request seed seeds.
DEFAULT_SEED = 42
DEFAULT_INITIAL_CHUNK_FRAMES = 4
DEFAULT_CHUNK_FRAMES = 25
MAX_TEXT_CHARS = 4096
TASK = "Base"
DEFAULT_VOICE = "default"  # the model's own voice (text-only prompt), like omitting `voice`
# vLLM-Omni's sampling knobs (the Speech API's `extra_params`, applied to the sampling params): inclusive ranges.
KNOBS = (
    KnobRule("temperature", 0.0, 10.0),  # 0: greedy (vLLM takes any temperature >= 0; the project bounds it)
    KnobRule("top_k", 0, 4097, integer=True),  # 0: off (the Slow AR's 4096 semantic ids + <|im_end|>)
    KnobRule("top_p", 0.0, 1.0, lo_open=True),
)
UNSUPPORTED_FIELDS = ("speaker_embedding", "instructions", "language", "task_type", "x_vector_only_mode",
                      "non_streaming_mode", "initial_codec_chunk_frames")
REF_AUDIO = RefAudioBounds(min_rate=8000, max_rate=192000, min_seconds=0.1, max_seconds=60.0)

RULES = FamilyRules(
    family=FAMILY,
    tasks=(TASK,),
    fields=budget_and_seed(MAX_NEW_TOKENS_LIMIT, DEFAULT_MAX_NEW_TOKENS, DEFAULT_SEED),
    display_name=DISPLAY,
    unsupported=UNSUPPORTED_FIELDS,
    ref_audio=REF_AUDIO,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
    extra_params=KNOBS,
    sampling=SEEDED,  # Slow/Fast AR sampling noise from the request's seed, 42 without one
    auto_language=False,  # `language` is refused, "Auto" included
)

# Its speech_generation inputs. Cloning: the reference clip's DAC codes [frames, 10] from the family's
# voice-features model (dac_encoder) and its transcript (the runtime's request fields `ref_codes`, `ref_text`).
REF_DAC_CODES = wire.TensorIO("ref_dac_codes", "INT64", (-1, NUM_CODEBOOKS), True,
                              "Fish Speech: reference DAC codes [frames, 10] from dac_encoder (cloning).")
REF_TEXT = wire.string_input("ref_text", "Fish Speech: transcript of the reference clip (cloning; required with it).")
# The voice-features Triton model (one per served checkpoint): reference audio -> its DAC codes.
ENCODER_MODEL = "dac_encoder"
ENCODER_INPUTS: tuple[wire.TensorIO, ...] = wire.clip_inputs("Its sample rate (resampled to 44.1 kHz).")
ENCODER_OUTPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("ref_dac_codes", "INT64", (-1, NUM_CODEBOOKS),
                  doc="Fish Speech reference codes [frames, 10] for speech_generation's ref_dac_codes."),
)
WIRE = wire.FamilyWire(FAMILY, (wire.TEXT, wire.MAX_NEW_TOKENS, wire.SEED, wire.TEMPERATURE, wire.TOP_K, wire.TOP_P,
                                REF_DAC_CODES, REF_TEXT),
                       {ENCODER_MODEL: (ENCODER_INPUTS, ENCODER_OUTPUTS)})
