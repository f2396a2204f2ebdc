"""The Breeze-TTS-2 family's side of the contract: fixed facts, exported graphs and request rules.

Breeze-TTS-2 (BreezeBlue/Breeze-TTS-2) speaks with the Qwen3-TTS 12 Hz codec (16 codebooks of 2048
codes, 24 kHz, 1920 samples per frame). Per request a T5Gemma2 text encoder runs once per text
segment (bidirectional), `text_encoder_proj` maps it into a Qwen3 backbone that takes only
embeddings; per frame the backbone's head picks code 0 (or EOS) and a Llama depth decoder the 15
others. The backbone's audio input is the sum of the frame's 16 code embeddings. Decoding is greedy
(the Speech API's rule for this family). export/breeze_tts_2/README.md has the whole design.
"""

from __future__ import annotations

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.kv import lockstep_step_inputs, ragged_step_inputs, step_spec
from ttscore.contract.rules import GREEDY, FamilyRules, FieldRule, KnobRule, RefAudioBounds, seed_field

# The family's K/V tensor names (ttscore.contract.kv).
past_key, past_value, new_key, new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value

FAMILY = "breeze_tts_2"

NUM_CODEBOOKS = 16  # per frame (the checkpoint must say the same)
CODEBOOK_VOCAB = 2051  # rows per codebook table: 2048 codes + 3 reserved (masked)
CODEBOOK_SIZE = 2048  # codes the codec decodes (ids >= this are never chosen)
EOS_CODE = CODEBOOK_VOCAB  # the backbone head's extra row (index 2051): end of speech
CODEBOOK_EOS_TOKEN_ID = 0  # each codebook's code in the all-EOS frame that closes a reference clip
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # 12.5 frames per second

# Prompt text (vLLM-Omni prompt builder): a text segment is "[S<n>]" + optional instruction + text.
VOICES = tuple(f"S{i}" for i in range(10))
DEFAULT_VOICE = "S0"
INSTRUCTION_BOS = "<ins_bos>"
INSTRUCTION_EOS = "<ins_eos>"
# The instruction of a request without one (vLLM-Omni 0.30.0, breeze_tts_2/prompt.py DEFAULT_INSTRUCTION).
DEFAULT_INSTRUCTION = "Speak clearly and naturally."
AUDIO_TAG = "<|AUDIO|>"  # the tiny tokenizer's reference-frame token (a prompt row's placeholder id only)
AUDIO_EOS = "<|audio_eos|>"  # after the reference frames: the all-EOS frame
MODES = ("plain", "design", "clone", "direction")

# Greedy decoding keeps the reference's repetition penalty on the code-0 history (vLLM-Omni applies
# its default 1.1 at temperature 0 as well): export/breeze_tts_2/README.md, "Decoding".
REPETITION_PENALTY = 1.1

# Request rules.
MAX_NEW_TOKENS_LIMIT = 4096  # frames (80 ms each)
DEFAULT_MAX_NEW_TOKENS = 1500  # vLLM-Omni's max_tokens
MAX_CONTEXT = 2048  # backbone positions (prompt + frames); max_position_embeddings of the released config
MAX_CHUNK_FRAMES = 300
DEFAULT_CHUNK_FRAMES = 25
DEFAULT_INITIAL_CHUNK_FRAMES = 1
MAX_TEXT_CHARS = 4096

# Speech API fields this family does not take at all (400 naming the field).
UNSUPPORTED_FIELDS = ("negative_prompt", "temperature", "top_p", "top_k", "language", "speaker_embedding",
                      "x_vector_only_mode", "non_streaming_mode")
# Fields accepted only at one value (400 naming the field otherwise).
FIXED_VALUES: dict[str, float] = {"speed": 1.0, "sample_rate": SAMPLE_RATE}
# `extra_params` keys vLLM-Omni reads for this family, accepted only at the value greedy decoding means
# (the spec: guidance_scale/cfg_scale other than 1.0 rejected); temperature/top_p/top_k/negative_prompt
# and any other key: 400 naming `extra_params`.
GREEDY_PARAMS: dict[str, float] = {"guidance_scale": 1.0, "cfg_scale": 1.0}
MAX_REF_CLIPS = 1
REF_AUDIO = RefAudioBounds(min_rate=8000, max_rate=192000, min_seconds=0.1, max_seconds=60.0)

TASKS = ("CustomVoice", "VoiceDesign", "Base")  # the mode comes from the fields, not the task
RULES = FamilyRules(
    family=FAMILY,
    sampling=GREEDY,  # greedy decoding: no random draw (model.py)
    tasks=TASKS,
    fields=(
        FieldRule("max_new_tokens", 1, MAX_NEW_TOKENS_LIMIT, DEFAULT_MAX_NEW_TOKENS),
        FieldRule("initial_codec_chunk_frames", 1, MAX_CHUNK_FRAMES, DEFAULT_INITIAL_CHUNK_FRAMES),
        FieldRule("codec_chunk_frames", 1, MAX_CHUNK_FRAMES, DEFAULT_CHUNK_FRAMES),
        seed_field(),  # accepted; greedy decoding makes it moot
    ),
    display_name="Breeze-TTS-2",
    unsupported=UNSUPPORTED_FIELDS,
    default_voice=DEFAULT_VOICE,
    ref_audio=REF_AUDIO,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
    variants={"base": "Base"},
    extra_params=tuple(KnobRule(name, value, value) for name, value in GREEDY_PARAMS.items()),
)


def mode_of(instructions: str | None, has_reference: bool) -> str:
    """The prompt mode the fields choose."""
    if has_reference:
        return "direction" if instructions else "clone"
    return "design" if instructions else "plain"


# --- graphs -------------------------------------------------------------------------------------


def text_encoder_spec(hidden: int) -> GraphSpec:
    """One pass per text segment: ids [B, T] (padding marked 0 in attention_mask) -> the projected
    encoder states [B, T, backbone hidden] (text_encoder_proj applied)."""
    return GraphSpec(
        "text_encoder",
        (TensorSpec("input_ids", "int64", ("batch", "tokens")), TensorSpec("attention_mask", "int64", ("batch", "tokens"))),
        (TensorSpec("embeds", "float32", ("batch", "tokens", hidden)),),
    )


def backbone_spec(layers: int, hidden: int, kv_heads: int, head_dim: int, head_rows: int) -> GraphSpec:
    """Prefill (T = prompt chunk) and decode (T = 1): `attention_mask` [B, P + T] marks valid past
    slots; the new positions are causal among themselves. Outputs the new positions' hidden states,
    the code-0 head's logits of the last one (reserved rows masked) and the new K/V (post-RoPE)."""
    return step_spec(
        "backbone", ragged_step_inputs(hidden),
        (
            TensorSpec("hidden", "float32", ("batch", "tokens", hidden)),
            TensorSpec("logits", "float32", ("batch", head_rows)),
        ),
        layers, kv_heads, head_dim,
    )


def depth_spec(layers: int, embed: int, hidden: int, kv_heads: int, head_dim: int) -> GraphSpec:
    """The depth decoder's transformer: embeddings in the audio-embedding space (position 0 the
    backbone's hidden state, then code embeddings) -> final-norm hidden states; the per-codebook
    heads are a table applied by the runtime. Positions are the cache positions (0..15)."""
    return step_spec(
        "depth_decoder", lockstep_step_inputs(embed),
        (
            TensorSpec("hidden", "float32", ("batch", "tokens", hidden)),
        ),
        layers, kv_heads, head_dim,
    )


# Tables (numpy .npy beside the graphs): the flat audio embedding [16 * 2051, E] (row code + i * 2051),
# the depth heads [15, depth hidden, 2051], and the backbone-hidden projector [E, H] when E != H.
AUDIO_EMBEDDINGS = "audio_embeddings"
DEPTH_HEADS = "depth_heads"
HIDDEN_PROJECTOR = "hidden_projector"
# The codec graphs come from the checkpoint's audio_tokenizer/ (the Qwen3-TTS 12 Hz tokenizer).
AUDIO_TOKENIZER_DIR = "audio_tokenizer"
GRAPH_NAMES = ("text_encoder", "backbone", "depth_decoder", "code2wav_stream", "speech_encoder")


# --- wire: speech_generation inputs and the voice features (ttscore.contract.tensors) -----------

_BREEZE_SPEECH_INPUTS: tuple[wire.TensorIO, ...] = (
    wire.TEXT,
    wire.string_input("speaker", "Voice tag S0..S9 (default S0)."),
    wire.string_input("instructions", "Voice design / direction instruction."),
    wire.string_input("ref_text", "Transcript of the reference clip (clone, direction)."),
    wire.TensorIO("ref_codes", "INT64", (-1, NUM_CODEBOOKS), True, "Reference codes [T,16] from voice_features."),
    wire.MAX_NEW_TOKENS,
    wire.SEED,
    wire.INITIAL_CHUNK_FRAMES,
    wire.CHUNK_FRAMES,
)
# The family's voice features: a reference clip (any rate) -> its codec codes, through the speech
# encoder of the checkpoint's own audio_tokenizer (one model per served checkpoint).
SPEECH_ENCODER = "breeze_speech_encoder"
SPEECH_ENCODER_INPUTS: tuple[wire.TensorIO, ...] = wire.clip_inputs("Its sample rate (resampled to 24 kHz).")
SPEECH_ENCODER_OUTPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("ref_codes", "INT64", (-1, NUM_CODEBOOKS), doc="Reference codes [T, 16] for speech_generation's ref_codes."),
)
WIRE = wire.FamilyWire(FAMILY, _BREEZE_SPEECH_INPUTS,
                       {SPEECH_ENCODER: (SPEECH_ENCODER_INPUTS, SPEECH_ENCODER_OUTPUTS)})
