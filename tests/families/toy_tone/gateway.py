"""toy_tone's gateway adapter (gateway.family.FamilyAdapter): one voice ("default"), no reference
audio, no stored voices; every Speech API field it does not take is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gateway.backend import InferenceBackend
from gateway.errors import bad_request, from_invalid_request
from gateway.family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan
from gateway.speech_fields import SpeechFields, StoredVoice, plan_output, text_field
from gateway.voices.precomputed import PrecomputedVoice, SkipVoice
from ttscore.contract import tensors
from ttscore.contract.errors import InvalidRequest

from . import contract


class ToyToneAdapter:
    family = contract.NAME
    rules = contract.RULES
    routes_by_task = False  # answers only when `model` names its checkpoint (or it is all that is served)
    default_task = contract.TASK
    caches_voice_features = False
    clones_voices = False
    voice_aliases: dict[str, str] = {}

    def manifest_facts(self, manifest: Any) -> dict[str, Any]:
        return {}

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task
        name = self.rules.name
        language = None if isinstance(f.language, str) and f.language.strip().lower() == "auto" else f.language
        for field in self.rules.unsupported:
            value = language if field == "language" else getattr(f, field, None)
            if value is not None:
                raise bad_request(f"'{field}' is not supported by {name} models", field)
        if f.task_type is not None and f.task_type not in self.rules.tasks:
            raise bad_request(f"{name} models do not support task_type='{f.task_type}'", "task_type")
        voice = (text_field(f.voice, "voice", 256) or contract.VOICE).strip().lower()
        if voice != contract.VOICE:
            raise bad_request(f"Invalid voice '{f.voice}' for {name}: its only voice is '{contract.VOICE}'", "voice")
        try:
            max_new = self.rules.field("max_new_tokens").check(f.max_new_tokens)
            initial = self.rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        return SpeechPlan(
            checkpoint=named, task=contract.TASK, text=text, speaker=None, language="auto", instructions=None,
            ref_audio=None, ref_text=None, x_vector_only=False, stored_voice=None, non_streaming_mode=None,
            max_new_tokens=max_new, seed=None, initial_chunk_frames=initial, output=plan_output(f, named.sample_rate),
        )

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return False

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        return None

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {"text": plan.texts[segment], "voice": contract.VOICE, "max_new_tokens": plan.max_new_tokens,
                "initial_chunk_frames": plan.initial_chunk_frames}

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        return tensors.request_tensors(**self.generation_fields(plan, segment))

    # --- voices: none of its own, and it cannot use uploaded or precomputed ones --------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        raise InvalidRequest(f"{self.rules.name} models take no voice but '{contract.VOICE}'", "voice")

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        return {}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any, **checks: Any) -> PrecomputedVoice:
        raise SkipVoice(f"{self.rules.name} has no precomputed voices")

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        raise SkipVoice(f"{self.rules.name} has no stored voices")


FAMILY = ToyToneAdapter()
