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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ttscore.contract import breeze_tts_2, families
from ttscore.contract import tensors as triton_io
from ttscore.contract.breeze_tts_2.voicefile import CODEC_SHA256, CODEC_WEIGHTS, PROFILE_MODES
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import REF_CODE

from ..backend import INVALID_ARG, BackendError, InferenceBackend
from ..errors import bad_request, from_invalid_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan, audio_key
from ..family_kit import BaseAdapter, encode_clip, segments_of
from ..speech_fields import SpeechFields, StoredVoice, plan_output, refuse_unsupported, text_field
from ..voices.precomputed import PrecomputedVoice, SkipVoice, description, read_entry

if TYPE_CHECKING:
    from ttscore.contract.manifest import Manifest


_VOICES = {v.lower(): v for v in breeze_tts_2.VOICES}
VOICE_ALIASES: dict[str, str] = {}  # no OpenAI voice names: `voice` is S0..S9 (or a stored voice)


async def reference_codes(backend: InferenceBackend, model: str, audio: np.ndarray, sample_rate: int,
                          request_id: str) -> np.ndarray:
    """Codes [T, 16] int64 of a clip through a breeze_speech_encoder."""
    (codes,) = await encode_clip(backend, model, audio, sample_rate, request_id, ["ref_codes"])
    return codes.astype(np.int64)


@dataclass(frozen=True)
class BreezeVoice(PrecomputedVoice):
    """A precomputed Breeze-TTS-2 voice: the reference codes (and, as every voice, its ref_text)."""

    ref_codes: np.ndarray | None = None  # int64 [T, 16]


@dataclass(frozen=True)
class CodecTarget:
    """A served Breeze-TTS-2 checkpoint as precomputed voices are checked against it."""

    name: str
    codec_sha256: str | None


def _transcript(text: str | None) -> str | None:
    """The transcript as given (vLLM-Omni's adapter does not strip it); none when blank."""
    return text if text and text.strip() else None


class BreezeTTS2Adapter(BaseAdapter):
    family = breeze_tts_2.FAMILY
    rules = breeze_tts_2.RULES
    default_task = breeze_tts_2.RULES.tasks[0]
    # Uploaded voices: the codes are computed at upload through every served checkpoint's encoder.
    clones_voices = True
    voice_aliases = VOICE_ALIASES

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        """What precomputed voices are checked against: the checksum of the codec that makes the codes."""
        return {"codec_sha256": manifest.source_sha256(CODEC_WEIGHTS)}

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt, rules = named, self.rules
        name = rules.name
        refuse_unsupported(f, rules)
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
        stored: StoredVoice | None = None
        if speaker is None:
            stored = deployment.resolve_voice(voice) if voice is not None else None
            if stored is None:
                raise bad_request(f"Invalid voice '{f.voice}' for {name}: use one of {', '.join(breeze_tts_2.VOICES)} "
                                  f"(default {breeze_tts_2.DEFAULT_VOICE}) or an uploaded voice", "voice")
            speaker = breeze_tts_2.DEFAULT_VOICE  # a stored voice is the reference; the tag stays the default
        if stored is not None and stored.family not in (None, self.family):
            made = families.display_name(stored.family)
            raise bad_request(f"Voice '{stored.name}' is a precomputed {made} voice: it cannot be used with {name} "
                              f"model `{ckpt.name}`", "voice")
        if stored is not None and stored.models is not None and ckpt.name not in stored.models:
            raise bad_request(f"Voice '{stored.name}' was precomputed with another {name} codec "
                              f"(it fits {', '.join(stored.models) or 'no served model'}), not `{ckpt.name}`", "voice")
        instructions = text_field(f.instructions, "instructions", rules.max_text_chars)
        instructions = instructions if instructions and instructions.strip() else None
        ref_text = _transcript(text_field(f.ref_text, "ref_text", rules.max_text_chars))
        ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
        if ref_audio is not None:
            stored = None  # inline ref_audio overrides a stored voice (spec)
        if ref_audio is None and stored is None:
            if ref_text is not None:
                raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        elif ref_text is None:
            ref_text = _transcript(stored.ref_text) if stored is not None else None
            if ref_text is None:
                raise bad_request(f"{name} voice cloning needs 'ref_text' (the transcript of the reference audio)",
                                  "ref_text")
        output = plan_output(f, ckpt.sample_rate)
        try:
            max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
            initial = rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
            seed = rules.field("seed").check(f.seed)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        return SpeechPlan(
            checkpoint=ckpt, task=ckpt.task, text=text, speaker=speaker, language="auto", instructions=instructions,
            ref_audio=ref_audio, ref_text=ref_text, x_vector_only=False, stored_voice=stored, non_streaming_mode=None,
            max_new_tokens=max_new, seed=seed, initial_chunk_frames=initial, output=output,
            segments=segments_of(text, deployment),
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return plan.ref_audio is not None or plan.stored_voice is not None  # clone, direction

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> np.ndarray:
        """The reference codes: a precomputed voice's, an upload's (computed at upload, with the
        prompt flag the upload used), or `ref_audio` through the checkpoint's speech encoder."""
        stored = plan.stored_voice
        if stored is not None and stored.precomputed is not None:
            codes: np.ndarray = stored.precomputed
            return codes
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
        if stored is not None:
            if stored.model_features is None:
                raise InvalidRequest(f"Voice '{stored.name}' cannot be used with {plan.checkpoint.name}", "voice")
            uploaded: np.ndarray = await stored.model_features(model, _transcript(stored.ref_text) is not None)
            return uploaded
        assert plan.ref_audio is not None
        audio, rate = await env.ref_audio(plan.ref_audio, self.rules.ref_audio)
        try:
            got: np.ndarray = await env.shared(
                audio_key(model, audio, rate),
                lambda: reference_codes(env.backend, model, audio, rate, env.request_id))
        except BackendError as exc:
            if exc.code == INVALID_ARG:  # the encoder refused the clip: the client's ref_audio
                raise InvalidRequest(exc.message, "ref_audio") from None
            raise
        return got

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            **super().generation_fields(plan, segment),
            "speaker": plan.speaker,
            "instructions": plan.instructions,
            "ref_text": plan.ref_text,
            "initial_chunk_frames": plan.initial_chunk_frames,
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        fields = self.generation_fields(plan, segment)
        if self.needs_reference(plan):
            assert features is not None
            fields["ref_codes"] = features
        return triton_io.request_tensors(**fields)

    # --- voices ------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> np.ndarray:
        """An uploaded clip's codes (the same with or without a transcript)."""
        return await reference_codes(backend, model, audio, rate, request_id)

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """Every served Breeze-TTS-2 checkpoint's codec checksum (a voice fits those with its codec)."""
        return {"targets": [CodecTarget(c.name, c.facts.get("codec_sha256"))
                            for c in checkpoints if c.family == self.family]}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any,
                          targets: Sequence[CodecTarget] = ()) -> PrecomputedVoice:
        """A profile (ttscore.contract.breeze_tts_2.voicefile): `ref_code` [T, 16] and its
        `ref_text`, checked against the served checkpoints' codec."""
        name, mode, path, tensors = read_entry(root, raw_name, entry, PROFILE_MODES, PROFILE_MODES[0])
        codes = tensors.get(REF_CODE)
        if codes is None:
            raise SkipVoice(f"missing tensor {REF_CODE!r}")
        groups = breeze_tts_2.NUM_CODEBOOKS
        if codes.dtype.kind not in "iu" or codes.ndim != 2 or codes.shape[0] == 0 or codes.shape[1] != groups:
            raise SkipVoice(f"{REF_CODE} must be a non-empty integer [T, {groups}] tensor, got {codes.dtype} "
                            f"{list(codes.shape)}")
        if codes.min() < 0 or codes.max() >= breeze_tts_2.CODEBOOK_SIZE:
            raise SkipVoice(f"{REF_CODE} must be codec codes in [0, {breeze_tts_2.CODEBOOK_SIZE})")
        ref_text = _transcript(entry.get("ref_text")) if isinstance(entry.get("ref_text"), str) else None
        if ref_text is None:
            raise SkipVoice("needs 'ref_text' (the transcript of the reference codes)")
        identity = entry.get("checkpoint") if isinstance(entry.get("checkpoint"), dict) else {}
        sha = identity.get(CODEC_SHA256) if isinstance(identity.get(CODEC_SHA256), str) else None
        models: tuple[str, ...] | None = None
        if targets:
            models = tuple(t.name for t in targets if sha is None or t.codec_sha256 is None or t.codec_sha256 == sha)
            if not models:
                made = identity.get("name") or "another checkpoint"
                raise SkipVoice(f"made for {made} (codec {sha}); the served {self.rules.name} models' codecs are "
                                + ", ".join(f"{t.name} ({t.codec_sha256 or 'unknown'})" for t in targets))
        ref_codes = np.ascontiguousarray(codes.astype(np.int64))
        ref_codes.setflags(write=False)  # shared between requests
        return BreezeVoice(name=name, mode=mode, features=None, path=path, ref_text=ref_text,
                           speaker_description=description(entry), model_type=self.family, models=models,
                           ref_codes=ref_codes)

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        assert isinstance(voice, BreezeVoice) and voice.ref_codes is not None
        return StoredVoice(voice.name, ref_text=voice.ref_text, family=voice.model_type, models=voice.models,
                           precomputed=voice.ref_codes)


ADAPTER = BreezeTTS2Adapter()
