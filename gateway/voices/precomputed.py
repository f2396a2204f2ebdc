"""Precomputed custom voices: `custom_voice_dir/custom_voice_manifest.json` + one `.safetensors` per voice.

The format is defined by ttscore.contract.voicefile (written by `triton-tts precompute-voice`). Loaded
once at start-up; like upstream, only voices whose payload loads and validates are exposed, and every
rejected entry is skipped with a warning naming the reason, never fatal.

One directory can hold Qwen3-TTS Base profiles (x-vector, + reference codes) and VoxCPM2 ones (latent
patches for a prompt mode); each is checked against the served checkpoints of its family (Qwen: the
Base's x-vector size and code groups; VoxCPM2: patch shape and AudioVAE checksum) and remembers its
family, so planning refuses it for a model of another family (400 naming `voice`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import (
    MANIFEST_NAME,
    MODEL_TYPE,
    MODEL_TYPES,
    MODES,
    PROMPT_PATCHES,
    REF_CODE,
    REF_PATCHES,
    SCHEMA_VERSION,
    SPEAKER_EMBEDDING,
    VOXCPM2_MODEL_TYPE,
    VOXCPM2_MODES,
    validate_voice_name,
    voice_file_name,
    voice_key,
)

from .features import VoiceFeatures

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PatchTarget:
    """A served VoxCPM2 checkpoint as the loader checks profiles against it."""

    name: str
    patch_shape: tuple[int, int]  # (patch_size, feat_dim)
    audiovae_sha256: str | None = None


@dataclass(frozen=True)
class PrecomputedVoice:
    name: str
    mode: str  # Qwen3-TTS: "xvec" | "icl"; VoxCPM2: "reference" | "continuation" | "ref_continuation"
    features: VoiceFeatures | None  # Qwen3-TTS (ref_codes only for mode "icl"); None for VoxCPM2
    path: Path
    ref_text: str | None = None  # Qwen: the codes' transcript; VoxCPM2: the prompt's (continuation modes)
    speaker_description: str | None = None
    model_type: str = MODEL_TYPE  # the family it was made for
    ref_patches: np.ndarray | None = None  # VoxCPM2 [T, P, D]: the isolated reference (right-padded)
    prompt_patches: np.ndarray | None = None  # VoxCPM2 [T, P, D]: the continuation prompt (left-padded)
    models: tuple[str, ...] | None = None  # VoxCPM2: the served checkpoints it fits (None: not checked)

    @property
    def key(self) -> str:
        return voice_key(self.name)

    @property
    def x_vector_only(self) -> bool:
        return self.mode == "xvec"


def load_precomputed_voices(
    custom_voice_dir: str | os.PathLike[str] | None,
    *,
    embedding_dim: int | None = None,
    num_code_groups: int | None = None,
    reserved_names: Iterable[str] = (),
    voxcpm2: Sequence[PatchTarget] = (),
) -> dict[str, PrecomputedVoice]:
    """Valid voices of a custom_voice_dir keyed by lower-cased name; {} when unset or unusable.

    `embedding_dim` / `num_code_groups` (from the served Base checkpoint) reject Qwen3-TTS voices
    made with another model size; `voxcpm2` (the served VoxCPM2 checkpoints) rejects VoxCPM2 voices
    none of them can use (another patch shape or AudioVAE); `reserved_names` (the built-in speakers)
    cannot be shadowed.
    """
    if not custom_voice_dir:
        return {}
    root = Path(custom_voice_dir).expanduser()
    manifest_path = root / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        logger.warning("custom_voice_dir %s has no %s; no precomputed voices loaded", root, MANIFEST_NAME)
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("Cannot read custom voice manifest %s: %s; no precomputed voices loaded", manifest_path, exc)
        return {}
    if not isinstance(manifest, dict) or not isinstance(manifest.get("voices"), dict):
        logger.warning("Custom voice manifest %s has no 'voices' object; no precomputed voices loaded", manifest_path)
        return {}
    schema = manifest.get("schema_version", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        logger.warning("Custom voice manifest %s has schema_version %r, expected %d; skipped",
                       manifest_path, schema, SCHEMA_VERSION)
        return {}
    model_type = manifest.get("model_type") or MODEL_TYPE
    if model_type not in MODEL_TYPES:
        logger.warning("Custom voice manifest %s is for model_type %r, not one of %s; skipped",
                       manifest_path, model_type, ", ".join(MODEL_TYPES))
        return {}
    root_real = root.resolve()
    reserved = {voice_key(n) for n in reserved_names}
    voices: dict[str, PrecomputedVoice] = {}
    for raw_name, entry in manifest["voices"].items():
        try:
            family = entry.get("model_type") or model_type if isinstance(entry, dict) else model_type
            if family == VOXCPM2_MODEL_TYPE:
                voice = _load_voxcpm2_voice(root_real, raw_name, entry, voxcpm2)
            elif family == MODEL_TYPE:
                voice = _load_voice(root_real, raw_name, entry, embedding_dim, num_code_groups)
            else:
                raise _Skip(f"model_type {family!r} is not one of {', '.join(MODEL_TYPES)}")
        except _Skip as exc:
            logger.warning("Skipping precomputed voice %r from %s: %s", raw_name, manifest_path, exc)
            continue
        if voice.key in reserved:
            logger.warning("Skipping precomputed voice %r: the name is a built-in voice", voice.name)
            continue
        if voice.key in voices:
            logger.warning("Skipping precomputed voice %r: the name is already used (names are case-insensitive)",
                           voice.name)
            continue
        voices[voice.key] = voice
    logger.info("Loaded %d precomputed voice(s) from %s", len(voices), root)
    return voices


class _Skip(Exception):
    pass


def _read_entry(root: Path, raw_name: Any, entry: Any, modes: tuple[str, ...], default_mode: str | None
                ) -> tuple[str, str, Path, dict[str, np.ndarray]]:
    """(name, mode, path, tensors) of a manifest entry whose file loads; _Skip naming what is wrong."""
    from safetensors.numpy import load_file

    if not isinstance(entry, dict):
        raise _Skip("entry is not an object")
    try:
        name = validate_voice_name(entry.get("name") or raw_name)
    except InvalidRequest as exc:
        raise _Skip(exc.message) from None
    mode = str(entry.get("mode") or default_mode or "").lower()
    if mode not in modes:
        raise _Skip(f"invalid mode {mode!r}; expected one of {modes}")
    filename = entry.get("file") or entry.get("filename") or voice_file_name(name)
    if not isinstance(filename, str):
        raise _Skip("'file' is not a string")
    path = (root / filename).resolve()
    if root not in path.parents:
        raise _Skip(f"file {filename!r} escapes custom_voice_dir")
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # missing, truncated or not safetensors
        raise _Skip(f"cannot load {path.name}: {exc}") from None
    return name, mode, path, tensors


def _description(entry: dict[str, Any]) -> str | None:
    description = entry.get("speaker_description")
    return description.strip() or None if isinstance(description, str) else None


def _load_voxcpm2_voice(root: Path, raw_name: Any, entry: Any, targets: Sequence[PatchTarget]) -> PrecomputedVoice:
    name, mode, path, tensors = _read_entry(root, raw_name, entry, VOXCPM2_MODES, None)
    wanted = {REF_PATCHES: mode in ("reference", "ref_continuation"),
              PROMPT_PATCHES: mode in ("continuation", "ref_continuation")}
    patches: dict[str, np.ndarray] = {}
    for key, needed in wanted.items():
        if not needed:
            continue
        arr = tensors.get(key)
        if arr is None:
            raise _Skip(f"mode {mode!r} needs tensor {key!r}")
        if arr.dtype.kind != "f" or arr.ndim != 3 or 0 in arr.shape:
            raise _Skip(f"{key} must be a non-empty float [T, P, D] tensor, got {arr.dtype} {list(arr.shape)}")
        arr = arr.astype(np.float32)
        if not np.all(np.isfinite(arr)):
            raise _Skip(f"{key} has non-finite values")
        patches[key] = arr
    shapes = {tuple(a.shape[1:]) for a in patches.values()}
    if len(shapes) != 1:
        raise _Skip(f"{REF_PATCHES} and {PROMPT_PATCHES} differ in [P, D]")
    shape = shapes.pop()
    declared = (entry.get("patch_size"), entry.get("feat_dim"))
    if declared not in ((None, None), shape):
        raise _Skip(f"patches are [P, D] = {list(shape)} but the entry says {list(declared)}")
    text = entry.get("prompt_text", entry.get("ref_text"))
    text = text.strip() or None if isinstance(text, str) else None
    if mode != "reference" and text is None:
        raise _Skip(f"mode {mode!r} needs 'prompt_text' (the transcript of the prompt patches)")
    identity = entry.get("checkpoint") if isinstance(entry.get("checkpoint"), dict) else {}
    sha = identity.get("audiovae_sha256") if isinstance(identity.get("audiovae_sha256"), str) else None
    models: tuple[str, ...] | None = None
    if targets:
        models = tuple(t.name for t in targets if t.patch_shape == shape
                       and (sha is None or t.audiovae_sha256 is None or t.audiovae_sha256 == sha))
        if not models:
            made = identity.get("name") or "another checkpoint"
            raise _Skip(f"made for {made} (patches [P, D] = {list(shape)}, AudioVAE {sha or 'unknown'}); the served "
                        "VoxCPM2 models are " + ", ".join(
                            f"{t.name} ({list(t.patch_shape)}, {t.audiovae_sha256 or 'unknown'})" for t in targets))
    return PrecomputedVoice(
        name=name, mode=mode, features=None, path=path, ref_text=text if mode != "reference" else None,
        speaker_description=_description(entry), model_type=VOXCPM2_MODEL_TYPE,
        ref_patches=patches.get(REF_PATCHES), prompt_patches=patches.get(PROMPT_PATCHES), models=models,
    )


def _load_voice(
    root: Path, raw_name: Any, entry: Any, embedding_dim: int | None, num_code_groups: int | None
) -> PrecomputedVoice:
    name, mode, path, tensors = _read_entry(root, raw_name, entry, MODES, "xvec")
    emb = tensors.get(SPEAKER_EMBEDDING)
    if emb is None:
        raise _Skip(f"missing tensor {SPEAKER_EMBEDDING!r}")
    vector_like = emb.ndim >= 1 and emb.size == max(emb.shape)  # [D], or [1, D] and the like
    if emb.dtype.kind != "f" or emb.size == 0 or not vector_like:
        raise _Skip(f"{SPEAKER_EMBEDDING} must be a non-empty float vector, got {emb.dtype} {list(emb.shape)}")
    x_vector = emb.reshape(-1).astype(np.float32)
    if not np.all(np.isfinite(x_vector)):
        raise _Skip(f"{SPEAKER_EMBEDDING} has non-finite values")
    if embedding_dim is not None and x_vector.shape[0] != embedding_dim:
        raise _Skip(f"{SPEAKER_EMBEDDING} dim {x_vector.shape[0]}, the served model expects {embedding_dim}")
    ref_text = entry.get("ref_text")
    ref_text = ref_text.strip() or None if isinstance(ref_text, str) else None
    ref_codes = None
    if mode == "icl":
        codes = tensors.get(REF_CODE)
        if codes is None:
            raise _Skip(f"mode 'icl' needs tensor {REF_CODE!r}")
        if codes.dtype.kind not in "iu" or codes.ndim != 2 or codes.shape[0] == 0:
            raise _Skip(f"{REF_CODE} must be a non-empty integer [T, groups] tensor, got {codes.dtype} {list(codes.shape)}")
        if num_code_groups is not None and codes.shape[1] != num_code_groups:
            raise _Skip(f"{REF_CODE} has {codes.shape[1]} code groups, the served model uses {num_code_groups}")
        if codes.min() < 0:
            raise _Skip(f"{REF_CODE} has negative codes")
        if ref_text is None:
            raise _Skip("mode 'icl' needs 'ref_text' (the transcript of the reference codes)")
        ref_codes = codes.astype(np.int64)
    return PrecomputedVoice(
        name=name,
        mode=mode,
        features=VoiceFeatures.from_result((x_vector, ref_codes), with_codes=mode == "icl"),
        path=path,
        ref_text=ref_text,
        speaker_description=_description(entry),
    )
