"""The Voxtral TTS family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a Voxtral TTS checkpoint (or when only Voxtral TTS is served). Preset
voices only: `voice` is required and is one of the checkpoint's presets (its manifest's speakers, listed
in GET /v1/audio/voices and /v1/models; lower-case accepted). Taken: `input`, `voice`, `response_format`
and `sample_rate` (the shared output rules: every format whole, pcm/wav streamed; resampled from
24 kHz), `stream` / `stream_format` (SSE and raw), `speed` (whole clips only, as for every family: the
shared planner), `max_new_tokens` (frames of 80 ms, 1..4096, default 2048), `seed` (the request's own
flow-matching noise x0; without one the gateway draws one (X-Seed): random by default, as in vLLM-Omni,
whose x0 comes from torch's global RNG), `extra_params.cfg_alpha` (classifier-free guidance, 0..10, default 1.2: vLLM-Omni takes
any float, the runtime bounds it).
Refused, each with a 400 naming the field: a missing or unknown `voice`, an uploaded or precomputed
voice and `ref_audio`/`ref_text` (the checkpoint has no codec encoder, so it cannot clone), any other
`extra_params` key (the planner), and the family's other unsupported fields (contract RULES:
`speaker_embedding`, `instructions`, `language`, `task_type`, `x_vector_only_mode`, `non_streaming_mode`,
`initial_codec_chunk_frames`, `word_timestamps`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttscore.contract import voxtral_tts
from ttscore.contract.errors import InvalidRequest

from ..backend import InferenceBackend
from ..errors import bad_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import BaseAdapter, checked_length_and_seed, segments_of
from ..speech_fields import SpeechFields, plan_output, refuse_unsupported, text_field

VOICE_ALIASES: dict[str, str] = {}  # OpenAI's voice names are not Voxtral presets
NO_ENCODER = "the checkpoint has no codec encoder, so it cannot clone a voice: use one of its preset voices"


class VoxtralAdapter(BaseAdapter):
    family = voxtral_tts.FAMILY
    rules = voxtral_tts.RULES
    default_task = voxtral_tts.TASK
    voice_aliases = VOICE_ALIASES

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        for field in ("ref_audio", "ref_text"):
            if getattr(f, field, None) is not None:
                raise bad_request(f"'{field}' is not supported by {name} models: {NO_ENCODER}", field)
        refuse_unsupported(f, rules)
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
        output = plan_output(f, ckpt.sample_rate)
        max_new, seed = checked_length_and_seed(f, rules)
        return SpeechPlan(
            checkpoint=ckpt, task=ckpt.task, text=text, speaker=speaker, language="auto", instructions=None,
            ref_audio=None, ref_text=None, x_vector_only=False, stored_voice=None, non_streaming_mode=None,
            max_new_tokens=max_new, seed=seed, initial_chunk_frames=None, output=output,
            segments=segments_of(text, deployment), knobs=rules.knobs(f.extra_params),
        )

    # --- generation --------------------------------------------------------------------------------

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        raise InvalidRequest(f"'ref_audio' is not supported by {self.rules.name} models: {NO_ENCODER}", "ref_audio")

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            **super().generation_fields(plan, segment),
            "voice": plan.speaker,
        }

    # --- voices: the checkpoint's presets only -------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        raise InvalidRequest(f"{self.rules.name} models take preset voices only: {NO_ENCODER}", "voice")


ADAPTER = VoxtralAdapter()
