"""The Breeze-TTS-2 family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a Breeze-TTS-2 checkpoint (or when only Breeze-TTS-2 is served).
Four modes, chosen by the fields: plain (`voice` S0..S9, default S0), voice design (`instructions`),
clone (`ref_audio` + `ref_text`, its transcript; or an uploaded / precomputed voice) and direction
(a reference + `instructions`). Decoding is greedy; `sample_rate` is 24000 only and `speed` 1.0 only.
Refused with a 400 naming the field: the family's unsupported fields (contract RULES), a voice that
is neither S0..S9 nor a stored voice, `ref_text` without a reference, a reference without a
transcript (a stored voice's transcript is its own unless the request gives `ref_text`).
`extra_params` (where vLLM-Omni reads sampling knobs) takes guidance_scale/cfg_scale at 1.0 only
(contract GREEDY_PARAMS); other values and keys (temperature, top_p, top_k, negative_prompt, ...) are
400s naming `extra_params`. A list of clips in `ref_audio` (more than one reference) is refused by the
protocol.

Reference features: the clip's codec codes ref_codes [T, 16] int64, from a precomputed voice, from
an uploaded voice (computed once, at upload, through each served checkpoint's feature model), or
from `ref_audio` through the checkpoint's breeze_speech_encoder (inputs `audio`, `sample_rate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ttscore.contract import breeze_tts_2
from ttscore.contract.breeze_tts_2.voicefile import CODEC_SHA256, CODEC_WEIGHTS, PROFILE_MODES
from ttscore.contract.manifest import Manifest

from ..errors import bad_request
from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import (
    CodecFacts,
    CodecVoicesAdapter,
    clone_reference,
    stored_voice_of,
    transcript,
    voice_name,
)
from ..speech_fields import SpeechFields, refuse_other_task, text_field
from ..voices.precomputed import SkipVoice

_VOICES = {v.lower(): v for v in breeze_tts_2.VOICES}


class BreezeTTS2Adapter(CodecVoicesAdapter):
    family = breeze_tts_2.FAMILY
    rules = breeze_tts_2.RULES
    default_task = breeze_tts_2.RULES.tasks[0]
    # Uploaded voices: the codes are computed at upload through every served checkpoint's encoder.
    clones_voices = True
    reference_input = "ref_codes"  # [T, 16] int64 (breeze_speech_encoder's output): clone and direction
    voice_modes = PROFILE_MODES
    codec_identity_key = CODEC_SHA256
    code_grid = (breeze_tts_2.NUM_CODEBOOKS, breeze_tts_2.CODEBOOK_SIZE)

    def manifest_facts(self, manifest: Manifest) -> CodecFacts:
        return CodecFacts(codec_sha256=manifest.source_sha256(CODEC_WEIGHTS))

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        rules = self.rules
        name = rules.name
        for field, value in (("speed", f.speed), ("sample_rate", f.sample_rate)):
            fixed = breeze_tts_2.FIXED_VALUES[field]
            if value is not None and value != fixed:
                shown = int(fixed) if field == "sample_rate" else fixed
                raise bad_request(f"{name} models take '{field}' = {shown} only, got {value}", field)
        refuse_other_task(f, rules, " (the mode follows the fields; omit it)")
        voice = voice_name(f)
        speaker = breeze_tts_2.DEFAULT_VOICE if voice is None else _VOICES.get(voice.lower())
        stored = None
        if speaker is None:
            assert voice is not None
            stored = stored_voice_of(deployment, voice, ckpt, f"Invalid voice '{f.voice}' for {name}: use one of "
                                     f"{', '.join(breeze_tts_2.VOICES)} (default {breeze_tts_2.DEFAULT_VOICE}) or an "
                                     "uploaded voice", fits="codec")
            speaker = breeze_tts_2.DEFAULT_VOICE  # a stored voice is the reference; the tag stays the default
        instructions = transcript(text_field(f.instructions, "instructions", rules.max_text_chars))  # None: blank
        ref = clone_reference(f, stored, rules.max_text_chars)
        if ref.cloning and ref.ref_text is None:
            raise bad_request(f"{name} voice cloning needs 'ref_text' (the transcript of the reference audio)",
                              "ref_text")
        return self.new_plan(f, ckpt, text, deployment, speaker=speaker, instructions=instructions,
                             ref_audio=ref.ref_audio, ref_text=ref.ref_text, stored_voice=ref.stored)

    # --- generation --------------------------------------------------------------------------------

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {**super().generation_fields(plan, segment), "speaker": plan.speaker}

    def knob_fields(self, knobs: Mapping[str, int | float]) -> dict[str, Any]:
        return {}  # taken only at the value greedy decoding means (contract GREEDY_PARAMS): nothing to send

    # --- voices ------------------------------------------------------------------------------------


    def voice_transcript(self, entry: Mapping[str, Any]) -> str | None:
        text = entry.get("ref_text")
        ref_text = transcript(text) if isinstance(text, str) else None
        if ref_text is None:
            raise SkipVoice("needs 'ref_text' (the transcript of the reference codes)")
        return ref_text


ADAPTER = BreezeTTS2Adapter()
