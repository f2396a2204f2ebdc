"""The VoxCPM2 family's gateway adapter (gateway.family.FamilyAdapter).

One task (Base, cloning-capable TTS) answered only when `model` names a VoxCPM2 checkpoint (or
when only VoxCPM2 is served). `voice` is an uploaded/precomputed voice, or omitted / "default" for
the model's own zero-shot voice; `ref_audio` + optional `ref_text` (its transcript: the reference
is then a continuation prompt). The fields the family does not take are its FamilyRules'
`unsupported` (400 naming the field).

Reference features: (patches [T, P, D] float32, prompt patches or None) from a precomputed voice
(both for its ref_continuation mode), from an uploaded voice (computed once, at upload), or from
`ref_audio` through the checkpoint's audiovae_encoder (inputs `audio`, `sample_rate`, `prompt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract import tensors as triton_io
from ttscore.contract import voxcpm2
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.contract.voxcpm2 import PROMPT_PATCHES, REF_PATCHES

from ..backend import INVALID_ARG, BackendError, InferenceBackend
from ..errors import bad_request, from_invalid_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan, audio_key
from ..family_kit import BaseAdapter, encode_clip, segments_of, stored_voice_of
from ..speech_fields import (
    MAX_REF_TEXT_CHARS,
    SpeechFields,
    StoredVoice,
    plan_output,
    refuse_unsupported,
    text_field,
)
from ..voices.precomputed import PrecomputedVoice, SkipVoice, description, read_entry

Features = tuple[np.ndarray, "np.ndarray | None"]  # (ref_patches, prompt_patches)
VOICE_ALIASES: dict[str, str] = {}  # no preset speakers for OpenAI's voice names


async def reference_patches(backend: InferenceBackend, model: str, audio: np.ndarray, sample_rate: int,
                            prompt: bool, request_id: str) -> np.ndarray:
    """Latent patches [T, P, D] float32 of a clip through an audiovae_encoder; `prompt`: a
    continuation prompt (the request has its transcript) rather than a cloning reference."""
    (patches,) = await encode_clip(backend, model, audio, sample_rate, request_id, ["ref_patches"],
                                   prompt=np.array([prompt], dtype=np.bool_))
    return patches.astype(np.float32)


@dataclass(frozen=True)
class PatchTarget:
    """A served VoxCPM2 checkpoint as precomputed profiles are checked against it."""

    name: str
    patch_shape: tuple[int, int]  # (patch_size, feat_dim)
    audiovae_sha256: str | None = None


def _precomputed(stored: StoredVoice | None) -> bool:
    return stored is not None and stored.precomputed is not None


class VoxCPM2Adapter(BaseAdapter):
    family = voxcpm2.FAMILY
    rules = voxcpm2.RULES
    default_task = voxcpm2.TASK
    # Uploaded voices: latent patches computed at upload through every served checkpoint's encoder.
    clones_voices = True
    voice_aliases = VOICE_ALIASES

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        """What precomputed voices are checked against: the patch shape and the AudioVAE checksum."""
        return {
            "patch_shape": voxcpm2.patch_shape(dict(manifest.configs.get("config.json") or {})),
            "audiovae_sha256": manifest.source_sha256(voxcpm2.AUDIOVAE_FILE),
        }

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        ckpt = named
        rules = self.rules
        name = rules.name
        refuse_unsupported(f, rules)
        if f.task_type is not None and f.task_type not in rules.tasks:
            raise bad_request(
                f"{name} models do not support task_type='{f.task_type}'. Use task_type='{rules.tasks[0]}' or omit it.",
                "task_type",
            )
        voice = text_field(f.voice, "voice", 256)
        voice = (voice or "").strip().lower() or None
        ref_text = text_field(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        ref_text = ref_text if ref_text and ref_text.strip() else None
        ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
        stored: StoredVoice | None = None
        if voice is not None and voice != voxcpm2.ZERO_SHOT_VOICE:
            stored = stored_voice_of(deployment, voice, ckpt, f"Invalid voice '{f.voice}' for {name}: use an uploaded "
                                     f"voice, or omit 'voice' (or '{voxcpm2.ZERO_SHOT_VOICE}') for the model's own "
                                     "voice", fits="checkpoint")
        if ref_audio is not None:
            stored = None  # inline ref_audio overrides an uploaded voice (spec)
        elif stored is not None and _precomputed(stored):
            if ref_text is not None:  # its patches are padded for the mode it was made with
                raise bad_request(f"Voice '{stored.name}' is precomputed with its own prompt mode and transcript: "
                                  "omit 'ref_text' (or give 'ref_audio' with it)", "ref_text")
            ref_text = stored.ref_text.strip() if stored.ref_text and stored.ref_text.strip() else None
        elif stored is not None and ref_text is None:
            ref_text = stored.ref_text.strip() if stored.ref_text and stored.ref_text.strip() else None
        elif stored is None and ref_text is not None:
            raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        output = plan_output(f, ckpt.sample_rate)
        try:
            max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
            initial = rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
            seed = rules.field("seed").check(f.seed)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None
        return SpeechPlan(
            checkpoint=ckpt, task=rules.tasks[0], text=text, speaker=None, language="auto", instructions=None,
            ref_audio=ref_audio, ref_text=ref_text, x_vector_only=False, stored_voice=stored,
            non_streaming_mode=None, max_new_tokens=max_new, seed=seed, initial_chunk_frames=initial, output=output,
            segments=segments_of(text, deployment),
        )

    # --- generation --------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return plan.ref_audio is not None or plan.stored_voice is not None  # else its zero-shot voice

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Features:
        prompt = plan.ref_text is not None  # with its transcript the reference is a continuation prompt
        stored = plan.stored_voice
        if stored is not None and _precomputed(stored):
            ref_patches, prompt_patches = stored.precomputed
            if ref_patches is not None and prompt_patches is not None:
                return ref_patches, prompt_patches  # ref_continuation
            single = ref_patches if ref_patches is not None else prompt_patches
            assert single is not None
            return single, None  # reference (no ref_text) or continuation (with its ref_text)
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
        if stored is not None:
            if stored.model_features is None:
                raise InvalidRequest(f"Voice '{stored.name}' cannot be used with {plan.checkpoint.name}", "voice")
            return await stored.model_features(model, prompt), None
        assert plan.ref_audio is not None
        audio, rate = await env.ref_audio(plan.ref_audio, self.rules.ref_audio)
        try:
            patches: np.ndarray = await env.shared(
                audio_key(model, audio, rate, "prompt" if prompt else "reference"),
                lambda: reference_patches(env.backend, model, audio, rate, prompt, env.request_id))
        except BackendError as exc:
            if exc.code == INVALID_ARG:  # the encoder refused the clip: the client's ref_audio
                raise InvalidRequest(exc.message, "ref_audio") from None
            raise
        return patches, None

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            **super().generation_fields(plan, segment),
            "ref_text": plan.ref_text,
            "initial_chunk_frames": plan.initial_chunk_frames,
        }

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        fields = self.generation_fields(plan, segment)
        if self.needs_reference(plan):
            assert features is not None
            fields["ref_patches"] = features[0]
            if features[1] is not None:  # ref_continuation: the reference + the transcribed prompt
                fields["prompt_patches"] = features[1]
        return triton_io.request_tensors(**fields)


    # --- voices ------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> np.ndarray:
        """An uploaded clip's patches for one prompt mode (with a transcript: a continuation prompt)."""
        return await reference_patches(backend, model, audio, rate, prompt, request_id)

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """Every served VoxCPM2 checkpoint's patch shape and AudioVAE (a profile fits those that match)."""
        targets = [PatchTarget(c.name, c.facts["patch_shape"], c.facts.get("audiovae_sha256"))
                   for c in checkpoints if c.family == self.family and c.facts.get("patch_shape") is not None]
        return {"targets": targets}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any,
                          targets: Sequence[PatchTarget] = ()) -> PrecomputedVoice:
        """A profile (ttscore.contract.voicefile): `ref_patches` and/or `prompt_patches` [T, P, D]
        for its prompt mode, checked against the served checkpoints' patch shape and AudioVAE."""
        name, mode, path, tensors = read_entry(root, raw_name, entry, voxcpm2.PROFILE_MODES, None)
        wanted = {REF_PATCHES: mode in ("reference", "ref_continuation"),
                  PROMPT_PATCHES: mode in ("continuation", "ref_continuation")}
        patches: dict[str, np.ndarray] = {}
        for key, needed in wanted.items():
            if not needed:
                continue
            arr = tensors.get(key)
            if arr is None:
                raise SkipVoice(f"mode {mode!r} needs tensor {key!r}")
            if arr.dtype.kind != "f" or arr.ndim != 3 or 0 in arr.shape:
                raise SkipVoice(f"{key} must be a non-empty float [T, P, D] tensor, got {arr.dtype} {list(arr.shape)}")
            arr = arr.astype(np.float32)
            if not np.all(np.isfinite(arr)):
                raise SkipVoice(f"{key} has non-finite values")
            patches[key] = arr
        shapes = {tuple(a.shape[1:]) for a in patches.values()}
        if len(shapes) != 1:
            raise SkipVoice(f"{REF_PATCHES} and {PROMPT_PATCHES} differ in [P, D]")
        shape = shapes.pop()
        declared = (entry.get("patch_size"), entry.get("feat_dim"))
        if declared not in ((None, None), shape):
            raise SkipVoice(f"patches are [P, D] = {list(shape)} but the entry says {list(declared)}")
        text = entry.get("prompt_text", entry.get("ref_text"))
        text = text.strip() or None if isinstance(text, str) else None
        if mode != "reference" and text is None:
            raise SkipVoice(f"mode {mode!r} needs 'prompt_text' (the transcript of the prompt patches)")
        identity = entry.get("checkpoint") if isinstance(entry.get("checkpoint"), dict) else {}
        sha = identity.get("audiovae_sha256") if isinstance(identity.get("audiovae_sha256"), str) else None
        models: tuple[str, ...] | None = None
        if targets:
            models = tuple(t.name for t in targets if t.patch_shape == shape
                           and (sha is None or t.audiovae_sha256 is None or t.audiovae_sha256 == sha))
            if not models:
                made = identity.get("name") or "another checkpoint"
                raise SkipVoice(
                    f"made for {made} (patches [P, D] = {list(shape)}, AudioVAE {sha or 'unknown'}); the served "
                    f"{self.rules.name} models are " + ", ".join(
                        f"{t.name} ({list(t.patch_shape)}, {t.audiovae_sha256 or 'unknown'})" for t in targets))
        return PrecomputedVoice(
            name=name, mode=mode, features=None, path=path, ref_text=text if mode != "reference" else None,
            speaker_description=description(entry), model_type=self.family,
            ref_patches=patches.get(REF_PATCHES), prompt_patches=patches.get(PROMPT_PATCHES), models=models,
        )

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        return StoredVoice(voice.name, ref_text=voice.ref_text, family=voice.model_type, models=voice.models,
                           precomputed=(voice.ref_patches, voice.prompt_patches))


ADAPTER = VoxCPM2Adapter()
