"""toy_tone's contract: its request rules and its speech_generation inputs (ttscore.contract)."""

from __future__ import annotations

from ttscore.contract import wire
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.rules import FamilyRules, FieldRule

NAME = "toy_tone"
SAMPLE_RATE = 16000
VARIANT = "base"  # the manifest's variant (its one checkpoint kind); its Speech API task is TASK
TASK = "Base"
VOICE = "default"  # its only voice
DISPLAY = "Toy Tone"
MAX_FRAMES = 512  # one frame per character

RULES = FamilyRules(
    family=NAME,
    tasks=(TASK,),
    fields=(
        FieldRule("max_new_tokens", 1, MAX_FRAMES, None),  # None: every character
        FieldRule("initial_codec_chunk_frames", 1, 64, 2),
    ),
    display_name=DISPLAY,
    unsupported=("instructions", "language", "ref_audio", "ref_text", "x_vector_only_mode", "non_streaming_mode",
                 "seed"),
    default_voice=VOICE,
    sample_rate=SAMPLE_RATE,
    variants={VARIANT: TASK},
)

# Its speech_generation inputs: rows the families share (ttscore.contract.wire) and one of its own,
# which the Triton repository renderer adds to speech_generation's committed config.
VOICE_INPUT = wire.string_input("voice", f"The voice, by name ({DISPLAY}: only '{VOICE}').")
WIRE = wire.FamilyWire(NAME, (wire.TEXT, VOICE_INPUT, wire.MAX_NEW_TOKENS, wire.INITIAL_CHUNK_FRAMES,
                              wire.CHUNK_FRAMES))

# The one exported graph: character ids -> one frame of samples per id.
FRAMES = GraphSpec(
    "toy_tone_frames",
    inputs=(TensorSpec("ids", "int64", ("batch", "frames")),),
    outputs=(TensorSpec("frames", "float32", ("batch", "frames", "samples_per_frame")),),
)

FAMILY = RULES
