"""Precomputed custom voices: `custom_voice_dir/custom_voice_manifest.json` + one `.safetensors` per voice.

The format is defined by ttscore.contract.voicefile (written by `triton-tts precompute-voice`). Loaded
once at start-up; like upstream, only voices whose payload loads and validates are exposed, and every
rejected entry is skipped with a warning naming the reason, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import (
    MANIFEST_NAME,
    MODEL_TYPE,
    MODES,
    REF_CODE,
    SCHEMA_VERSION,
    SPEAKER_EMBEDDING,
    validate_voice_name,
    voice_file_name,
    voice_key,
)

from .features import VoiceFeatures

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrecomputedVoice:
    name: str
    mode: str  # "xvec" | "icl"
    features: VoiceFeatures  # ref_codes only for mode "icl"
    path: Path
    ref_text: str | None = None
    speaker_description: str | None = None

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
) -> dict[str, PrecomputedVoice]:
    """Valid voices of a custom_voice_dir keyed by lower-cased name; {} when unset or unusable.

    `embedding_dim` / `num_code_groups` (from the served Base checkpoint) reject voices made with
    another model size; `reserved_names` (the built-in speakers) cannot be shadowed.
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
    model_type = manifest.get("model_type")
    if model_type not in (None, MODEL_TYPE):
        logger.warning("Custom voice manifest %s is for model_type %r, not %r; skipped",
                       manifest_path, model_type, MODEL_TYPE)
        return {}
    root_real = root.resolve()
    reserved = {voice_key(n) for n in reserved_names}
    voices: dict[str, PrecomputedVoice] = {}
    for raw_name, entry in manifest["voices"].items():
        try:
            voice = _load_voice(root_real, raw_name, entry, embedding_dim, num_code_groups)
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


def _load_voice(
    root: Path, raw_name: Any, entry: Any, embedding_dim: int | None, num_code_groups: int | None
) -> PrecomputedVoice:
    from safetensors.numpy import load_file

    if not isinstance(entry, dict):
        raise _Skip("entry is not an object")
    try:
        name = validate_voice_name(entry.get("name") or raw_name)
    except InvalidRequest as exc:
        raise _Skip(exc.message) from None
    mode = str(entry.get("mode") or "xvec").lower()
    if mode not in MODES:
        raise _Skip(f"invalid mode {mode!r}; expected one of {MODES}")
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
    description = entry.get("speaker_description")
    description = description.strip() or None if isinstance(description, str) else None
    return PrecomputedVoice(
        name=name,
        mode=mode,
        features=VoiceFeatures.from_result((x_vector, ref_codes), with_codes=mode == "icl"),
        path=path,
        ref_text=ref_text,
        speaker_description=description,
    )
