"""The voices a deployment can speak with besides its built-in speakers: uploaded and precomputed.

- Uploaded voices live in a gateway.voices.VoiceStore (one .safetensors per voice, restored at
  start-up; the spec's SPEAKER_* / VLLM_OMNI_SPEAKER_REGISTRATION_POLICY settings). At upload their
  features are computed through the served checkpoints' feature models, as each family's gateway
  adapter says (gateway.family: `clip_features`): a family that `caches_voice_features` has them
  computed by the store for its first Base checkpoint and kept in a bounded LRU
  (gateway.voices.FeatureCache, invalidated on delete and overwrite; a voice restored from disk is
  computed once, on first use); the others get them per served checkpoint and prompt mode, kept by
  voice version. Speaking with voice="name" then needs no reference processing.
- Precomputed voices come from `custom_voice_dir` (gateway.voices.precomputed), loaded at start-up
  and checked against the served checkpoints of their family by its adapter. Each knows its family,
  so a request for a model of another family is a 400 naming `voice`.
- Both are Base voice-cloning inputs (speech_fields.StoredVoice).

Names are one case-insensitive namespace: built-in (and the OpenAI voice aliases, gateway.aliases) <
precomputed < uploaded, and an upload can never shadow a name to its left. Pure asyncio (no FastAPI); Triton is reached only through the backend
bound at start-up (`bind`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ttscore.contract import families as contract_families
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import voice_key

from . import errors
from .aliases import AliasError, effective_voice_aliases
from .backend import INVALID_ARG, BackendError, InferenceBackend
from .families import ADAPTERS
from .family import FamilyAdapter, ServedCheckpoint, default_voice_aliases
from .settings import Settings, SettingsError
from .speech_fields import StoredVoice
from .voices import (
    FeatureCache,
    MultipartForm,
    PrecomputedVoice,
    VoiceNotFound,
    VoiceRecord,
    VoiceSettingsError,
    VoiceStore,
    delete_response,
    load_precomputed_voices,
    upload_response,
)
from .voices.admission import (
    ENV_MAX_DURATION,
    ENV_MAX_UPLOADED,
    ENV_MIN_DURATION,
    ENV_POLICY,
    ENV_SAMPLES_DIR,
)
from .voices.precomputed import Loader

logger = logging.getLogger(__name__)

FORM_FIELDS = ("audio_sample", "consent", "name", "ref_text", "speaker_description")

# Gateway config keys -> the spec's environment variables they override.
_ENV_OF_SETTING = {
    "speaker_samples_dir": ENV_SAMPLES_DIR,
    "speaker_max_uploaded": ENV_MAX_UPLOADED,
    "speaker_registration_policy": ENV_POLICY,
    "speaker_max_duration_s": ENV_MAX_DURATION,
    "speaker_min_duration_s": ENV_MIN_DURATION,
}


def store_env(settings: Settings, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment VoiceStore.from_env reads: the process's, with the config's keys on top."""
    out = dict(os.environ if env is None else env)
    for key, var in _ENV_OF_SETTING.items():
        value = getattr(settings, key)
        if value is not None:
            out[var] = str(value)
    return out


def precomputed_loaders(checks: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Loader]:
    """Every family's precomputed-voice loader (its adapter's `precomputed_voice`) with `checks`:
    family -> the keyword arguments its loader checks entries with (none: unchecked)."""
    given = checks or {}
    return {family: functools.partial(adapter.precomputed_voice, **dict(given.get(family, {})))
            for family, adapter in ADAPTERS.items()}


class VoiceRegistry:
    """Uploaded + precomputed voices of one deployment (planning.VoiceResolver, plus upload/delete)."""

    def __init__(
        self,
        settings: Settings,
        checkpoints: Sequence[ServedCheckpoint],
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.builtin = sorted({s for c in checkpoints for s in c.speakers})
        # The store's cached features: the first Base checkpoint of a family that caches them per voice.
        base = next((c for c in checkpoints if c.adapter.caches_voice_features and c.task == "Base"), None)
        self.base = base
        # The other families' checkpoints: an uploaded voice's features per (feature model, prompt
        # mode), computed once at upload through each one's feature model and kept (by voice version).
        self.upload_models: list[tuple[FamilyAdapter, str]] = [
            (c.adapter, c.voice_features_model) for c in checkpoints
            if not c.adapter.caches_voice_features and c.voice_features_model]
        self._patches: dict[tuple[str, str, str, bool], asyncio.Future[Any]] = {}
        self._backend: InferenceBackend | None = None
        self.features: FeatureCache | None = None
        if base is not None and base.voice_features_model:
            self.features = FeatureCache(self._compute, max_bytes=settings.speaker_cache_max_bytes)
        self.precomputed: dict[str, PrecomputedVoice] = load_precomputed_voices(
            settings.custom_voice_dir,
            precomputed_loaders({family: adapter.precomputed_checks(checkpoints) for family, adapter in ADAPTERS.items()}),
            reserved_names=self.builtin,
        )
        cloning = {c.family for c in checkpoints if c.task == "Base"}
        for family in sorted({v.model_type for v in self.precomputed.values()}):
            if family not in cloning:
                name = contract_families.display_name(family)
                logger.warning("%s precomputed voices are loaded but no %s Base checkpoint is served: "
                               "they cannot be spoken", name, name)
        try:  # OpenAI voice names are reserved like built-ins, so an upload never shadows an alias
            aliases = effective_voice_aliases(settings.voice_aliases, self.builtin,
                                              default_voice_aliases(dict.fromkeys(c.adapter for c in checkpoints)))
        except AliasError as exc:
            raise SettingsError(str(exc)) from None
        reserved = [*self.builtin, *aliases, *(v.name for v in self.precomputed.values())]
        try:
            self.store = VoiceStore.from_env(reserved, features=self.features, env=store_env(settings, env),
                                             sync_interval_s=settings.speaker_sync_interval_s)
        except (VoiceSettingsError, OSError) as exc:
            raise SettingsError(f"uploaded voices: {exc}") from None

    # --- lifecycle -------------------------------------------------------------------------------

    def bind(self, backend: InferenceBackend | None) -> None:
        """The inference backend feature computations go through (set by the app's lifespan)."""
        self._backend = backend

    async def _compute(self, audio: np.ndarray, sample_rate: int, with_codes: bool
                       ) -> tuple[np.ndarray, np.ndarray | None]:
        if self._backend is None or self.base is None or not self.base.voice_features_model:
            raise RuntimeError("voice features need a served Base checkpoint and a running backend")
        # The ensemble always computes both; the cache keeps the codes for in-context use later.
        features: tuple[np.ndarray, np.ndarray | None] = await self.base.adapter.clip_features(
            self._backend, self.base.voice_features_model, audio, int(sample_rate), True,
            f"voice-features-{uuid.uuid4().hex}")
        return features

    # --- planning.VoiceResolver ------------------------------------------------------------------

    def resolve_voice(self, name: str) -> StoredVoice | None:
        if not isinstance(name, str) or not name.strip():
            return None
        key = voice_key(name)
        pre = self.precomputed.get(key)
        if pre is not None:
            return ADAPTERS[pre.model_type].stored_voice(pre)
        record = self.store.get(name)
        if record is None:
            return None

        async def features(x_vector_only: bool) -> tuple[np.ndarray, np.ndarray | None]:
            return await self._uploaded_features(record.name, x_vector_only)

        async def patches(model: str, prompt: bool) -> np.ndarray:
            return await self._uploaded_patches(record.name, model, prompt)

        return StoredVoice(record.name, ref_text=record.ref_text, features=features, model_features=patches)

    def uploaded_voices(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.store.list()]

    def listing(self) -> dict[str, Any]:
        """Body of GET /v1/audio/voices."""
        return self.store.listing(self.builtin, [v.name for v in self.precomputed.values()])

    async def _uploaded_features(self, name: str, x_vector_only: bool) -> tuple[np.ndarray, np.ndarray | None]:
        record = self.store.get(name)
        if record is None:  # deleted between planning and now
            raise InvalidRequest(f"Invalid voice '{name}': it was deleted", "voice")
        if self.features is None:
            raise InvalidRequest(f"Voice '{name}' needs a Base checkpoint, and none is served", "voice")
        # ICL needs codes even for a voice uploaded without ref_text when the request brings one.
        feats = await self.features.get_or_compute(
            record.key, record.version, not x_vector_only, lambda: self.store.load_audio(record)
        )
        return feats.x_vector, feats.ref_codes

    async def _uploaded_patches(self, name: str, model: str, prompt: bool) -> Any:
        record = self.store.get(name)
        if record is None:
            raise InvalidRequest(f"Invalid voice '{name}': it was deleted", "voice")
        key = (model, record.key, record.version, prompt)
        task = self._patches.get(key)
        if task is None:
            if self._backend is None:
                raise RuntimeError("voice features need a running backend")
            adapter = next((a for a, m in self.upload_models if m == model), None)
            if adapter is None:
                raise InvalidRequest(f"Voice '{name}' has no features for {model}", "voice")
            audio, rate = self.store.load_audio(record)
            task = asyncio.ensure_future(adapter.clip_features(
                self._backend, model, audio, int(rate), prompt, f"voice-features-{uuid.uuid4().hex}"))
            self._patches[key] = task
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._patches.get(key) is task:
                del self._patches[key]  # failures are not cached
            raise

    def _forget_patches(self, key: str) -> None:
        for k in [k for k in self._patches if k[1] == key]:
            del self._patches[k]

    # --- upload / delete -------------------------------------------------------------------------

    async def upload(self, form: MultipartForm) -> dict[str, Any]:
        """POST /v1/audio/voices: validate, compute the features, store atomically -> response body."""
        unknown = sorted((set(form.fields) | set(form.files)) - set(FORM_FIELDS))
        if unknown:
            raise InvalidRequest(
                f"Unrecognized form field '{unknown[0]}'. Fields: {', '.join(FORM_FIELDS)}", unknown[0]
            )
        for key in FORM_FIELDS[1:]:
            if key in form.files:
                raise InvalidRequest(f"'{key}' must be a text field, not a file", key)
        if "audio_sample" in form.fields:
            raise InvalidRequest("audio_sample must be a file (curl -F audio_sample=@voice.wav)", "audio_sample")
        file = form.file("audio_sample")
        try:
            record: VoiceRecord = await self.store.upload(
                name=form.field("name"),
                audio=file.data if file is not None else None,
                consent=form.field("consent"),
                ref_text=form.field("ref_text"),
                speaker_description=form.field("speaker_description"),
                mime_type=file.content_type if file is not None else None,
                filename=file.filename if file is not None else None,
            )
        except BackendError as exc:
            if exc.code == INVALID_ARG:  # the voice_features model refused the clip
                raise InvalidRequest(exc.message, "audio_sample") from None
            if exc.code not in ("UNAVAILABLE", "CANCELLED"):
                logger.error("voice upload: computing the features failed in Triton: %s", exc)
            raise errors.from_backend(exc.code, exc.message, exc.param, None) from None
        self._forget_patches(record.key)  # a re-upload replaces the voice
        try:  # the other families' features of the voice: computed once, now (the mode its transcript selects)
            for _, model in self.upload_models:
                await self._uploaded_patches(record.name, model, bool((record.ref_text or "").strip()))
        except (BackendError, InvalidRequest) as exc:
            await self.store.delete(record.name)
            if isinstance(exc, InvalidRequest):
                raise
            if exc.code == INVALID_ARG:
                raise InvalidRequest(exc.message, "audio_sample") from None
            raise errors.from_backend(exc.code, exc.message, exc.param, None) from None
        return upload_response(record)

    async def delete(self, name: str) -> dict[str, Any]:
        """DELETE /v1/audio/voices/{name} -> response body; VoiceNotFound (404) when not uploaded."""
        key = voice_key(name) if isinstance(name, str) and name.strip() else ""
        if key and key in self.store.reserved_names:
            kind = "precomputed" if key in self.precomputed else "built-in"
            raise InvalidRequest(f"Voice '{name.strip()}' is a {kind} voice and cannot be deleted", "name")
        record = await self.store.delete(name)
        self._forget_patches(record.key)
        return delete_response(record.name)


__all__ = ["FORM_FIELDS", "VoiceNotFound", "VoiceRegistry", "precomputed_loaders", "store_env"]
