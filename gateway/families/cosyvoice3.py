"""The CosyVoice3 family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a CosyVoice3 checkpoint (or when only CosyVoice3 is served). Voice
cloning only (the spec's "Supported Models" and vLLM-Omni's adapter): the voice of a reference clip with
its transcript. Fields:

- `ref_audio` (required unless `voice` names an uploaded voice): the clip's speech tokens, prompt mel and
  speaker embedding through the checkpoint's `prompt_encoder` (shared by concurrent and recent requests);
- `ref_text` (required: the clip's transcript; an uploaded voice's stored one when the request has none):
  the model prefixes "You are a helpful assistant.<|endofprompt|>" when it lacks `<|endofprompt|>`;
- `voice`: omitted or "default" (the reference's voice: only with `ref_audio`), or an uploaded voice (its
  three features computed once at upload through each served checkpoint's prompt_encoder, and its
  transcript); `ref_audio` overrides an uploaded voice; any other name is a 400 naming `voice`;
- `max_new_tokens` (speech tokens of 40 ms, 1..4096; default min(2048, 20 x the text's tokens)); `seed`
  (the RAS sampling and flow noise; without one the gateway draws one: random, as vLLM-Omni's); `speed` (whole clips only, as for every family: the
  shared planner); `response_format`/`sample_rate`/`stream`/`stream_format`: the shared output rules;
  `extra_params` `temperature` (0..10, 0: greedy), `top_k`, `top_p`: the RAS sampling of this request, as
  vLLM-Omni 0.30.0 applies them (contract KNOBS).
Refused (400 naming the field): a missing `ref_audio` or `ref_text`, a clip prompt_encoder refuses
(`ref_audio`), any other `extra_params` key or a value outside its range (the planner), and the family's unsupported fields (contract RULES:
`speaker_embedding`, `instructions`, `language`, `task_type`, `x_vector_only_mode`, `non_streaming_mode`,
`initial_codec_chunk_frames`, `word_timestamps`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttscore.contract import cosyvoice3
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

VOICE_ALIASES: dict[str, str] = {}  # no preset speakers for OpenAI's voice names
Features = tuple[np.ndarray, np.ndarray, np.ndarray]  # speech tokens [T], prompt mel [2T, 80], embedding


class CosyVoice3Adapter(BaseAdapter):
    family = cosyvoice3.FAMILY
    rules = cosyvoice3.RULES
    default_task = cosyvoice3.TASK
    # Uploaded voices: features computed at upload through every served checkpoint's prompt_encoder.
    voice_aliases = VOICE_ALIASES
    clones_voices = True  # each checkpoint has its prompt_encoder (export/cosyvoice3/family.py)

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        refuse_unsupported(f, rules)
        voice = text_field(f.voice, "voice", 256)
        voice = (voice or "").strip() or None
        stored: StoredVoice | None = None
        if voice is not None and voice.lower() != cosyvoice3.DEFAULT_VOICE:
            stored = stored_voice_of(deployment, voice.lower(), ckpt, f"Invalid voice '{f.voice}' for {name}: use an "
                                     f"uploaded voice, or omit 'voice' (or '{cosyvoice3.DEFAULT_VOICE}') with "
                                     "'ref_audio' and 'ref_text'")
            if stored.model_features is None:  # a precomputed voice file: this family has none
                raise bad_request(f"Voice '{stored.name}' is a precomputed voice: it cannot be used with {name} "
                                  f"model `{ckpt.name}`", "voice")
        ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
        ref_text = text_field(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        ref_text = ref_text if ref_text and ref_text.strip() else None
        if ref_audio is not None:
            stored = None  # inline ref_audio overrides an uploaded voice (spec)
        elif stored is None:
            raise bad_request(f"{name} requires 'ref_audio' (reference audio for voice cloning) or an uploaded "
                              "voice", "ref_audio")
        if ref_text is None and stored is not None:
            ref_text = stored.ref_text if stored.ref_text and stored.ref_text.strip() else None
        if ref_text is None:
            raise bad_request(f"{name} requires 'ref_text' (transcript of the reference audio)", "ref_text")
        output = plan_output(f, ckpt.sample_rate)
        max_new, seed = checked_length_and_seed(f, rules)
        return SpeechPlan(
            checkpoint=ckpt, task=rules.tasks[0], text=text, speaker=None, language="auto", instructions=None,
            ref_audio=ref_audio, ref_text=ref_text, x_vector_only=False, stored_voice=stored,
            non_streaming_mode=None, max_new_tokens=max_new, seed=seed, initial_chunk_frames=None, output=output,
            segments=segments_of(text, deployment),
            knobs=rules.knobs(f.extra_params),
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return True  # every request clones (ref_audio or an uploaded voice)

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Features:
        """The clip's three features: an uploaded voice's (computed at upload), or `ref_audio`'s through the
        checkpoint's prompt_encoder (shared by concurrent and recent requests)."""
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
        stored = plan.stored_voice
        if stored is not None:
            if stored.model_features is None:
                raise InvalidRequest(f"Voice '{stored.name}' cannot be used with {plan.checkpoint.name}", "voice")
            # the prompt mode the upload computed them in (the features do not depend on it)
            uploaded: Features = await stored.model_features(model, bool((stored.ref_text or "").strip()))
            return uploaded
        assert plan.ref_audio is not None
        audio, rate = await env.ref_audio(plan.ref_audio, self.rules.ref_audio)
        features: Features = await env.shared(
            audio_key(model, audio, rate), lambda: self.clip_features(env.backend, model, audio, rate, False,
                                                                      env.request_id))
        return features

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            **super().generation_fields(plan, segment),
            "ref_text": plan.ref_text,
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        tokens, mel, emb = features
        return triton_io.request_tensors(
            **self.generation_fields(plan, segment),
            prompt_speech_tokens=np.ascontiguousarray(tokens, np.int64),
            prompt_mel=np.ascontiguousarray(mel, np.float32), prompt_embedding=np.ascontiguousarray(emb, np.float32))

    # --- voices ---------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Features:
        """A clip's speech tokens, prompt mel and speaker embedding through a prompt_encoder."""
        tokens, mel, embedding = await encode_clip(backend, model, audio, rate, request_id, cosyvoice3.ENCODER_OUTPUTS)
        return (tokens.astype(np.int64), mel.astype(np.float32), embedding.astype(np.float32))


ADAPTER = CosyVoice3Adapter()
