"""The Voxtral TTS family's side of the contract: its fixed facts, exported graphs and request rules.

Voxtral TTS (mistralai/Voxtral-4B-TTS-2603; the reference is vLLM-Omni 0.30.0's plain-torch
`FlowMatchingAudioTransformer` and `VoxtralTTSAudioTokenizer` over Hugging Face's `MistralModel`) is a
Ministral language model whose last hidden state gives, per 80 ms frame, a semantic code (argmax of
`semantic_codebook_output`) and 36 acoustic codes (a small bidirectional flow-matching transformer,
Euler steps with classifier-free guidance, quantised to 21 levels); the 37 codes' embeddings, summed,
are the next input. Mistral's causal codec turns the frames into 24 kHz audio. Preset voices only
(the public checkpoint has no codec encoder).
"""

from __future__ import annotations

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec, streaming_vocoder_spec
from ttscore.contract.kv import ragged_step_inputs, step_spec
from ttscore.contract.rules import SEEDED, FamilyRules, KnobRule, budget_and_seed

# The family's K/V tensor names (ttscore.contract.kv).
past_key, past_value, new_key, new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value

FAMILY = "voxtral_tts"
DISPLAY = "Voxtral TTS"
HUB_ORG = "mistralai"

# vLLM-Omni's AudioSpecialTokens: the first two ids of every audio codebook.
EMPTY_AUDIO = 0
END_AUDIO = 1
NUM_AUDIO_SPECIAL = 2
# vLLM-Omni's parser: params.json without acoustic_transformer_args.n_decoding_steps gets 7 (with a warning).
DEFAULT_DECODING_STEPS = 7
DEFAULT_CFG_ALPHA = 1.2  # VoxtralTTSForConditionalGeneration._DEFAULT_CFG_ALPHA
MAX_NEW_TOKENS_LIMIT = 4096

# --- graphs -------------------------------------------------------------------------------------
# Tables (numpy .npy beside the graphs): the text token embedding [V, D], the 37 codebooks' summed-input
# table [rows, D] (row = code with its +2 offset + the codebook's offset), and per preset voice its
# prompt rows ([frames, D], `voice_<name>`).
TOK_EMBEDDINGS = "tok_embeddings"
AUDIO_EMBEDDINGS = "audio_embeddings"
VOICE_TABLE_PREFIX = "voice_"
GRAPH_NAMES = ("lm_step", "velocity", "codec_stream")


def lm_step_spec(layers: int, dim: int, kv_heads: int, head_dim: int) -> GraphSpec:
    """Prefill (T = the prompt) and decode (T = 1) over explicit past K/V: `attention_mask` [B, P + T]
    marks valid slots (rows are ragged); the new positions are causal among themselves. Outputs the
    last position's final-normed hidden state [B, D], its semantic code [B] (vLLM-Omni's id: 1 is
    [END_AUDIO], 2.. the codes +2) and the new K/V (rotated, Mistral's interleaved layout)."""
    return step_spec(
        "lm_step", ragged_step_inputs(dim),
        (
            TensorSpec("hidden", "float32", ("batch", dim)),
            TensorSpec("semantic_code", "int64", ("batch",)),
        ),
        layers, kv_heads, head_dim,
    )


def velocity_spec(n_acoustic: int, dim: int) -> GraphSpec:
    """One Euler step's guided velocity: x [B, n], t [B], hidden [B, D], cfg_alpha [B] -> v [B, n]
    (conditional and unconditional rows batched inside)."""
    return GraphSpec(
        "velocity",
        (
            TensorSpec("x", "float32", ("batch", n_acoustic)),
            TensorSpec("t", "float32", ("batch",)),
            TensorSpec("hidden", "float32", ("batch", dim)),
            TensorSpec("cfg_alpha", "float32", ("batch",)),
        ),
        (TensorSpec("velocity", "float32", ("batch", n_acoustic)),),
    )


def codec_stream_spec(n_codebooks: int, state_size: int) -> GraphSpec:
    """Mistral's codec as an exact streaming graph: codes [B, 1 + n_acoustic, T] (ids without the +2
    offset) + `state` [B, S] (zeros start an utterance) -> pcm [B, T * samples_per_frame] + new_state.
    Chunks decoded one after another equal one whole decode."""
    return streaming_vocoder_spec(
        "codec_stream", TensorSpec("codes", "int64", ("batch", n_codebooks, "frames")), state_size
    )


# --- requests -----------------------------------------------------------------------------------
DEFAULT_MAX_NEW_TOKENS = 2048  # frames (vLLM-Omni's deploy: max_tokens 2048)
# The project's x0 comes from the request's seed; a request without one is random, as in vLLM-Omni 0.30.0
# (its x0 comes from torch's global RNG; its deploy file pins no seed): the gateway draws one (X-Seed).
CFG_ALPHA_KNOB = KnobRule("cfg_alpha", 0.0, 10.0)  # extra_params.cfg_alpha (vLLM-Omni takes any float; the project bounds it)
DEFAULT_INITIAL_CHUNK_FRAMES = 4
DEFAULT_CHUNK_FRAMES = 25
MAX_TEXT_CHARS = 4096
TASK = "Base"
UNSUPPORTED_FIELDS = ("ref_audio", "ref_text", "speaker_embedding", "instructions", "language", "task_type",
                      "x_vector_only_mode", "non_streaming_mode", "initial_codec_chunk_frames")
RULES = FamilyRules(
    family=FAMILY,
    sampling=SEEDED,  # flow-matching x0 from PCG64(seed); without one the gateway draws it
    tasks=(TASK,),
    fields=budget_and_seed(MAX_NEW_TOKENS_LIMIT, DEFAULT_MAX_NEW_TOKENS),
    display_name=DISPLAY,
    unsupported=UNSUPPORTED_FIELDS,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=24000,
    extra_params=(CFG_ALPHA_KNOB,),
    auto_language=False,  # `language` is refused, "Auto" included
)

VOICE = wire.string_input("voice", "Voxtral TTS: preset voice (one of the checkpoint's, lower-case accepted; required).")
CFG_ALPHA = wire.TensorIO("cfg_alpha", "FP32", (1,), True,
                          "Voxtral TTS: classifier-free guidance of the flow matching (default 1.2, 0..10).")
WIRE = wire.FamilyWire(FAMILY, (wire.TEXT, VOICE, wire.MAX_NEW_TOKENS, wire.SEED, CFG_ALPHA))
