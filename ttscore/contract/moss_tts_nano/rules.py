"""MOSS-TTS-Nano's request rules (RULES) and its part of the wire (WIRE).

Voice cloning only, as vLLM-Omni 0.30.0's `MossTTSNanoAdapter` serves it (the spec's "MOSS-TTS-Nano" row): the
voice of a reference clip (`ref_audio`, or an uploaded voice whose codec codes were computed at upload) speaks
the text; `ref_text` is accepted and ignored (upstream's `voice_clone` mode takes no transcript); there are no
preset voices. Output is the codec's 48 kHz stereo downmixed to mono by the mean. Sampling runs at the official
runtime's values (the vLLM-Omni model's `_DEFAULT_*`), with the request's seed (42 without one, as vLLM-Omni's
deploy file pins it); the project also takes them as `extra_params` knobs, `do_sample` false meaning greedy.
"""

from __future__ import annotations

from ttscore.contract import wire
from ttscore.contract.moss_tts_nano import codec
from ttscore.contract.moss_tts_nano.graphs import FRAMES_PER_SECOND, N_VQ, SAMPLE_RATE
from ttscore.contract.rules import SEEDED, FamilyRules, KnobRule, RefAudioBounds, budget_and_seed

FAMILY = "moss_tts_nano"
# The export format the runtime reads (the manifest's `export_revision`; export/moss_tts_nano/family.py writes it):
# 2: the codec decoder's state stays with the caller (arena), local_step takes its codebook head; 3: local_code_step
# (a codebook's step over a fixed-size local cache).
EXPORT_REVISION = 3
DISPLAY = "MOSS-TTS-Nano"
TASK = "Base"
DEFAULT_VOICE = "default"  # `voice` omitted or "default": the reference's voice (ref_audio or an uploaded voice)

FRAME_SECONDS = 1 / FRAMES_PER_SECOND  # 80 ms: one frame of N_VQ codes; served mono at SAMPLE_RATE (48 kHz)

# max_new_tokens: frames (vLLM-Omni's max_new_frames; 375 = 30 s, the model's default).
DEFAULT_MAX_NEW_TOKENS = 375
MAX_NEW_TOKENS_LIMIT = 4096
DEFAULT_SEED = 42  # vllm_omni/deploy/moss_tts_nano.yaml's stage default: unseeded requests are reproducible

# Sampling: the official runtime's values, which vLLM-Omni's model always uses (its _DEFAULT_*; do_sample True).
DEFAULT_DO_SAMPLE = True
DEFAULT_TEXT_TEMPERATURE = 1.0
DEFAULT_TEXT_TOP_P = 1.0
DEFAULT_TEXT_TOP_K = 50
DEFAULT_AUDIO_TEMPERATURE = 0.8
DEFAULT_AUDIO_TOP_P = 0.95
DEFAULT_AUDIO_TOP_K = 25
DEFAULT_AUDIO_REPETITION_PENALTY = 1.2
MAX_TOP_K = 1 << 14  # 0: off; any larger k keeps every candidate

# Long text (the remote code's voice_clone defaults, which vLLM-Omni uses: it passes no budget): chunks of at
# most this many SentencePiece tokens, each decoded on its own, with a pause after each but the last: the long
# one after a chunk of at most SHORT_CHUNK_WORDS words.
CHUNK_MAX_TEXT_TOKENS = 50
SHORT_CHUNK_WORDS = 4
SHORT_CHUNK_PAUSE_SECONDS = 0.40
PAUSE_SECONDS = 0.24

MAX_TEXT_CHARS = 4096
# The codec takes 48 kHz: a clip at any rate the project reads is resampled (and mixed to mono, then repeated
# to the codec's two channels, as upstream does).
REF_AUDIO = RefAudioBounds(min_rate=8000, max_rate=192000, min_seconds=0.1, max_seconds=60.0)
UNSUPPORTED_FIELDS = ("speaker_embedding", "instructions", "language", "task_type", "x_vector_only_mode",
                      "non_streaming_mode", "initial_codec_chunk_frames")

# `extra_params`: the sampling knobs (any other key is a 400 naming extra_params).
KNOBS = (
    KnobRule("do_sample", 0, 1, boolean=True),  # false: greedy text and audio (the stop argmax: slot on a tie)
    KnobRule("text_temperature", 0.0, 10.0, lo_open=True),
    KnobRule("text_top_p", 0.0, 1.0, lo_open=True),
    KnobRule("text_top_k", 0, MAX_TOP_K, integer=True),
    KnobRule("audio_temperature", 0.0, 10.0, lo_open=True),
    KnobRule("audio_top_p", 0.0, 1.0, lo_open=True),
    KnobRule("audio_top_k", 0, MAX_TOP_K, integer=True),
    KnobRule("audio_repetition_penalty", 0.0, 10.0, lo_open=True),  # 1: off
)
KNOB_DEFAULTS: dict[str, bool | int | float] = {
    "do_sample": DEFAULT_DO_SAMPLE,
    "text_temperature": DEFAULT_TEXT_TEMPERATURE,
    "text_top_p": DEFAULT_TEXT_TOP_P,
    "text_top_k": DEFAULT_TEXT_TOP_K,
    "audio_temperature": DEFAULT_AUDIO_TEMPERATURE,
    "audio_top_p": DEFAULT_AUDIO_TOP_P,
    "audio_top_k": DEFAULT_AUDIO_TOP_K,
    "audio_repetition_penalty": DEFAULT_AUDIO_REPETITION_PENALTY,
}

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
    sampling=SEEDED,  # every draw from the request's seed, 42 without one
    auto_language=False,  # `language` is refused, "Auto" included
)

# --- wire ---------------------------------------------------------------------------------------
# Its speech_generation inputs: the text, the frame budget, the seed, the knobs, and the reference clip's codec
# codes [frames, 16] from its voice-features model (the runtime's request field of the same name).
DO_SAMPLE = wire.TensorIO("do_sample", "BOOL", (1,), True, "MOSS-TTS-Nano: sample (true) or greedy (false).")
TEXT_TEMPERATURE = wire.TensorIO("text_temperature", "FP32", (1,), True, "MOSS-TTS-Nano: the stop/continue "
                                 "decision's temperature.")
TEXT_TOP_P = wire.TensorIO("text_top_p", "FP32", (1,), True, "MOSS-TTS-Nano: the stop/continue decision's top-p.")
TEXT_TOP_K = wire.TensorIO("text_top_k", "INT32", (1,), True, "MOSS-TTS-Nano: the stop/continue decision's top-k.")
AUDIO_TEMPERATURE = wire.TensorIO("audio_temperature", "FP32", (1,), True, "MOSS-TTS-Nano: the codes' temperature.")
AUDIO_TOP_P = wire.TensorIO("audio_top_p", "FP32", (1,), True, "MOSS-TTS-Nano: the codes' top-p.")
AUDIO_TOP_K = wire.TensorIO("audio_top_k", "INT32", (1,), True, "MOSS-TTS-Nano: the codes' top-k (0: off).")
AUDIO_REPETITION_PENALTY = wire.TensorIO("audio_repetition_penalty", "FP32", (1,), True,
                                         "MOSS-TTS-Nano: per-codebook repetition penalty (1: off).")
REF_AUDIO_TOKENS = wire.TensorIO("ref_audio_tokens", "INT64", (-1, N_VQ), True,
                                 "MOSS-TTS-Nano: reference codec codes [frames, 16] from moss_codec_encoder "
                                 "(required).")
# The voice-features Triton model (one per served checkpoint): a reference clip -> its codec codes.
ENCODER_MODEL = codec.ENCODER
ENCODER_INPUTS: tuple[wire.TensorIO, ...] = wire.clip_inputs("Its sample rate (resampled to 48 kHz, repeated to "
                                                             "two channels).")
ENCODER_OUTPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("ref_audio_tokens", "INT64", (-1, N_VQ),
                  doc="MOSS-TTS-Nano reference codes [frames, 16] for speech_generation's ref_audio_tokens."),
)
WIRE = wire.FamilyWire(FAMILY, (wire.TEXT, wire.MAX_NEW_TOKENS, wire.SEED, DO_SAMPLE, TEXT_TEMPERATURE, TEXT_TOP_P,
                                TEXT_TOP_K, AUDIO_TEMPERATURE, AUDIO_TOP_P, AUDIO_TOP_K, AUDIO_REPETITION_PENALTY,
                                REF_AUDIO_TOKENS),
                       {ENCODER_MODEL: (ENCODER_INPUTS, ENCODER_OUTPUTS)})
