"""The OmniVoice family's side of the contract: fixed facts, exported graphs and request rules.

OmniVoice (k2-fsa/OmniVoice, reference `omnivoice==0.2.1`) is non-autoregressive: one bidirectional
Qwen3 fills in all 8 codebooks of the whole utterance by iterative unmasking (32 steps by default,
classifier-free guidance on log-probs, Gumbel noise on positions), its length fixed up front by a
rule-based duration estimate; the Higgs Audio v2 codec's DAC decoder turns the codes into 24 kHz
audio. Audio exists only after the last step, so it streams per sentence, not per frame.
"""

from __future__ import annotations

from ttscore.contract import wire
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.omnivoice import text as omnivoice_text
from ttscore.contract.rules import SEEDED, FamilyRules, FieldRule, KnobRule, seed_field

FAMILY = "omnivoice"
SAMPLE_RATE = 24000  # the codec's output
HOP = 960  # samples per frame (25 frames per second)
NUM_CODEBOOKS = 8
AUDIO_VOCAB = 1025  # 1024 codes + the mask id
MASK_ID = 1024
CODEBOOK_SIZE = 1024

# The prompt's special tokens (the tokenizer adds them to the Qwen3 vocabulary).
SPECIAL_TOKENS = ("<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>", "<|instruct_end|>",
                  "<|text_start|>", "<|text_end|>")

# Generation defaults of the reference (OmniVoiceGenerationConfig; its knobs' in KNOB_DEFAULTS).
DEFAULT_NUM_STEP = 32
DEFAULT_LAYER_PENALTY = 5.0
CLASS_TOP_K_RATIO = 0.1  # class sampling keeps the top ceil(ratio * vocab) codes
# The duration estimate's anchor when there is no reference transcript (the reference's fallback).
ANCHOR_TEXT = "Nice to meet you."
ANCHOR_FRAMES = 25

# Long text (the reference's audio_chunk_threshold / audio_chunk_duration; omnivoice_text.chunk_text).
CHUNK_THRESHOLD_SECONDS = 30.0
CHUNK_SECONDS = 15.0
# Sentence-level streaming (a streamed request: `sentence_chunks`): the same chunking rule packing
# pieces up to about this many seconds, applied to any text of more than one piece, so the first
# sentence's audio is sent while the later ones are generated (the project's rule, not the reference's).
STREAM_CHUNK_SECONDS = 3.0

MAX_NUM_STEP = 64
MAX_FRAMES = 4096  # per generation (~164 s)
MAX_TEXT_CHARS = 4096

TASK = "Base"
DEFAULT_VOICE = "default"  # auto voice (the model's own), like omitting `voice`
# initial_codec_chunk_frames: non-autoregressive, audio comes a whole sentence at a time (no frame streaming).
UNSUPPORTED_FIELDS = ("x_vector_only_mode", "speaker_embedding", "non_streaming_mode", "initial_codec_chunk_frames")
# The generation knobs (the Speech API's `extra_params`, speech_generation inputs): inclusive ranges.
KNOBS = (
    KnobRule("num_step", 1, MAX_NUM_STEP, integer=True),  # also a FieldRule (its default)
    KnobRule("guidance_scale", 0.0, 20.0),
    KnobRule("t_shift", 1e-3, 10.0),
    KnobRule("position_temperature", 0.0, 100.0),
    KnobRule("class_temperature", 0.0, 100.0),
)
KNOB_DEFAULTS: dict[str, int | float] = {"num_step": DEFAULT_NUM_STEP, "guidance_scale": 2.0, "t_shift": 0.1,
                                         "position_temperature": 5.0, "class_temperature": 0.0}
# `speed` as the reference does it: the duration estimate divided by it (the Speech API's range).
SPEED_RANGE = (0.25, 4.0)

RULES = FamilyRules(  # reference clips: the default RefAudioBounds (8-192 kHz, 0.1-60 s)
    family=FAMILY,
    sampling=SEEDED,  # every unmasking draw from the request's default_rng(seed)
    seconds_per_text_token=None,  # non-autoregressive: the duration estimate fixes its length before it runs
    tasks=(TASK,),
    fields=(
        FieldRule("max_new_tokens", 1, MAX_FRAMES, None),  # None: the duration estimate
        seed_field(),
        FieldRule("num_step", 1, MAX_NUM_STEP, DEFAULT_NUM_STEP),
    ),
    display_name="OmniVoice",
    unsupported=UNSUPPORTED_FIELDS,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
    extra_params=KNOBS,
)


def checked_frames(text: str, ref_text: str | None, ref_frames: int | None, speed: float,
                   max_new_tokens: int | None) -> int:
    """The utterance's frames by the reference's duration estimate, refused (naming `max_new_tokens`)
    beyond the request's cap (default MAX_FRAMES): a non-autoregressive utterance cannot be cut."""
    frames = omnivoice_text.estimate_frames(text, ref_text, ref_frames, ANCHOR_TEXT, ANCHOR_FRAMES, speed)
    limit = RULES.field("max_new_tokens").check(max_new_tokens)
    cap = MAX_FRAMES if limit is None else limit
    if frames > cap:
        raise InvalidRequest(f"the text needs {frames} frames by the duration estimate, more than "
                             f"'max_new_tokens' ({cap}); shorten the text or raise max_new_tokens", "max_new_tokens")
    return frames


# Its speech_generation inputs (the rows the families share, and its own knobs).
LANGUAGE = wire.string_input("language", "Language name or id (the reference's language map; 'Auto': none).")
INSTRUCTIONS = wire.string_input("instructions", "Voice design items ('female, low pitch, british accent').")
NUM_STEP = wire.TensorIO("num_step", "INT32", (1,), True, "OmniVoice: unmasking steps.")
GUIDANCE_SCALE = wire.TensorIO("guidance_scale", "FP32", (1,), True, "OmniVoice: classifier-free guidance scale.")
T_SHIFT = wire.TensorIO("t_shift", "FP32", (1,), True, "OmniVoice: unmasking schedule time shift.")
POSITION_TEMPERATURE = wire.TensorIO("position_temperature", "FP32", (1,), True,
                                     "OmniVoice: Gumbel temperature of the unmasking order (0: greedy).")
CLASS_TEMPERATURE = wire.TensorIO("class_temperature", "FP32", (1,), True,
                                  "OmniVoice: sampling temperature of the codes (0: argmax).")
SPEED = wire.TensorIO("speed", "FP32", (1,), True, "OmniVoice: speaking rate (the duration estimate divided by it).")
SENTENCE_CHUNKS = wire.TensorIO("sentence_chunks", "BOOL", (1,), True,
                                "OmniVoice: generate in short chunks at sentence marks, each sent as it completes.")
# Cloning: the reference clip's codes [8, T] from the family's voice-features model (codec_encoder) and
# its transcript (the runtime's request field `ref_codes`).
REF_AUDIO_CODES = wire.TensorIO("ref_audio_codes", "INT64", (NUM_CODEBOOKS, -1), True,
                                "OmniVoice: reference codes [8, T] from codec_encoder (cloning).")
REF_TEXT = wire.string_input("ref_text", "OmniVoice: transcript of the reference clip (cloning).")
# The voice-features Triton model (one per served checkpoint): reference audio -> its codes.
ENCODER_MODEL = "codec_encoder"
ENCODER_INPUTS: tuple[wire.TensorIO, ...] = wire.clip_inputs("Its sample rate (resampled to 24 kHz).")
ENCODER_OUTPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("ref_audio_codes", "INT64", (NUM_CODEBOOKS, -1),
                  doc="OmniVoice reference codes [8, T] for speech_generation's ref_audio_codes."),
)
WIRE = wire.FamilyWire(FAMILY, (wire.TEXT, LANGUAGE, INSTRUCTIONS, wire.MAX_NEW_TOKENS, wire.SEED, NUM_STEP,
                                GUIDANCE_SCALE, T_SHIFT, POSITION_TEMPERATURE, CLASS_TEMPERATURE, SPEED,
                                SENTENCE_CHUNKS, REF_AUDIO_CODES, REF_TEXT),
                       {ENCODER_MODEL: (ENCODER_INPUTS, ENCODER_OUTPUTS)})


# --- graphs -------------------------------------------------------------------------------------
# generator: the bidirectional LM over the whole prompt, no KV cache. `input_ids` [B, 8, S] (text ids
# repeated over the 8 rows at text positions, codes at audio positions), `audio_mask` [B, S] (audio
# positions), `attention_mask` [B, S] (1: a real position, 0: right padding; a padded position sees
# only itself, as the reference's pad diagonal), `target_index` [B, T] (the positions whose logits
# are wanted) -> `logits` [B, 8, T, 1025].
GENERATOR = GraphSpec(
    "generator",
    (
        TensorSpec("input_ids", "int64", ("batch", NUM_CODEBOOKS, "seq")),
        TensorSpec("audio_mask", "bool", ("batch", "seq")),
        TensorSpec("attention_mask", "int64", ("batch", "seq")),
        TensorSpec("target_index", "int64", ("batch", "frames")),
    ),
    (TensorSpec("logits", "float32", ("batch", NUM_CODEBOOKS, "frames", AUDIO_VOCAB)),),
)


# codec_decoder: codes [B, 8, T] (0..1023) -> audio [B, 1, T * HOP] (RVQ lookup, fc2, DAC decoder).
CODEC_DECODER = GraphSpec(
    "codec_decoder",
    (TensorSpec("codes", "int64", ("batch", NUM_CODEBOOKS, "frames")),),
    (TensorSpec("audio", "float32", ("batch", 1, "samples")),),
)


# codec_encoder (cloning from audio; exported when the checkpoint's audio tokenizer has its encoder
# side): audio [samples] (24 kHz mono after the reference's preprocessing, a whole number of frames:
# samples % HOP == 0) -> codes [8, samples / HOP] (HiggsAudioV2TokenizerModel.encode: 16 kHz resample,
# HuBERT, semantic encoder, DAC encoder, fc, residual VQ at the top bandwidth).
CODEC_ENCODER = GraphSpec(
    "codec_encoder",
    (TensorSpec("audio", "float32", ("samples",)),),
    (TensorSpec("codes", "int64", (NUM_CODEBOOKS, "frames")),),
)
