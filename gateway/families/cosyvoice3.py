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
`initial_codec_chunk_frames`; `word_timestamps` is the gateway's: gateway.word_timing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ttscore.contract import cosyvoice3
from ttscore.contract import tensors as triton_io

from ..backend import InferenceBackend
from ..errors import bad_request
from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import BaseAdapter, clone_reference, encode_clip, requested_voice
from ..speech_fields import SpeechFields

Features = tuple[np.ndarray, np.ndarray, np.ndarray]  # speech tokens [T], prompt mel [2T, 80], embedding


class CosyVoice3Adapter(BaseAdapter):
    family = cosyvoice3.FAMILY
    rules = cosyvoice3.RULES
    default_task = cosyvoice3.TASK
    # Uploaded voices: features computed at upload through every served checkpoint's prompt_encoder.
    clones_voices = True  # each checkpoint has its prompt_encoder (export/cosyvoice3/family.py)

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        name = self.rules.name
        default = cosyvoice3.DEFAULT_VOICE
        stored = requested_voice(f, ckpt, deployment, default, f"Invalid voice '{f.voice}' for {name}: use an "
                                 f"uploaded voice, or omit 'voice' (or '{default}') with 'ref_audio' and 'ref_text'")
        if stored is not None and stored.model_features is None:  # a precomputed voice file: this family has none
            raise bad_request(f"Voice '{stored.name}' is a precomputed voice: it cannot be used with {name} "
                              f"model `{ckpt.name}`", "voice")
        ref = clone_reference(f, stored, required=f"{name} requires 'ref_audio' (reference audio for voice "
                              "cloning) or an uploaded voice")
        if ref.ref_text is None:
            raise bad_request(f"{name} requires 'ref_text' (transcript of the reference audio)", "ref_text")
        return self.new_plan(f, ckpt, text, deployment, ref_audio=ref.ref_audio, ref_text=ref.ref_text,
                             stored_voice=ref.stored)

    # --- generation --------------------------------------------------------------------------------

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
