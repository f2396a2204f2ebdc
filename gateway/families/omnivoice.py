"""The OmniVoice family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names an OmniVoice checkpoint (or when only OmniVoice is served). The
model is non-autoregressive: it fills in the whole utterance (its length fixed up front by the
reference's duration estimate) over `num_step` unmasking steps. Fields:

- `voice` omitted or "default": the auto voice (the model's own); or an uploaded voice (its codes
  computed once at upload through each served checkpoint's codec_encoder); or a precomputed voice
  file (`precompute-voice`, ttscore.contract.omnivoice.voicefile: the clip's codes and transcript,
  served only by checkpoints whose codec made them: another codec's is a 400 naming `voice`); any
  other name is a 400 naming `voice`;
- `ref_audio` + optional `ref_text` (cloning; overrides an uploaded voice): the clip's codes through
  the checkpoint's codec_encoder (the reference's preprocessing), the transcript as the reference's
  create_voice_clone_prompt leaves it (`clone_ref_text`); without one the codes are used alone;
- `instructions`: voice design, checked and normalised against the reference's vocabulary (400
  naming `instructions`); `language`: a name or id of the reference's language map (`Auto`: none;
  an unknown one is a 400 naming it, where the reference silently uses none);
- `seed`; `speed`: as the reference does it, the duration estimate divided by it (so it is allowed
  while streaming and the audio is not time-stretched afterwards);
- `max_new_tokens`: a cap on the estimate (a text needing more frames is a 400 naming it);
- `extra_params`: `num_step`, `guidance_scale`, `t_shift`, `position_temperature`,
  `class_temperature` (the reference's generation knobs; both temperatures 0: deterministic);
- streamed requests (raw, SSE, a WebSocket with stream_audio) set `sentence_chunks`: the text is
  generated in short chunks cut at sentence marks, each sent as soon as it is decoded.
Refused (400 naming the field): the family's unsupported fields (contract RULES, `initial_codec_chunk_frames`
among them: no frame streaming), a `task_type` other than Base, `ref_text` without a reference, a clip the
encoder refuses (`ref_audio`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ttscore.contract import omnivoice
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.contract.omnivoice import text as omnivoice_text
from ttscore.contract.omnivoice.voicefile import CODEC_SHA256, CODEC_WEIGHTS, PROFILE_MODES

from ..errors import from_invalid_request
from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import (
    CodecFacts,
    CodecVoicesAdapter,
    clone_reference,
    facts_of,
    requested_voice,
    transcript,
)
from ..longtext import split_segments
from ..speech_fields import SpeechFields, checked_speed, plan_output, refuse_other_task, text_field


@dataclasses.dataclass(frozen=True)
class OmniVoiceFacts(CodecFacts):
    """A checkpoint's codec and the reference's language map (name -> id) from its manifest's tables."""

    language_ids: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OmniVoicePlan(SpeechPlan):
    """A plan with the family's own generation inputs."""

    language_id: str | None = None
    speed: float = 1.0  # the reference's: applied by the model (the output's speed stays 1.0)


class OmniVoiceAdapter(CodecVoicesAdapter):
    family = omnivoice.FAMILY
    rules = omnivoice.RULES
    default_task = omnivoice.TASK
    # Uploaded voices: codes computed at upload through every served checkpoint's codec_encoder.
    clones_voices = True  # each checkpoint has its codec_encoder (export/omnivoice/family.py)
    plan_type = OmniVoicePlan
    reference_input = "ref_audio_codes"  # [8, T] int64 (codec_encoder's output); without: the auto voice
    voice_modes = PROFILE_MODES
    codec_identity_key = CODEC_SHA256
    code_grid = (omnivoice.NUM_CODEBOOKS, omnivoice.CODEBOOK_SIZE)

    def manifest_facts(self, manifest: Manifest) -> OmniVoiceFacts:
        table = (manifest.raw.get("tables") or {}).get("language_ids") or {}
        return OmniVoiceFacts(codec_sha256=manifest.source_sha256(CODEC_WEIGHTS),
                              language_ids={str(k): str(v) for k, v in table.items()})

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        rules = self.rules
        name = rules.name
        refuse_other_task(f, rules)
        stored = requested_voice(f, ckpt, deployment, omnivoice.DEFAULT_VOICE, fits="codec", own="auto voice")
        ref = clone_reference(f, stored)
        ref_text = omnivoice_text.clone_ref_text(ref.ref_text) if ref.ref_text is not None else None
        instructions = transcript(text_field(f.instructions, "instructions", rules.max_text_chars))  # None: blank
        speed = float(checked_speed(f))  # the Speech API's range (omnivoice.SPEED_RANGE)
        # The model applies `speed` itself (duration scaling), so the output is never time-stretched.
        output = plan_output(dataclasses.replace(f, speed=None), ckpt.sample_rate)
        segments = split_segments(text, rules.max_text_chars)  # longer texts the model chunks itself
        try:
            language = omnivoice_text.resolve_language(f.language, facts_of(ckpt, OmniVoiceFacts).language_ids, name)
            omnivoice_text.resolve_instructions(instructions, omnivoice_text.has_chinese(text))
            seed = rules.field("seed").check(f.seed)
            max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
            for part in segments if not ref.cloning else ():  # with a reference: at its rate (the model checks)
                omnivoice.checked_frames(part, None, None, speed, max_new)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        return self.new_plan(
            f, ckpt, text, deployment, language=(f.language or "auto").lower(), instructions=instructions,
            ref_audio=ref.ref_audio, ref_text=ref_text, stored_voice=ref.stored, output=output, max_new_tokens=max_new,
            seed=seed, initial_chunk_frames=None, language_id=language, speed=speed,
        )

    # --- generation --------------------------------------------------------------------------------

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        assert isinstance(plan, OmniVoicePlan)
        return {
            **super().generation_fields(plan, segment),
            "language": plan.language_id,
            "speed": None if plan.speed == 1.0 else plan.speed,
            "sentence_chunks": True if plan.output.stream is not None else None,
        }

    # --- voices ---------------------------------------------------------------------------------------


    def checked_codes(self, stored: np.ndarray) -> np.ndarray:
        """`ref_code` [T, 8] (ttscore.contract.omnivoice.voicefile), sent as [8, T]."""
        return super().checked_codes(stored).T


ADAPTER = OmniVoiceAdapter()
