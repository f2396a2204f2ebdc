"""The Gepard-1.0 family's gateway adapter (gateway.family.FamilyAdapter): the spec's Gepard table.

Answered only when `model` names a Gepard-1.0 checkpoint (or when only Gepard is served). One voice,
the model's learned default: `voice` omitted or "default". Taken: `input`, `voice`, `response_format`
(wav by default; whole files wav/pcm/flac/mp3, streams pcm/wav), `stream` / `stream_format` (SSE and
raw), `max_new_tokens` (frames of 1024 samples, 1..4096, default 1000), `seed` (reaches the in-model
Gumbel-max sampler; without one the runtime's default 42, as vLLM-Omni's deploy YAML pins it).
Refused, each with a 400 naming the field: another `voice` (uploaded and precomputed voices
included: there are none for this family), `opus` (22.05 kHz is not an Opus rate) and `aac`,
`speed` other than 1.0, `sample_rate` other than 22050, any `extra_params` key, and the family's
unsupported fields (contract RULES: `ref_audio`, `ref_text`, `speaker_embedding`, `instructions`,
`language`, `task_type`, `x_vector_only_mode`, `non_streaming_mode`, `initial_codec_chunk_frames`,
`word_timestamps`; a field the Speech API protocol does not declare is refused there, naming it).
"""

from __future__ import annotations

from ttscore.contract import gepard

from ..errors import bad_request
from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import BaseAdapter
from ..speech_fields import SpeechFields, text_field

WHOLE_FORMATS = ("wav", "pcm", "flac", "mp3")  # opus: 22.05 kHz is not an Opus rate; aac: not in the table
STREAM_FORMATS = ("pcm", "wav")  # the spec's Gepard table: "Streaming: pcm/wav only"


class GepardAdapter(BaseAdapter):
    """One voice, no reference audio, no stored voices: the kit's defaults but for its planning rules."""

    family = gepard.FAMILY
    rules = gepard.RULES
    default_task = gepard.TASK

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        name = self.rules.name
        # `extra_params` (any key, temperature/top_p/top_k included): refused by the planner, as for every
        # family whose rules list no knobs (FamilyRules.extra_params)
        voice = text_field(f.voice, "voice", 256)
        if voice is not None and voice not in gepard.VOICES:
            raise bad_request(f"Invalid voice '{voice}' for {name}: omit 'voice' or use 'default' (its only voice)",
                              "voice")
        if f.speed is not None and f.speed != 1.0:
            raise bad_request(f"{name} models take 'speed' = 1.0 only (no native speed control), got {f.speed}",
                              "speed")
        if f.sample_rate is not None and f.sample_rate != gepard.SAMPLE_RATE:
            raise bad_request(f"{name} models take 'sample_rate' = {gepard.SAMPLE_RATE} only, got {f.sample_rate}",
                              "sample_rate")
        fmt = f.response_format
        if fmt == "opus":
            raise bad_request(f"response_format 'opus' is not supported by {name}: its {gepard.SAMPLE_RATE} Hz is not "
                              "an Opus sample rate", "response_format")
        if fmt is not None and fmt not in WHOLE_FORMATS:
            raise bad_request(f"response_format '{fmt}' is not supported by {name}: use one of "
                              f"{', '.join(WHOLE_FORMATS)}", "response_format")
        if (f.stream or f.stream_format) and fmt is not None and fmt not in STREAM_FORMATS:
            raise bad_request(f"{name} streams response_format {' or '.join(STREAM_FORMATS)} only, got '{fmt}'",
                              "response_format")
        return self.new_plan(f, ckpt, text, deployment, speaker=voice)


ADAPTER = GepardAdapter()
