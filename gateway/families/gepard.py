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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ttscore.contract import gepard
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

from ..backend import InferenceBackend
from ..errors import bad_request, from_invalid_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan
from ..longtext import segment_seed, split_segments
from ..speech_fields import SpeechFields, StoredVoice, plan_output, refuse_unsupported, text_field
from ..voices.precomputed import PrecomputedVoice, SkipVoice

if TYPE_CHECKING:
    from ttscore.contract.manifest import Manifest


VOICE_ALIASES: dict[str, str] = {}  # OpenAI's voice names are not Gepard voices
WHOLE_FORMATS = ("wav", "pcm", "flac", "mp3")  # opus: 22.05 kHz is not an Opus rate; aac: not in the table


class GepardAdapter:
    family = gepard.FAMILY
    rules = gepard.RULES
    routes_by_task = False
    default_task = gepard.TASK
    caches_voice_features = False
    clones_voices = False  # no voice features: no uploaded or precomputed voices
    voice_aliases = VOICE_ALIASES

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        return {}

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        refuse_unsupported(f, rules)
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
        output = plan_output(f, ckpt.sample_rate)
        try:
            max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
            seed = rules.field("seed").check(f.seed)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        segments = split_segments(text, deployment.segment_chars)
        return SpeechPlan(
            checkpoint=ckpt, task=ckpt.task, text=text, speaker=voice, language="auto", instructions=None,
            ref_audio=None, ref_text=None, x_vector_only=False, stored_voice=None, non_streaming_mode=None,
            max_new_tokens=max_new, seed=seed, initial_chunk_frames=None, output=output,
            segments=tuple(segments) if len(segments) > 1 else (),
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return False

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        raise InvalidRequest(f"{self.rules.name} takes no reference audio", "ref_audio")

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            "text": plan.texts[segment],
            "max_new_tokens": plan.max_new_tokens,
            "seed": segment_seed(plan.seed, segment, self.rules.field("seed").hi),
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        return triton_io.request_tensors(**self.generation_fields(plan, segment))

    # --- voices: none (one built-in voice) -------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        raise InvalidRequest(f"{self.rules.name} has no voices but 'default'", "voice")

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        return {}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any, **checks: Any) -> PrecomputedVoice:
        raise SkipVoice(f"{self.rules.name} has no precomputed voices (its only voice is 'default')")

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        raise SkipVoice(f"{self.rules.name} has no stored voices")


ADAPTER = GepardAdapter()
