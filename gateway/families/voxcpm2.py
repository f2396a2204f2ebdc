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
from ttscore.contract.manifest import Manifest
from ttscore.contract.voxcpm2 import PROMPT_PATCHES, REF_PATCHES

from ..backend import InferenceBackend
from ..errors import bad_request
from ..family import FamilyFacts, FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import BaseAdapter, clone_reference, encode_clip, facts_of, requested_voice
from ..speech_fields import SpeechFields, StoredVoice, refuse_other_task
from ..voices.precomputed import PrecomputedVoice, SkipVoice, description, read_entry

Features = tuple[np.ndarray, "np.ndarray | None"]  # (ref_patches, prompt_patches)


@dataclass(frozen=True)
class VoxCPM2Facts(FamilyFacts):
    """What precomputed voices are checked against: the patch shape and the AudioVAE checksum."""

    patch_shape: tuple[int, int] | None = None  # (patch_size, feat_dim)
    audiovae_sha256: str | None = None


@dataclass(frozen=True)
class PatchTarget:
    """A served VoxCPM2 checkpoint as precomputed profiles are checked against it."""

    name: str
    patch_shape: tuple[int, int]  # (patch_size, feat_dim)
    audiovae_sha256: str | None = None


class VoxCPM2Adapter(BaseAdapter):
    family = voxcpm2.FAMILY
    rules = voxcpm2.RULES
    default_task = voxcpm2.TASK
    # Uploaded voices: latent patches computed at upload through every served checkpoint's encoder.
    clones_voices = True

    def manifest_facts(self, manifest: Manifest) -> VoxCPM2Facts:
        return VoxCPM2Facts(patch_shape=voxcpm2.patch_shape(dict(manifest.configs.get("config.json") or {})),
                            audiovae_sha256=manifest.source_sha256(voxcpm2.AUDIOVAE_FILE))

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        refuse_other_task(f, self.rules)
        stored = requested_voice(f, ckpt, deployment, voxcpm2.ZERO_SHOT_VOICE, fits="checkpoint")
        ref = clone_reference(f, stored)
        if ref.stored is not None and ref.stored.precomputed is not None and f.ref_text and f.ref_text.strip():
            # its patches are padded for the mode it was made with
            raise bad_request(f"Voice '{ref.stored.name}' is precomputed with its own prompt mode and transcript: "
                              "omit 'ref_text' (or give 'ref_audio' with it)", "ref_text")
        return self.new_plan(f, ckpt, text, deployment, ref_audio=ref.ref_audio, ref_text=ref.ref_text,
                             stored_voice=ref.stored)

    # --- generation --------------------------------------------------------------------------------

    def prompt_mode(self, plan: SpeechPlan) -> bool:
        return plan.ref_text is not None  # with its transcript the reference is a continuation prompt

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Features:
        """(patches [T, P, D], prompt patches or None): a precomputed voice's for its mode, or the patches of an
        upload or `ref_audio` for the plan's prompt mode."""
        stored = plan.stored_voice
        if stored is not None and stored.precomputed is not None:
            ref_patches, prompt_patches = stored.precomputed
            if ref_patches is not None and prompt_patches is not None:
                return ref_patches, prompt_patches  # ref_continuation
            single = ref_patches if ref_patches is not None else prompt_patches
            assert single is not None
            return single, None  # reference (no ref_text) or continuation (with its ref_text)
        return await super().reference_features(plan, env), None

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        fields = self.generation_fields(plan, segment)
        if features is not None:
            fields["ref_patches"] = features[0]
            if features[1] is not None:  # ref_continuation: the reference + the transcribed prompt
                fields["prompt_patches"] = features[1]
        return triton_io.request_tensors(**fields)

    # --- voices ------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> np.ndarray:
        """Latent patches [T, P, D] float32 of a clip through an audiovae_encoder, for one prompt mode (with a
        transcript: a continuation prompt rather than a cloning reference)."""
        (patches,) = await encode_clip(backend, model, audio, rate, request_id, ["ref_patches"],
                                       prompt=np.array([prompt], dtype=np.bool_))
        return patches.astype(np.float32)

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """Every served VoxCPM2 checkpoint's patch shape and AudioVAE (a profile fits those that match)."""
        facts = [(c.name, facts_of(c, VoxCPM2Facts)) for c in checkpoints if c.family == self.family]
        return {"targets": [PatchTarget(name, f.patch_shape, f.audiovae_sha256)
                            for name, f in facts if f.patch_shape is not None]}

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
