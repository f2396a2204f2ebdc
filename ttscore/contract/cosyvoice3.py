"""The CosyVoice3 family's side of the contract: its fixed facts (FunAudioLLM/Fun-CosyVoice3-0.5B-2512).

Three stages: a Qwen2 language model over `[sos, text, task_id, prompt speech tokens]` emitting 25 Hz
speech tokens (RAS sampling; every id >= speech_token_size is a stop id), a DiT flow-matching model
(10 Euler steps, cosine schedule, classifier-free guidance 0.7) turning prompt + new tokens into 80-bin
mel frames at 50 Hz, and a causal HiFT vocoder (neural source filter + inverse STFT) at 24 kHz.
Voice cloning only: `ref_audio` with its transcript `ref_text` (no presets).
"""

from __future__ import annotations

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.kv import ragged_step_inputs, step_spec
from ttscore.contract.rules import SEEDED, FamilyRules, KnobRule, RefAudioBounds, budget_and_seed

# The family's K/V tensor names (ttscore.contract.kv).
past_key, past_value, new_key, new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value

FAMILY = "cosyvoice3"
# The export format the runtime reads (the manifest's `export_revision`; export/cosyvoice3/family.py writes it):
# 2: flow_velocity over a past K/V (a stream hop's new frames only), hift's phase0/skip in, phase out; 3: the past
# K/V frame first and all valid (a prefix of the stream's buffer, fed in place), the mask over the new frames.
EXPORT_REVISION = 3
DISPLAY = "CosyVoice3"
HUB_ORG = "FunAudioLLM"

# CosyVoice3LM: the 200 rows after the speech codebook are special; sos/eos/task_id/fill are the first four.
NUM_SPECIAL_SPEECH = 200
SOS_OFFSET, EOS_OFFSET, TASK_ID_OFFSET, FILL_OFFSET = 0, 1, 2, 3
# RAS sampling (cosyvoice3.yaml llm.sampling; vLLM-Omni's _ras_sample_one).
TOP_P, TOP_K, WIN_SIZE, TAU_R = 0.8, 25, 10, 0.1
MIN_TOKEN_TEXT_RATIO, MAX_TOKEN_TEXT_RATIO = 2, 20
# Flow: n_timesteps 10 (CausalMaskedDiffWithDiT.inference), cosine t schedule, CFG rate from the yaml.
FLOW_STEPS = 10
# The prompt delimiter vLLM-Omni's adapter prepends (with this system text) when ref_text lacks it.
END_OF_PROMPT = "<|endofprompt|>"
DEFAULT_PROMPT_PREFIX = "You are a helpful assistant." + END_OF_PROMPT


def prompt_text(ref_text: str) -> str:
    """The text before the input, as vLLM-Omni 0.30.0's adapter makes it: the reference transcript, after
    DEFAULT_PROMPT_PREFIX unless it has its own END_OF_PROMPT (as given otherwise: no strip)."""
    return ref_text if END_OF_PROMPT in ref_text else DEFAULT_PROMPT_PREFIX + ref_text


# --- request rules and wire ----------------------------------------------------------------------
SAMPLE_RATE = 24000
TASK = "Base"
DEFAULT_VOICE = "default"  # `voice` omitted or "default": the reference's voice (ref_audio or an uploaded voice)
MAX_NEW_TOKENS = 4096  # speech tokens (40 ms each)
DEFAULT_MAX_NEW_TOKENS = 2048  # without max_new_tokens: min(this, MAX_TOKEN_TEXT_RATIO x the text's tokens)
MAX_TEXT_CHARS = 4096
# The front-end resamples to 16 kHz (campplus, the speech tokenizer) and 24 kHz (the prompt mel).
REF_AUDIO = RefAudioBounds(min_rate=16000, max_rate=192000, min_seconds=0.1, max_seconds=60.0)
UNSUPPORTED_FIELDS = ("speaker_embedding", "instructions", "language", "task_type", "x_vector_only_mode",
                      "non_streaming_mode", "initial_codec_chunk_frames")

# `extra_params` as vLLM-Omni 0.30.0 applies them, per request in RAS: the logits (stop rows merged) over the
# temperature, below GREEDY_TEMPERATURE the argmax; top_p / top_k in place of the yaml's (sampling.py).
KNOBS = (
    KnobRule("temperature", 0.0, 10.0),
    KnobRule("top_k", 0, 1 << 20, integer=True),  # 0: off
    KnobRule("top_p", 0.0, 1.0, lo_open=True),
)
GREEDY_TEMPERATURE = 1e-5  # vLLM-Omni's _sampling_eps

RULES = FamilyRules(
    family=FAMILY,
    tasks=(TASK,),
    # max_new_tokens without a default: the text-length rule; no default seed: random, as vLLM-Omni 0.30.0 (no
    # seed in its deploy)
    fields=budget_and_seed(MAX_NEW_TOKENS, None),
    display_name=DISPLAY,
    unsupported=UNSUPPORTED_FIELDS,
    ref_audio=REF_AUDIO,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
    extra_params=KNOBS,
    sampling=SEEDED,  # RAS noise and the flow's noise from the request's seed; without one the gateway draws it
    auto_language=False,  # `language` is refused, "Auto" included
)

# Its speech_generation inputs: the reference clip's features (from the voice-features model
# `prompt_encoder`, or an uploaded voice's, computed once at upload) and its transcript.
REF_TEXT = wire.string_input("ref_text", "CosyVoice3: transcript of the reference clip (required).")
PROMPT_SPEECH_TOKENS = wire.TensorIO("prompt_speech_tokens", "INT64", (-1,), True,
                                     "CosyVoice3: the reference clip's speech tokens [T] from prompt_encoder.")
PROMPT_MEL = wire.TensorIO("prompt_mel", "FP32", (-1, 80), True,
                           "CosyVoice3: the reference clip's prompt mel [2T, 80] from prompt_encoder.")
PROMPT_EMBEDDING = wire.TensorIO("prompt_embedding", "FP32", (-1,), True,
                                 "CosyVoice3: the reference clip's speaker embedding [192] from prompt_encoder.")
FEATURES = (PROMPT_SPEECH_TOKENS, PROMPT_MEL, PROMPT_EMBEDDING)
ENCODER_MODEL = "prompt_encoder"
ENCODER_INPUTS: tuple[wire.TensorIO, ...] = wire.clip_inputs("Its sample rate (>= 16 kHz).")
ENCODER_OUTPUTS: tuple[wire.TensorIO, ...] = tuple(
    wire.TensorIO(t.name, t.dtype, t.dims, doc=t.doc) for t in FEATURES)
WIRE = wire.FamilyWire(FAMILY, (wire.TEXT, wire.MAX_NEW_TOKENS, wire.SEED, wire.TEMPERATURE, wire.TOP_K, wire.TOP_P,
                                 REF_TEXT, *FEATURES),
                       {ENCODER_MODEL: (ENCODER_INPUTS, ENCODER_OUTPUTS)})


# --- graphs -------------------------------------------------------------------------------------
# Tables (numpy .npy beside the graphs): the Qwen2 text embedding [V, D] and the speech embedding
# [speech_token_size + 200, D] (sos / task_id rows included).
TEXT_EMBEDDING = "text_embedding"
SPEECH_EMBEDDING = "speech_embedding"
GRAPH_NAMES = ("lm_step", "flow_cond", "flow_velocity", "hift")
# The DiT's convolutional position embedding: two causal convs of kernel 31, so a frame's input embedding
# depends on the 60 frames before it (flow_velocity's left context in a stream).
FLOW_CONV_CONTEXT = 60


def lm_step_spec(layers: int, dim: int, kv_heads: int, head_dim: int, speech_rows: int) -> GraphSpec:
    """Qwen2 prefill (T = the prompt) and decode (T = 1) over explicit past K/V: `attention_mask`
    [B, P + T] marks valid slots (rows are ragged); the new positions are causal among themselves.
    Outputs `llm_decoder`'s logits of the last position [B, speech_rows] and the new K/V (rotated)."""
    return step_spec(
        "lm_step", ragged_step_inputs(dim),
        (
            TensorSpec("logits", "float32", ("batch", speech_rows)),
        ),
        layers, kv_heads, head_dim,
    )


def flow_cond_spec(mel: int, spk_dim: int) -> GraphSpec:
    """The flow's conditioning: speech tokens [B, T] (prompt + new, zero-padded past `token_len`) ->
    `mu` [B, mel, 2T] (token embedding, pre-lookahead convs with zeros after the end, each token twice)
    and `spks` [B, mel] (the L2-normalised speaker embedding through its affine layer)."""
    return GraphSpec(
        "flow_cond",
        (
            TensorSpec("tokens", "int64", ("batch", "tokens")),
            TensorSpec("token_len", "int64", ("batch",)),
            TensorSpec("embedding", "float32", ("batch", spk_dim)),
        ),
        (
            TensorSpec("mu", "float32", ("batch", mel, "frames")),
            TensorSpec("spks", "float32", ("batch", mel)),
        ),
    )


def flow_velocity_spec(mel: int, depth: int, heads: int, dim_head: int) -> GraphSpec:
    """One Euler step's guided velocity of the DiT for N frames over the K/V of the P frames before them (a
    whole utterance: no past; a stream's hop: its new frames over the past ones, which the chunk mask keeps
    from seeing later frames): x, mu, cond [B, mel, C + N] (C <= FLOW_CONV_CONTEXT frames before the N,
    only for the position convs; 0 at the start), mask [B, N] (1 = valid frame: a padded row's tail 0), t [B],
    spks [B, mel], chunk [B] (attention chunk in frames: frame i sees frames j < (i // chunk + 1) * chunk;
    chunk >= P + N is full attention), and per DiT layer the past frames' rotated key and value
    [P, 2B, heads, dim_head] (frame first, so a prefix of a stream's buffer is fed in place; rows: B
    conditional then B unconditional; every past frame valid, the rows sharing P) -> v [B, mel, N] = (1 + cfg)
    v(mu, spks, cond) - cfg v(0, 0, 0) at positions P..P+N-1, and the N frames' key and value
    [N, 2B, heads, dim_head] (written by a stream straight into its buffer after the past)."""
    kv_past = [TensorSpec(f(i), "float32", ("past", "rows", heads, dim_head))
               for i in range(depth) for f in (past_key, past_value)]
    kv_new = [TensorSpec(f(i), "float32", ("frames", "rows", heads, dim_head))
              for i in range(depth) for f in (new_key, new_value)]
    return GraphSpec(
        "flow_velocity",
        (
            TensorSpec("x", "float32", ("batch", mel, "window")),
            TensorSpec("mask", "float32", ("batch", "frames")),
            TensorSpec("mu", "float32", ("batch", mel, "window")),
            TensorSpec("t", "float32", ("batch",)),
            TensorSpec("spks", "float32", ("batch", mel)),
            TensorSpec("cond", "float32", ("batch", mel, "window")),
            TensorSpec("chunk", "int64", ("batch",)),
            *kv_past,
        ),
        (TensorSpec("velocity", "float32", ("batch", mel, "frames")), *kv_new),
    )


def hift_spec(mel: int, harmonics: int) -> GraphSpec:
    """The causal HiFT over a whole utterance or a stream's window of it: mel [B, mel, F] and the fixed
    sine-noise table rows of its samples [B, F * samples_per_frame, harmonics + 1], `phase0` [B, harmonics + 1]
    (the source's cumulative phase increments before frame `skip`; zeros from the utterance's start) and `skip`
    [B] (frames whose increments are not summed: a window's first frames, whose f0 lacks its left context) ->
    pcm [B, F * samples_per_frame] and `phase` [B, F, harmonics + 1] (the cumulative increments per frame, to
    seed a later window)."""
    return GraphSpec(
        "hift",
        (
            TensorSpec("mel", "float32", ("batch", mel, "frames")),
            TensorSpec("sine_noise", "float32", ("batch", "samples", harmonics + 1)),
            TensorSpec("phase0", "float32", ("batch", harmonics + 1)),
            TensorSpec("skip", "int64", ("batch",)),
        ),
        (TensorSpec("pcm", "float32", ("batch", "samples")),
         TensorSpec("phase", "float32", ("batch", "frames", harmonics + 1))),
    )
