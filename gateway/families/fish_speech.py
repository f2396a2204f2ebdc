"""The Fish Speech S2 Pro family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a Fish Speech checkpoint (or when only Fish Speech is served). The spec's
Fish Speech section: `voice` "default" (or omitted), `ref_audio` + `ref_text` for cloning, 44.1 kHz output;
where it is silent, vLLM-Omni 0.30.0's adapter (tts_adapters/fish_speech.py) and its serving code:

- `voice` omitted or "default": the model's own voice (the text-only prompt); an uploaded voice: its DAC codes
  computed once at upload through each served checkpoint's dac_encoder, and its stored transcript (vLLM-Omni
  applies an uploaded speaker's audio and text as `ref_audio`/`ref_text`); any other name is a 400 naming
  `voice` (no built-in speakers);
- `ref_audio` + `ref_text` (cloning; overrides an uploaded voice): the clip's codes through the checkpoint's
  dac_encoder (resampled to 44.1 kHz). Cloning without a transcript (`ref_audio`, or an uploaded voice stored
  without one, and no `ref_text`) is a 400 naming `ref_text` (vLLM-Omni: "Voice cloning requires 'ref_text'");
  `ref_text` without a clip is a 400 naming it (vLLM-Omni ignores it silently; the project refuses it, as for
  OmniVoice);
- output at 44.1 kHz: `response_format` and `sample_rate` by the shared rules (opus has no 44.1 kHz rate, so
  opus without a `sample_rate` Opus takes is a 400 naming `sample_rate`), streams pcm/wav (raw and SSE), `speed`
  on whole clips only (the shared time-stretch; the model has no speed control);
- `max_new_tokens` (frames of 2048 samples, 1..4096, default 2048), `seed` (the request's own sampling noise;
  without one 42), `extra_params` `temperature` (0..10, default 0.8; 0: greedy), `top_k` (0..4097, default 30;
  0: off), `top_p` (0 < p <= 1, default 0.9) — vLLM-Omni applies exactly these three keys of extra_params to the
  sampling params (defaults: its deploy config).
Refused, each with a 400 naming the field: any other `extra_params` key (the planner) and the family's
unsupported fields (contract RULES: `speaker_embedding`, `instructions`, `language`, `task_type`,
`x_vector_only_mode`, `non_streaming_mode`, `initial_codec_chunk_frames`, `word_timestamps`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttscore.contract import fish_speech
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

from ..backend import InferenceBackend
from ..errors import bad_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan, audio_key
from ..family_kit import BaseAdapter, checked_length_and_seed, encode_clip, segments_of, stored_voice_of
from ..speech_fields import (
    MAX_REF_TEXT_CHARS,
    SpeechFields,
    StoredVoice,
    plan_output,
    refuse_unsupported,
    text_field,
)

VOICE_ALIASES: dict[str, str] = {}  # no built-in speakers for OpenAI's voice names


class FishSpeechAdapter(BaseAdapter):
    family = fish_speech.FAMILY
    rules = fish_speech.RULES
    default_task = fish_speech.TASK
    # Uploaded voices: codes computed at upload through every served checkpoint's dac_encoder.
    voice_aliases = VOICE_ALIASES
    clones_voices = True  # each checkpoint has its dac_encoder (export/fish_speech/family.py)

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        refuse_unsupported(f, rules)
        voice = text_field(f.voice, "voice", 256)
        voice = (voice or "").strip() or None
        stored: StoredVoice | None = None
        if voice is not None and voice.lower() != fish_speech.DEFAULT_VOICE:
            stored = stored_voice_of(deployment, voice.lower(), ckpt, f"Invalid voice '{f.voice}' for {name}: it has "
                                     f"no built-in speakers; omit 'voice' (or use '{fish_speech.DEFAULT_VOICE}'), use "
                                     "an uploaded voice, or clone with 'ref_audio' and 'ref_text'")
        ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
        ref_text = text_field(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        ref_text = ref_text if ref_text and ref_text.strip() else None
        if ref_audio is not None:
            stored = None  # inline ref_audio overrides an uploaded voice (spec)
        elif stored is not None and ref_text is None:
            ref_text = stored.ref_text if stored.ref_text and stored.ref_text.strip() else None
        elif stored is None and f.ref_text is not None:
            raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        if (ref_audio is not None or stored is not None) and ref_text is None:
            raise bad_request("Voice cloning requires 'ref_text' (transcript of the reference audio)", "ref_text")
        output = plan_output(f, ckpt.sample_rate)
        max_new, seed = checked_length_and_seed(f, rules)
        knobs = rules.knobs(f.extra_params)
        return SpeechPlan(
            checkpoint=ckpt, task=rules.tasks[0], text=text, speaker=None, language="auto", instructions=None,
            ref_audio=ref_audio, ref_text=ref_text, x_vector_only=False, stored_voice=stored,
            non_streaming_mode=None, max_new_tokens=max_new, seed=seed, initial_chunk_frames=None, output=output,
            segments=segments_of(text, deployment), knobs=knobs,
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return plan.ref_audio is not None or plan.stored_voice is not None  # else the model's own voice

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> np.ndarray:
        """The reference codes [frames, 10]: an uploaded voice's (computed at upload), or `ref_audio`'s through
        the checkpoint's dac_encoder (shared by concurrent and recent requests)."""
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
        stored = plan.stored_voice
        if stored is not None:
            if stored.model_features is None:
                raise InvalidRequest(f"Voice '{stored.name}' cannot be used with {plan.checkpoint.name}", "voice")
            codes: np.ndarray = await stored.model_features(model, False)  # one set of codes per clip
            return codes
        assert plan.ref_audio is not None
        audio, rate = await env.ref_audio(plan.ref_audio, self.rules.ref_audio)
        codes = await env.shared(audio_key(model, audio, rate),
                                 lambda: self.clip_features(env.backend, model, audio, rate, False, env.request_id))
        return codes

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            **super().generation_fields(plan, segment),
            "ref_text": plan.ref_text if self.needs_reference(plan) else None,
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        codes = None if features is None else np.ascontiguousarray(features, dtype=np.int64)
        return triton_io.request_tensors(**self.generation_fields(plan, segment), ref_dac_codes=codes)

    # --- voices ---------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> np.ndarray:
        """A clip's DAC codes [frames, 10] through a dac_encoder (the transcript does not change them)."""
        (codes,) = await encode_clip(backend, model, audio, rate, request_id, fish_speech.ENCODER_OUTPUTS[:1])
        return codes.astype(np.int64)


ADAPTER = FishSpeechAdapter()
