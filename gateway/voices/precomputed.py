"""Precomputed custom voices: `custom_voice_dir/custom_voice_manifest.json` + one `.safetensors` per voice.

The format is defined by ttscore.contract.voicefile (written by `triton-tts precompute-voice`). Loaded
once at start-up; like upstream, only voices whose payload loads and validates are exposed, and every
rejected entry is skipped with a warning naming the reason, never fatal.

One directory can hold the profiles of several families (an entry names its family in `model_type`,
else the manifest's); what an entry stores and how it is checked against the served checkpoints of
its family is that family's gateway adapter's (`precomputed_voice`, with the `checks` its
`precomputed_checks` derives from the served checkpoints). Each voice remembers its family, so
planning refuses it for a model of another family (400 naming `voice`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import (
    MANIFEST_NAME,
    MODEL_TYPE,
    SCHEMA_VERSION,
    validate_voice_name,
    voice_file_name,
    voice_key,
)

from .features import VoiceFeatures

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrecomputedVoice:
    name: str
    mode: str  # one of the family's profile modes
    features: VoiceFeatures | None  # x-vector (+ reference codes) of a family that clones from them
    path: Path
    ref_text: str | None = None  # the transcript of its reference (or prompt)
    speaker_description: str | None = None
    model_type: str = MODEL_TYPE  # the family it was made for
    ref_patches: np.ndarray | None = None  # latent patches [T, P, D]: the isolated reference (right-padded)
    prompt_patches: np.ndarray | None = None  # latent patches [T, P, D]: the continuation prompt (left-padded)
    models: tuple[str, ...] | None = None  # the served checkpoints it fits (None: not checked)

    @property
    def key(self) -> str:
        return voice_key(self.name)

    @property
    def x_vector_only(self) -> bool:
        return self.mode == "xvec"


Loader = Callable[[Path, Any, Any], "PrecomputedVoice"]


def load_precomputed_voices(
    custom_voice_dir: str | os.PathLike[str] | None,
    loaders: Mapping[str, Loader],
    *,
    reserved_names: Iterable[str] = (),
) -> dict[str, PrecomputedVoice]:
    """Valid voices of a custom_voice_dir keyed by lower-cased name; {} when unset or unusable.

    `loaders`: family -> its entry loader (`(root, name, entry) -> PrecomputedVoice`, SkipVoice for an
    unusable entry): the family adapter's `precomputed_voice` with the checks that reject voices
    made for another checkpoint (gateway.voice_registry.precomputed_loaders); `reserved_names` (the
    built-in speakers) cannot be shadowed.
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
    if model_type not in loaders:
        logger.warning("Custom voice manifest %s is for model_type %r, not one of %s; skipped",
                       manifest_path, model_type, ", ".join(loaders))
        return {}
    root_real = root.resolve()
    reserved = {voice_key(n) for n in reserved_names}
    voices: dict[str, PrecomputedVoice] = {}
    for raw_name, entry in manifest["voices"].items():
        try:
            family = entry.get("model_type") or model_type if isinstance(entry, dict) else model_type
            loader = loaders.get(family)
            if loader is None:
                raise SkipVoice(f"model_type {family!r} is not one of {', '.join(loaders)}")
            voice = loader(root_real, raw_name, entry)
        except SkipVoice as exc:
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


class SkipVoice(Exception):
    """A precomputed voice that cannot be used (skipped with a warning naming the reason)."""


def read_entry(root: Path, raw_name: Any, entry: Any, modes: tuple[str, ...], default_mode: str | None
               ) -> tuple[str, str, Path, dict[str, np.ndarray]]:
    """(name, mode, path, tensors) of a manifest entry whose file loads; SkipVoice naming what is wrong."""
    from safetensors.numpy import load_file

    if not isinstance(entry, dict):
        raise SkipVoice("entry is not an object")
    try:
        name = validate_voice_name(entry.get("name") or raw_name)
    except InvalidRequest as exc:
        raise SkipVoice(exc.message) from None
    mode = str(entry.get("mode") or default_mode or "").lower()
    if mode not in modes:
        raise SkipVoice(f"invalid mode {mode!r}; expected one of {modes}")
    filename = entry.get("file") or entry.get("filename") or voice_file_name(name)
    if not isinstance(filename, str):
        raise SkipVoice("'file' is not a string")
    path = (root / filename).resolve()
    if root not in path.parents:
        raise SkipVoice(f"file {filename!r} escapes custom_voice_dir")
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # missing, truncated or not safetensors
        raise SkipVoice(f"cannot load {path.name}: {exc}") from None
    return name, mode, path, tensors


def description(entry: dict[str, Any]) -> str | None:
    """The entry's speaker_description, trimmed (None when absent or blank)."""
    text = entry.get("speaker_description")
    return text.strip() or None if isinstance(text, str) else None
