"""The Breeze-TTS-2 family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a Breeze-TTS-2 checkpoint (or when only Breeze-TTS-2 is served).
Served modes: plain (`voice` S0..S9, default S0) and voice design (`instructions`). Decoding is
greedy; `sample_rate` is 24000 only and `speed` 1.0 only. Refused with a 400 naming the field: the
family's unsupported fields (contract RULES), any other voice, `ref_text` without `ref_audio`, and
`ref_audio` itself (clone and direction are not served yet: no voice-features model is deployed).
Sampling fields (temperature, top_p, top_k, negative_prompt, guidance_scale, ...) are not Speech API
request fields here at all: the protocol refuses them for every family.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ttscore.contract import breeze_tts_2
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

from ..backend import InferenceBackend
from ..errors import bad_request, from_invalid_request
from ..family import FeatureEnv
from ..longtext import segment_seed, split_segments
from ..planning import Deployment, SpeechFields, SpeechPlan, StoredVoice, plan_output, text_field
from ..voices.precomputed import PrecomputedVoice, SkipVoice

if TYPE_CHECKING:
    from ttscore.contract.manifest import Manifest

    from ..checkpoints import ServedCheckpoint

_VOICES = {v.lower(): v for v in breeze_tts_2.VOICES}
VOICE_ALIASES: dict[str, str] = {}  # no OpenAI voice names: `voice` is S0..S9


class BreezeTTS2Adapter:
    family = breeze_tts_2.FAMILY
    rules = breeze_tts_2.RULES
    routes_by_task = False
    default_task = breeze_tts_2.RULES.tasks[0]
    caches_voice_features = True  # never asked: uploaded voices are refused for this family
    voice_aliases = VOICE_ALIASES
    # No voice-features model is deployed (gateway.checkpoints): `ref_audio` is refused here.
    clones_voices = False

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        return {}

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: Deployment) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        given = {
            "x_vector_only_mode": f.x_vector_only_mode, "non_streaming_mode": f.non_streaming_mode,
            "language": None if isinstance(f.language, str) and f.language.strip().lower() == "auto" else f.language,
        }
        for field in rules.unsupported:
            if given.get(field) is not None:
                raise bad_request(f"'{field}' is not supported by {name} models", field)
        for field, value in (("speed", f.speed), ("sample_rate", f.sample_rate)):
            fixed = breeze_tts_2.FIXED_VALUES[field]
            if value is not None and value != fixed:
                shown = int(fixed) if field == "sample_rate" else fixed
                raise bad_request(f"{name} models take '{field}' = {shown} only, got {value}", field)
        if f.task_type is not None and f.task_type not in rules.tasks:
            raise bad_request(f"{name} models do not support task_type='{f.task_type}' (the mode follows the fields; "
                              "omit it)", "task_type")
        voice = text_field(f.voice, "voice", 256)
        voice = (voice or "").strip() or None
        speaker = breeze_tts_2.DEFAULT_VOICE if voice is None else _VOICES.get(voice.lower())
        if speaker is None:
            raise bad_request(f"Invalid voice '{f.voice}' for {name}: use one of {', '.join(breeze_tts_2.VOICES)} "
                              f"(default {breeze_tts_2.DEFAULT_VOICE})", "voice")
        instructions = text_field(f.instructions, "instructions", rules.max_text_chars)
        instructions = instructions if instructions and instructions.strip() else None
        ref_text = text_field(f.ref_text, "ref_text", rules.max_text_chars)
        if f.ref_audio is not None:
            raise bad_request(f"'ref_audio' (voice cloning) is not served for {name} models yet", "ref_audio")
        if ref_text is not None and ref_text.strip():
            raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        output = plan_output(f, ckpt.sample_rate)
        try:
            max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
            initial = rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
            seed = rules.field("seed").check(f.seed)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        segments = split_segments(text, deployment.segment_chars)
        return SpeechPlan(
            checkpoint=ckpt, task=ckpt.task, text=text, speaker=speaker, language="auto", instructions=instructions,
            ref_audio=None, ref_text=None, x_vector_only=False, stored_voice=None, non_streaming_mode=None,
            max_new_tokens=max_new, seed=seed, initial_chunk_frames=initial, output=output,
            segments=tuple(segments) if len(segments) > 1 else (),
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return False

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices yet", "ref_audio")

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            "text": plan.texts[segment],
            "speaker": plan.speaker,
            "instructions": plan.instructions,
            "max_new_tokens": plan.max_new_tokens,
            "seed": segment_seed(plan.seed, segment, self.rules.field("seed").hi),
            "initial_chunk_frames": plan.initial_chunk_frames,
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        return triton_io.request_tensors(**self.generation_fields(plan, segment))

    # --- voices (not served for this family yet) ---------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        raise InvalidRequest(f"{self.rules.name} models cannot use uploaded voices yet", "voice")

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        return {}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any, **checks: Any) -> PrecomputedVoice:
        raise SkipVoice(f"{self.rules.name} voice files are not supported yet")

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        raise InvalidRequest(f"{self.rules.name} models cannot use stored voices yet", "voice")


ADAPTER = BreezeTTS2Adapter()
