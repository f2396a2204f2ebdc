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
Refused (400 naming the field): the family's unsupported fields (contract RULES),
`initial_codec_chunk_frames` (no frame streaming), a `task_type` other than Base, `ref_text` without
a reference, a clip the encoder refuses (`ref_audio`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ttscore.contract import omnivoice
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.omnivoice import text as omnivoice_text
from ttscore.contract.omnivoice.voicefile import CODEC_SHA256, CODEC_WEIGHTS, PROFILE_MODES, check_codes
from ttscore.contract.voicefile import REF_CODE

from ..backend import InferenceBackend
from ..errors import bad_request, from_invalid_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan, audio_key
from ..family_kit import BaseAdapter, encode_clip, segments_of, stored_voice_of
from ..longtext import split_segments
from ..speech_fields import (
    MAX_REF_TEXT_CHARS,
    SpeechFields,
    StoredVoice,
    plan_output,
    refuse_unsupported,
    text_field,
)
from ..voices.precomputed import PrecomputedVoice, SkipVoice, description, read_entry

if TYPE_CHECKING:
    from ttscore.contract.manifest import Manifest


VOICE_ALIASES: dict[str, str] = {}  # no preset speakers for OpenAI's voice names
LANGUAGES = "language_ids"  # manifest_facts key: the reference's language map (name -> id)
CODEC = "codec_sha256"  # manifest_facts key: the checksum of the codec weights (precomputed voices fit it)


@dataclass(frozen=True)
class OmniVoiceVoice(PrecomputedVoice):
    """A precomputed OmniVoice voice: the reference codes (and, as every voice, its ref_text)."""

    ref_codes: np.ndarray | None = None  # int64 [8, T]


@dataclass(frozen=True)
class CodecTarget:
    """A served OmniVoice checkpoint as precomputed voices are checked against it."""

    name: str
    codec_sha256: str | None


@dataclasses.dataclass(frozen=True)
class OmniVoicePlan(SpeechPlan):
    """A plan with the family's own generation inputs."""

    language_id: str | None = None
    speed: float = 1.0  # the reference's: applied by the model (the output's speed stays 1.0)



class OmniVoiceAdapter(BaseAdapter):
    family = omnivoice.FAMILY
    rules = omnivoice.RULES
    default_task = omnivoice.TASK
    # Uploaded voices: codes computed at upload through every served checkpoint's codec_encoder.
    voice_aliases = VOICE_ALIASES
    clones_voices = True  # each checkpoint has its codec_encoder (export/omnivoice/family.py)

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        table = (manifest.raw.get("tables") or {}).get(LANGUAGES) or {}
        return {LANGUAGES: {str(k): str(v) for k, v in table.items()},
                CODEC: manifest.source_sha256(CODEC_WEIGHTS)}

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        refuse_unsupported(f, rules)
        if f.initial_codec_chunk_frames is not None:
            raise bad_request(f"'initial_codec_chunk_frames' is not supported by {name} models (non-autoregressive: "
                              "audio comes a whole sentence at a time)", "initial_codec_chunk_frames")
        if f.task_type is not None and f.task_type not in rules.tasks:
            raise bad_request(f"{name} models do not support task_type='{f.task_type}'. Use "
                              f"task_type='{rules.tasks[0]}' or omit it.", "task_type")
        voice = text_field(f.voice, "voice", 256)
        voice = (voice or "").strip() or None
        stored: StoredVoice | None = None
        if voice is not None and voice.lower() != omnivoice.DEFAULT_VOICE:
            stored = stored_voice_of(deployment, voice.lower(), ckpt, f"Invalid voice '{f.voice}' for {name}: use an "
                                     f"uploaded voice, or omit 'voice' (or '{omnivoice.DEFAULT_VOICE}') for the "
                                     "model's auto voice", fits="codec")
        ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
        ref_text = text_field(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        ref_text = ref_text if ref_text and ref_text.strip() else None
        if ref_audio is not None:
            stored = None  # inline ref_audio overrides an uploaded voice (spec)
        elif stored is not None and ref_text is None:
            ref_text = stored.ref_text if stored.ref_text and stored.ref_text.strip() else None
        elif stored is None and ref_text is not None:
            raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        ref_text = omnivoice_text.clone_ref_text(ref_text) if ref_text is not None else None
        cloning = ref_audio is not None or stored is not None
        instructions = text_field(f.instructions, "instructions", rules.max_text_chars)
        instructions = instructions if instructions and instructions.strip() else None
        speed = 1.0 if f.speed is None else float(f.speed)
        lo, hi = omnivoice.SPEED_RANGE
        if not (math.isfinite(speed) and lo <= speed <= hi):
            raise bad_request(f"'speed' must be between {lo} and {hi}, got {f.speed}", "speed")
        # The model applies `speed` itself (duration scaling), so the output is never time-stretched.
        output = plan_output(dataclasses.replace(f, speed=None), ckpt.sample_rate)
        segments = split_segments(text, rules.max_text_chars)  # longer texts the model chunks itself
        try:
            language = omnivoice_text.resolve_language(f.language, ckpt.facts.get(LANGUAGES, {}), name)
            omnivoice_text.resolve_instructions(instructions, omnivoice_text.has_chinese(text))
            seed = rules.field("seed").check(f.seed)
            max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
            for part in segments if not cloning else ():  # with a reference: at its rate (the model checks)
                omnivoice.checked_frames(part, None, None, speed, max_new)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        return OmniVoicePlan(
            checkpoint=ckpt, task=rules.tasks[0], text=text, speaker=None, language=(f.language or "auto").lower(),
            instructions=instructions, ref_audio=ref_audio, ref_text=ref_text, x_vector_only=False, stored_voice=stored,
            non_streaming_mode=None, max_new_tokens=max_new, seed=seed, initial_chunk_frames=None, output=output,
            segments=segments_of(text, deployment),
            language_id=language, speed=speed, knobs=rules.knobs(f.extra_params),
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return plan.ref_audio is not None or plan.stored_voice is not None  # else the auto voice

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> np.ndarray:
        """The reference codes [8, T]: a precomputed voice's, an uploaded voice's (computed at
        upload), or `ref_audio`'s through the checkpoint's codec_encoder (shared by concurrent and
        recent requests)."""
        stored = plan.stored_voice
        if stored is not None and stored.precomputed is not None:
            precomputed: np.ndarray = stored.precomputed
            return precomputed
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
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
        assert isinstance(plan, OmniVoicePlan)
        return {
            **super().generation_fields(plan, segment),
            "language": plan.language_id,
            "instructions": plan.instructions,
            "ref_text": plan.ref_text if self.needs_reference(plan) else None,
            "speed": None if plan.speed == 1.0 else plan.speed,
            "sentence_chunks": True if plan.output.stream is not None else None,
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        codes = None if features is None else np.ascontiguousarray(features, dtype=np.int64)
        return triton_io.request_tensors(**self.generation_fields(plan, segment), ref_audio_codes=codes)

    # --- voices ---------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> np.ndarray:
        """A clip's codes [8, T] through a codec_encoder (the transcript does not change them)."""
        (codes,) = await encode_clip(backend, model, audio, rate, request_id, omnivoice.ENCODER_OUTPUTS[:1])
        return codes.astype(np.int64)

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """Every served OmniVoice checkpoint's codec checksum (a voice fits those with its codec)."""
        return {"targets": [CodecTarget(c.name, c.facts.get(CODEC)) for c in checkpoints if c.family == self.family]}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any,
                          targets: Sequence[CodecTarget] = ()) -> PrecomputedVoice:
        """A profile (ttscore.contract.omnivoice.voicefile): `ref_code` [T, 8] and its optional
        `ref_text`, checked against the served checkpoints' codec."""
        name, mode, path, tensors = read_entry(root, raw_name, entry, PROFILE_MODES, PROFILE_MODES[0])
        stored = tensors.get(REF_CODE)
        if stored is None:
            raise SkipVoice(f"missing tensor {REF_CODE!r}")
        if stored.ndim != 2:
            raise SkipVoice(f"{REF_CODE} must be an integer [T, {omnivoice.NUM_CODEBOOKS}] tensor, got "
                            f"{stored.dtype} {list(stored.shape)}")
        try:
            check_codes(stored.T, REF_CODE)
        except InvalidRequest as exc:
            raise SkipVoice(f"{REF_CODE}: {exc.message}") from None
        text = entry.get("ref_text")
        ref_text = text.strip() if isinstance(text, str) and text.strip() else None
        identity = entry.get("checkpoint") if isinstance(entry.get("checkpoint"), dict) else {}
        sha = identity.get(CODEC_SHA256) if isinstance(identity.get(CODEC_SHA256), str) else None
        models: tuple[str, ...] | None = None
        if targets:
            models = tuple(t.name for t in targets if sha is None or t.codec_sha256 is None or t.codec_sha256 == sha)
            if not models:
                made = identity.get("name") or "another checkpoint"
                raise SkipVoice(f"made for {made} (codec {sha}); the served {self.rules.name} models' codecs are "
                                + ", ".join(f"{t.name} ({t.codec_sha256 or 'unknown'})" for t in targets))
        ref_codes = np.ascontiguousarray(stored.T.astype(np.int64))
        ref_codes.setflags(write=False)  # shared between requests
        return OmniVoiceVoice(name=name, mode=mode, features=None, path=path, ref_text=ref_text,
                              speaker_description=description(entry), model_type=self.family, models=models,
                              ref_codes=ref_codes)

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        assert isinstance(voice, OmniVoiceVoice) and voice.ref_codes is not None
        return StoredVoice(voice.name, ref_text=voice.ref_text, family=voice.model_type, models=voice.models,
                           precomputed=voice.ref_codes)


ADAPTER = OmniVoiceAdapter()
