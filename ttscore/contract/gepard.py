"""The Gepard-1.0 family's side of the contract: fixed facts, exported graphs and request rules.

Gepard-1.0 (nineninesix/gepard-1.0; the reference is vLLM-Omni 0.30.0's talker over Hugging Face's
`Qwen3_5TextModel`) is one autoregressive stage: a Qwen3.5 full-attention backbone (gated attention,
q/k RMSNorm, zero-centred norms) whose last hidden state feeds 32 parallel FSQ heads (levels
[8, 7, 6, 6] x 8, 216 logits) and a stop head; every head is sampled by Gumbel-max at temperature 0.3
from the request's own seeded noise, and the 32 codes come back as the next input through a small
embedding MLP. NVIDIA's NanoCodec (purely causal convolutions) turns the frames into 22.05 kHz audio.
Zero-shot default voice only (the learned `null_prefix`).
"""

from __future__ import annotations

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec, streaming_vocoder_spec
from ttscore.contract.kv import ragged_step_inputs, step_spec
from ttscore.contract.rules import SEEDED, FamilyRules, budget_and_seed

# The family's K/V tensor names (ttscore.contract.kv).
past_key, past_value, new_key, new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value

FAMILY = "gepard"
SAMPLE_RATE = 22050  # NanoCodec's output
SAMPLES_PER_FRAME = 1024  # 21.5 frames per second
NUM_CODEBOOKS = 32  # FSQ channels per frame (8 groups x 4 dimensions)
FSQ_LEVELS = (8, 7, 6, 6)  # per group
NUM_GROUPS = 8
TEMPERATURE = 0.3  # GepardConfig.temperature (every head, Gumbel-max, no top-k/top-p)
STOP_THRESHOLD = 0.5  # sigmoid(stop head) > threshold ends the utterance (never on the first frame)
NUM_SPEAKER_SLOTS = 8  # prompt slots replaced by null_prefix

DEFAULT_MAX_NEW_TOKENS = 1000  # frames (vLLM-Omni's deploy YAML)
MAX_NEW_TOKENS_LIMIT = 4096
MAX_TEXT_CHARS = 4096
# vLLM-Omni's deploy YAML pins `seed: 42` (the spec: "serving is deterministic by default"): a request
# without a seed samples from generator 42 (the project's generator: not vLLM-Omni's torch noise).
DEFAULT_SEED = 42
# The chunk schedule of the audio (vLLM-Omni decodes 10 frames first, then 86); the vocoder is exact,
# so it changes when audio leaves, never the samples.
DEFAULT_INITIAL_CHUNK_FRAMES = 10
DEFAULT_CHUNK_FRAMES = 86

TASK = "Base"
VOICES = ("default",)  # the only voice: the model's learned default (null_prefix)
UNSUPPORTED_FIELDS = ("ref_audio", "ref_text", "speaker_embedding", "instructions", "language", "task_type",
                      "x_vector_only_mode", "non_streaming_mode", "initial_codec_chunk_frames", "word_timestamps")

RULES = FamilyRules(
    family=FAMILY,
    sampling=SEEDED,  # Gumbel noise from PCG64(seed), 42 without one
    tasks=(TASK,),
    fields=budget_and_seed(MAX_NEW_TOKENS_LIMIT, DEFAULT_MAX_NEW_TOKENS, DEFAULT_SEED),
    display_name="Gepard-1.0",
    unsupported=UNSUPPORTED_FIELDS,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
    auto_language=False,  # `language` is refused, "Auto" included
)

WIRE = wire.FamilyWire(FAMILY, (wire.TEXT, wire.MAX_NEW_TOKENS, wire.SEED))


def head_levels() -> tuple[int, ...]:
    """The 32 heads' cardinalities in channel order ([8, 7, 6, 6] x 8)."""
    return FSQ_LEVELS * NUM_GROUPS


# --- graphs -------------------------------------------------------------------------------------


def backbone_spec(layers: int, hidden: int, kv_heads: int, head_dim: int, logits: int) -> GraphSpec:
    """Prefill (T = the prompt) and decode (T = 1) over explicit past K/V: `attention_mask` [B, P + T]
    marks valid past slots (rows are ragged); the new positions are causal among themselves. Outputs
    the 32 heads' concatenated logits of the last position [B, 216], its stop probability [B] and the
    new K/V (post-RoPE)."""
    return step_spec(
        "backbone", ragged_step_inputs(hidden),
        (
            TensorSpec("logits", "float32", ("batch", logits)),
            TensorSpec("stop_prob", "float32", ("batch",)),
        ),
        layers, kv_heads, head_dim,
    )


def frame_embed_spec(hidden: int) -> GraphSpec:
    """codes [B, 32] (each channel's code) -> the backbone's next input [B, H]: the 32 embeddings
    concatenated -> Linear -> GELU -> Linear -> LayerNorm (no affine) x audio_embed_scale."""
    return GraphSpec(
        "frame_embed",
        (TensorSpec("codes", "int64", ("batch", NUM_CODEBOOKS)),),
        (TensorSpec("embeds", "float32", ("batch", hidden)),),
    )


def codec_stream_spec(state_size: int) -> GraphSpec:
    """NanoCodec's decoder as an exact streaming graph: codes [B, T, 32] + the causal convolutions'
    history `state` [B, S] (zeros at the start) -> pcm [B, T * 1024] + new_state. Chunks decoded one
    after another equal one whole decode."""
    return streaming_vocoder_spec(
        "codec_stream", TensorSpec("codes", "int64", ("batch", "frames", NUM_CODEBOOKS)), state_size
    )


# Tables (numpy .npy beside the graphs): the backbone's token embedding [V, H] and null_prefix [8, H].
EMBED_TOKENS = "embed_tokens"
NULL_PREFIX = "null_prefix"
GRAPH_NAMES = ("backbone", "frame_embed", "codec_stream")
