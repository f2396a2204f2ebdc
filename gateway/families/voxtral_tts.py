"""The Voxtral TTS family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a Voxtral TTS checkpoint (or when only Voxtral TTS is served). Preset
voices only: `voice` is required and is one of the checkpoint's presets (its manifest's speakers, listed
in GET /v1/audio/voices and /v1/models; lower-case accepted). Taken: `input`, `voice`, `response_format`
and `sample_rate` (the shared output rules: every format whole, pcm/wav/mp3/opus streamed; resampled from
24 kHz), `stream` / `stream_format` (SSE and raw), `speed` (whole clips only, as for every family: the
shared planner), `max_new_tokens` (frames of 80 ms, 1..4096, default 2048), `seed` (the request's own
flow-matching noise x0; without one the gateway draws one (X-Seed): random by default, as in vLLM-Omni,
whose x0 comes from torch's global RNG), `extra_params.cfg_alpha` (classifier-free guidance, 0..10, default 1.2: vLLM-Omni takes
any float, the runtime bounds it).
Refused, each with a 400 naming the field: a missing or unknown `voice`, an uploaded or precomputed
voice and `ref_audio`/`ref_text` (the checkpoint has no codec encoder, so it cannot clone), any other
`extra_params` key (the planner), and the family's other unsupported fields (contract RULES:
`speaker_embedding`, `instructions`, `language`, `task_type`, `x_vector_only_mode`, `non_streaming_mode`,
`initial_codec_chunk_frames`; `word_timestamps` is the gateway's: gateway.word_timing).
"""

from __future__ import annotations

from typing import Any

from ttscore.contract import voxtral_tts

from ..errors import bad_request
from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import BaseAdapter
from ..speech_fields import SpeechFields, text_field

NO_ENCODER = "the checkpoint has no codec encoder, so it cannot clone a voice: use one of its preset voices"


class VoxtralAdapter(BaseAdapter):
    family = voxtral_tts.FAMILY
    rules = voxtral_tts.RULES
    default_task = voxtral_tts.TASK

    def refuse(self, f: SpeechFields) -> None:
        for field in ("ref_audio", "ref_text"):  # said first, and why
            if getattr(f, field, None) is not None:
                raise bad_request(f"'{field}' is not supported by {self.rules.name} models: {NO_ENCODER}", field)
        super().refuse(f)

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        name = self.rules.name
        presets = ", ".join(ckpt.speakers)
        voice = text_field(f.voice, "voice", 256)
        if voice is None or not voice.strip():
            raise bad_request(f"'voice' is required for {name} models: one of {presets}", "voice")
        speaker = voice.lower()
        if speaker not in ckpt.speakers:
            if deployment.resolve_voice(speaker) is not None:
                raise bad_request(f"Voice '{voice}' is an uploaded or precomputed voice: {name} models take preset "
                                  f"voices only ({NO_ENCODER})", "voice")
            raise bad_request(f"Invalid voice '{voice}' for {name} model `{ckpt.name}`: use one of {presets}", "voice")
        return self.new_plan(f, ckpt, text, deployment, speaker=speaker)

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {**super().generation_fields(plan, segment), "voice": plan.speaker}


ADAPTER = VoxtralAdapter()
