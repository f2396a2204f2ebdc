"""Uploaded voices: validation, registration and removal, restore at start-up.

Spec: "Voices Endpoint", "Upload Voice", "Voice Storage & Caching". The files are gateway.voices.records',
the index that follows the directory across replicas gateway.voices.index', what may be registered
gateway.voices.admission'.

Obligations:
- A crash or kill leaves the previous state (plus at worst an orphaned temp file, removed at the next
  start-up); a voice is either fully registered or absent.
- Uploads and deletes of one name are serialized (per-name lock), and the capacity/policy check and
  the commit happen under one lock, so concurrent uploads of a name end in one consistent voice and
  the SPEAKER_MAX_UPLOADED cap holds. The commit is shielded from request cancellation: once the
  file is renamed into place, the index and the feature cache follow.
- Concurrent uploads of one name through two replicas sharing the directory: with `overwrite` the last
  rename wins (both answer 200, every replica then serves the last one); with `immutable` the file is
  created with link(2), which fails when it exists, so exactly one upload wins and the other gets the
  "already exists" 400. The SPEAKER_MAX_UPLOADED cap is checked against the directory as last seen
  (best effort across replicas).
- Nothing here imports a web framework; errors are ttscore InvalidRequest subclasses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import validate_voice_name, voice_file_name, voice_key

from .admission import (
    DEFAULT_MAX_DURATION_S,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_UPLOADED,
    DEFAULT_MIN_DURATION_S,
    ENV_MAX_UPLOADED,
    MAX_CONSENT_CHARS,
    MAX_DESCRIPTION_CHARS,
    MAX_REF_TEXT_CHARS,
    POLICY_IMMUTABLE,
    POLICY_OVERWRITE,
    VoiceStoreSettings,
    already_exists,
    check_admission,
    optional_text,
    parse_policy,
    required_text,
)
from .audio_io import decode_audio, resolve_mime_type
from .errors import UploadTooLarge, VoiceNotFound, VoiceSettingsError
from .features import FeatureCache, VoiceFeatures
from .index import DEFAULT_SYNC_INTERVAL_S, VoiceIndex
from .records import (
    VoiceRecord,
    read_audio,
    remove_orphaned_temps,
    unlink_durable,
    unlink_quietly,
    voice_payload,
    write_voice_file,
)

logger = logging.getLogger(__name__)


@dataclass
class _KeyedLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class VoiceStore:
    def __init__(
        self,
        directory: str | Path,
        max_uploaded: int = DEFAULT_MAX_UPLOADED,
        policy: str = POLICY_OVERWRITE,
        builtin_names: Iterable[str] = (),
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_duration_s: float = DEFAULT_MAX_DURATION_S,
        min_duration_s: float = DEFAULT_MIN_DURATION_S,
        features: FeatureCache | None = None,
        restore: bool = True,
        sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S,
    ) -> None:
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)  # filesystem errors propagate: fail start-up
        self.max_uploaded = int(max_uploaded)
        self.policy = parse_policy(policy)
        self.max_file_bytes = int(max_file_bytes)
        if not (max_duration_s > 0 and 0 <= min_duration_s <= max_duration_s):
            raise VoiceSettingsError(f"need 0 <= min_duration_s ({min_duration_s}) <= max_duration_s ({max_duration_s})")
        self.max_duration_s = float(max_duration_s)
        self.min_duration_s = float(min_duration_s)
        self.features = features
        self.index = VoiceIndex(self.directory, features, builtin_names, sync_interval_s)
        self._name_locks: dict[str, _KeyedLock] = {}
        self._commit_lock: asyncio.Lock | None = None
        self._last_created_at = 0
        if restore:
            self.restore()

    @classmethod
    def from_env(
        cls,
        builtin_names: Iterable[str] = (),
        *,
        features: FeatureCache | None = None,
        env: Mapping[str, str] | None = None,
        sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S,
    ) -> VoiceStore:
        s = VoiceStoreSettings.from_env(env)
        return cls(
            s.directory, s.max_uploaded, s.policy, builtin_names,
            max_file_bytes=s.max_file_bytes, max_duration_s=s.max_duration_s, min_duration_s=s.min_duration_s,
            features=features, sync_interval_s=sync_interval_s,
        )

    # --- reading ----------------------------------------------------------------------------------

    def list(self) -> list[VoiceRecord]:
        """Uploaded voices, oldest first."""
        return self.index.list()

    def get(self, name: str | None) -> VoiceRecord | None:
        """The voice as its file is now (another replica may have replaced or deleted it)."""
        return self.index.get(name)

    def require(self, name: str | None, param: str | None = "voice") -> VoiceRecord:
        record = self.get(name)
        if record is None:
            raise VoiceNotFound((name or "").strip(), param)
        return record

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self.index)

    def sync(self, force: bool = False) -> bool:
        """Rescan the directory if it changed (VoiceIndex.sync)."""
        return self.index.sync(force)

    @property
    def reserved_names(self) -> frozenset[str]:
        return self.index.reserved

    def set_reserved_names(self, names: Iterable[str]) -> None:
        """Built-in and precomputed names (case-insensitive); uploads of these are refused.

        Call before restore() (or construct with restore=False) so that colliding files on disk are
        ignored at start-up; uploaded voices already indexed under a newly reserved name are dropped
        from the index (their files stay on disk) with a warning.
        """
        self.index.set_reserved(names)

    def listing(self, builtin_voices: Iterable[str] = (), precomputed_voices: Iterable[str] = ()) -> dict[str, Any]:
        """Body of GET /v1/audio/voices: every usable name, and the uploaded voices' details."""
        names: list[str] = []
        seen: set[str] = set()
        uploaded = self.list()
        for name in [*sorted(builtin_voices), *sorted(precomputed_voices), *(r.name for r in uploaded)]:
            if voice_key(name) not in seen:
                seen.add(voice_key(name))
                names.append(name)
        return {"voices": names, "uploaded_voices": [r.to_json() for r in uploaded]}

    def load_audio(self, voice: str | VoiceRecord) -> tuple[np.ndarray, int]:
        """The stored reference of a voice: (float32 mono, sample rate)."""
        return read_audio(voice if isinstance(voice, VoiceRecord) else self.require(voice))

    async def voice_features(self, name: str, *, x_vector_only: bool = False) -> VoiceFeatures:
        """Features of an uploaded voice, from the cache or computed once from its stored audio.

        Reference codes are included when the voice was uploaded with ref_text (in-context cloning)
        unless the request asks for x-vector-only cloning.
        """
        if self.features is None:
            raise RuntimeError("VoiceStore has no FeatureCache")
        record = self.require(name)
        need_codes = record.ref_text is not None and not x_vector_only
        return await self.features.get_or_compute(record.key, record.version, need_codes, lambda: self.load_audio(record))

    # --- restore ----------------------------------------------------------------------------------

    def restore(self) -> int:
        """Scan the directory: index every valid voice file, skip the rest with a warning."""
        remove_orphaned_temps(self.directory)
        found = self.index.restore()
        self._last_created_at = max([self._last_created_at, *(r.created_at for r in found.values())])
        if len(found) > self.max_uploaded >= 0:
            logger.warning("%d uploaded voices on disk exceed %s=%d", len(found), ENV_MAX_UPLOADED, self.max_uploaded)
        logger.info("Restored %d uploaded voice(s) from %s", len(found), self.directory)
        return len(found)

    # --- writing ----------------------------------------------------------------------------------

    async def upload(
        self,
        *,
        name: str | None,
        audio: bytes | None,
        consent: str | None,
        ref_text: str | None = None,
        speaker_description: str | None = None,
        mime_type: str | None = None,
        filename: str | None = None,
    ) -> VoiceRecord:
        """Validate, decode, compute features (when a FeatureCache is set) and register atomically.

        Everything that can fail for a client reason fails before the commit, so a rejected upload
        stores nothing and leaves the previous voice of that name untouched.
        """
        name = validate_voice_name(name, "name")
        consent = required_text(consent, "consent", MAX_CONSENT_CHARS)
        ref_text = optional_text(ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        speaker_description = optional_text(speaker_description, "speaker_description", MAX_DESCRIPTION_CHARS)
        key = voice_key(name)
        self.sync(force=True)
        self.get(name)  # the voice as the directory has it now (another replica's upload)
        self._check_admission(name)
        if audio is None:
            raise InvalidRequest("audio_sample is required", "audio_sample")
        if len(audio) > self.max_file_bytes:
            raise UploadTooLarge(self.max_file_bytes)
        if len(audio) == 0:
            raise InvalidRequest("audio_sample is empty", "audio_sample")
        data = bytes(audio)
        mime = resolve_mime_type(mime_type, filename, data=data)

        async with self._name_lock(key):
            self._check_admission(name)  # the previous holder of the lock may have registered it
            wav, sr = await asyncio.to_thread(
                decode_audio, data, max_seconds=self.max_duration_s, min_seconds=self.min_duration_s,
                param="audio_sample",
            )
            feats = None
            if self.features is not None:
                feats = await self.features.compute(wav, sr, ref_text is not None)
            draft = VoiceRecord(
                name=name, consent=consent, created_at=0, mime_type=mime, file_size=len(data), sample_rate=sr,
                num_samples=int(wav.shape[0]), version="", path=self.directory / voice_file_name(name),
                ref_text=ref_text, speaker_description=speaker_description,
            )
            # Shielded: a client that disconnects mid-commit must not leave the file renamed into
            # place with the index and feature cache still describing the previous voice.
            return await asyncio.shield(self._commit_upload(draft, wav, feats))

    async def _commit_upload(self, draft: VoiceRecord, wav: np.ndarray, feats: VoiceFeatures | None) -> VoiceRecord:
        async with self._commit():
            self._check_admission(draft.name)
            created_at = max(int(time.time()), self._last_created_at + 1)
            record = dataclasses.replace(draft, created_at=created_at, version=uuid.uuid4().hex)
            payload = voice_payload(record, wav)
            exclusive = self.policy == POLICY_IMMUTABLE
            try:
                signature = await asyncio.to_thread(write_voice_file, record.path, payload, exclusive)
            except FileExistsError:  # immutable: another replica registered the name meanwhile
                self.get(record.name)
                raise already_exists(record.name) from None
            record = dataclasses.replace(record, signature=signature)
            self._last_created_at = created_at
            previous = self.index.records.get(record.key)
            self.index.records[record.key] = record
            if previous is not None:
                logger.warning("Voice %r re-uploaded; previous entry overwritten", record.name)
                if previous.path != record.path:  # a restored file under another file name
                    await asyncio.to_thread(unlink_quietly, previous.path)
            if self.features is not None:
                self.features.invalidate(record.key)
                if feats is not None:
                    self.features.put(record.key, record.version, feats)
        logger.info("Uploaded voice %r (consent %r, %.1fs at %d Hz)", record.name, record.consent,
                    record.duration_s, record.sample_rate)
        return record

    async def delete(self, name: str | None) -> VoiceRecord:
        """Remove an uploaded voice (file and cached features); VoiceNotFound (404) if there is none."""
        if not isinstance(name, str) or not name.strip() or self.get(name) is None:
            raise VoiceNotFound((name or "").strip() if isinstance(name, str) else "", "name")
        key = voice_key(name)
        async with self._name_lock(key):
            return await asyncio.shield(self._commit_delete(name.strip(), key))

    async def _commit_delete(self, name: str, key: str) -> VoiceRecord:
        async with self._commit():
            record = self.index.records.get(key)
            if record is None:
                raise VoiceNotFound(name, "name")
            await asyncio.to_thread(unlink_durable, record.path)
            del self.index.records[key]
            if self.features is not None:
                self.features.invalidate(key)
        logger.info("Deleted voice %r", record.name)
        return record

    # --- helpers ----------------------------------------------------------------------------------

    def _check_admission(self, name: str) -> None:
        check_admission(name, reserved=self.index.reserved, registered=self.index.records,
                        count=len(self.index.records), policy=self.policy, max_uploaded=self.max_uploaded)

    @asynccontextmanager
    async def _name_lock(self, key: str) -> AsyncIterator[None]:
        entry = self._name_locks.get(key)
        if entry is None:
            entry = self._name_locks[key] = _KeyedLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0 and self._name_locks.get(key) is entry:
                del self._name_locks[key]

    @asynccontextmanager
    async def _commit(self) -> AsyncIterator[None]:
        if self._commit_lock is None:
            self._commit_lock = asyncio.Lock()
        async with self._commit_lock:
            yield


__all__ = ["VoiceStore"]
