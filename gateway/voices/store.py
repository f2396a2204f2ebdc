"""Uploaded voices: validation, one `.safetensors` per voice on disk, restore at start-up.

Spec: "Voices Endpoint", "Upload Voice", "Voice Storage & Caching". A voice is stored as
`<name lower>.safetensors` holding the decoded reference (`audio`, float32 mono at the source rate)
with its metadata (name, consent, created_at, sample_rate, mime_type, file_size, ref_text,
speaker_description, version) as string fields of the safetensors header.

Obligations:
- Writes are atomic: temp file in the same directory, fsync, os.replace, fsync of the directory.
  A crash or kill leaves the previous state (plus at worst an orphaned temp file, removed at the
  next start-up); a voice is either fully registered or absent.
- Uploads and deletes of one name are serialized (per-name lock), and the capacity/policy check and
  the commit happen under one lock, so concurrent uploads of a name end in one consistent voice and
  the SPEAKER_MAX_UPLOADED cap holds. The commit is shielded from request cancellation: once the
  file is renamed into place, the index and the feature cache follow.
- Invalid files found at start-up are skipped with a warning (never fatal, never deleted); files
  whose name collides with a built-in or precomputed voice are ignored with a warning.
- Several gateway replicas may share one directory (a ReadWriteMany volume). Each keeps its own
  index and feature cache and follows the directory: a lookup by name stats that voice's file
  (gone: deleted elsewhere; another inode, size or mtime: replaced elsewhere, re-read with its new
  version, so cached features of the old one are never used), a miss looks for the file, and
  listings rescan the directory when its mtime changed, at most every `sync_interval_s` (1 s).
  Readers only ever see complete files (the rename is atomic). Concurrent uploads of one name
  through two replicas: with `overwrite` the last rename wins (both answer 200, every replica
  then serves the last one); with `immutable` the file is created with link(2), which fails when
  it exists, so exactly one upload wins and the other gets the "already exists" 400. The
  SPEAKER_MAX_UPLOADED cap is checked against the directory as last seen (best effort across
  replicas). Temp files carry host name and pid: a replica removes only its host's orphans (or
  any older than a minute).
- Nothing here imports a web framework; errors are ttscore InvalidRequest subclasses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import re
import socket
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import (
    VOICE_FILE_SUFFIX,
    atomic_write_bytes,
    fsync_dir,
    validate_voice_name,
    voice_file_name,
    voice_key,
)

from .audio_io import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, decode_audio, resolve_mime_type
from .errors import UploadTooLarge, VoiceNotFound, VoiceSettingsError
from .features import FeatureCache, VoiceFeatures

logger = logging.getLogger(__name__)

POLICY_OVERWRITE = "overwrite"
POLICY_IMMUTABLE = "immutable"
POLICIES = (POLICY_OVERWRITE, POLICY_IMMUTABLE)

ENV_SAMPLES_DIR = "SPEAKER_SAMPLES_DIR"
ENV_MAX_UPLOADED = "SPEAKER_MAX_UPLOADED"
ENV_POLICY = "VLLM_OMNI_SPEAKER_REGISTRATION_POLICY"
ENV_MAX_DURATION = "SPEAKER_MAX_DURATION_S"  # project extension (not in the spec)
ENV_MIN_DURATION = "SPEAKER_MIN_DURATION_S"  # project extension (not in the spec)

DEFAULT_SAMPLES_DIR = "~/.cache/vllm-omni/speakers"
DEFAULT_MAX_UPLOADED = 1000
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024  # the spec's 10 MB upload limit
DEFAULT_MAX_DURATION_S = 30.0
DEFAULT_MIN_DURATION_S = 1.0
MAX_CONSENT_CHARS = 256
MAX_REF_TEXT_CHARS = 4096
MAX_DESCRIPTION_CHARS = 1024

AUDIO_TENSOR = "audio"
TEMP_PREFIX = ".voice-upload-"
_ORPHAN_TEMP_AGE_S = 60.0  # a live upload holds its temp file for milliseconds
# ".voice-upload-<host>.<pid>-<random>.tmp" (older releases: no "<host>.")
_TEMP_RE = re.compile(re.escape(TEMP_PREFIX) + r"(?:([A-Za-z0-9_-]+)\.)?(\d+)-.*\.tmp$")
_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"
DEFAULT_SYNC_INTERVAL_S = 1.0
# A directory changed this recently is rescanned again at the next sync: two changes within one
# mtime tick (coarse on some network filesystems) would otherwise look like one.
_SETTLE_S = 2.0
Signature = tuple[int, int, int]  # (inode, size, mtime ns) of a voice file


def _signature(st: os.stat_result) -> Signature:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class VoiceRecord:
    """One uploaded voice as indexed in memory (the audio itself stays on disk)."""

    name: str
    consent: str
    created_at: int
    mime_type: str
    file_size: int
    sample_rate: int
    num_samples: int
    version: str  # new for every upload: the feature cache key
    path: Path
    ref_text: str | None = None
    speaker_description: str | None = None
    signature: Signature = field(default=(0, 0, 0), compare=False)  # of the file when indexed

    @property
    def key(self) -> str:
        return voice_key(self.name)

    @property
    def duration_s(self) -> float:
        return self.num_samples / self.sample_rate

    def to_json(self) -> dict[str, Any]:
        """The spec's voice object (upload response and `uploaded_voices` entries)."""
        out: dict[str, Any] = {
            "name": self.name,
            "consent": self.consent,
            "created_at": self.created_at,
            "file_size": self.file_size,
            "mime_type": self.mime_type,
        }
        if self.ref_text:
            out["ref_text"] = self.ref_text
        if self.speaker_description:
            out["speaker_description"] = self.speaker_description
        return out

    def header(self) -> dict[str, str]:
        meta = {
            "name": self.name,
            "voice_name_lower": self.key,
            "consent": self.consent,
            "created_at": str(self.created_at),
            "mime_type": self.mime_type,
            "file_size": str(self.file_size),
            "sample_rate": str(self.sample_rate),
            "version": self.version,
        }
        if self.ref_text:
            meta["ref_text"] = self.ref_text
        if self.speaker_description:
            meta["speaker_description"] = self.speaker_description
        return meta


def upload_response(record: VoiceRecord) -> dict[str, Any]:
    """Body of a successful POST /v1/audio/voices."""
    return {"success": True, "voice": record.to_json()}


def delete_response(name: str) -> dict[str, Any]:
    """Body of a successful DELETE /v1/audio/voices/{name}."""
    return {"success": True, "message": f"Voice '{name}' deleted successfully"}


@dataclass(frozen=True)
class VoiceStoreSettings:
    directory: Path
    max_uploaded: int = DEFAULT_MAX_UPLOADED
    policy: str = POLICY_OVERWRITE
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_duration_s: float = DEFAULT_MAX_DURATION_S
    min_duration_s: float = DEFAULT_MIN_DURATION_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> VoiceStoreSettings:
        """The spec's environment variables; a bad policy or duration fails start-up."""
        env = os.environ if env is None else env
        directory = Path(env.get(ENV_SAMPLES_DIR) or DEFAULT_SAMPLES_DIR).expanduser()
        raw_cap = (env.get(ENV_MAX_UPLOADED) or "").strip()
        max_uploaded = DEFAULT_MAX_UPLOADED
        if raw_cap:
            try:
                max_uploaded = int(raw_cap)
            except ValueError:
                logger.warning("Invalid %s=%r; using default %d", ENV_MAX_UPLOADED, raw_cap, DEFAULT_MAX_UPLOADED)
        return cls(
            directory=directory,
            max_uploaded=max_uploaded,
            policy=parse_policy(env.get(ENV_POLICY)),
            max_duration_s=_env_seconds(env, ENV_MAX_DURATION, DEFAULT_MAX_DURATION_S),
            min_duration_s=_env_seconds(env, ENV_MIN_DURATION, DEFAULT_MIN_DURATION_S, allow_zero=True),
        )


def parse_policy(raw: str | None) -> str:
    value = (raw or "").strip().lower()
    if not value:
        return POLICY_OVERWRITE
    if value not in POLICIES:
        raise VoiceSettingsError(f"{ENV_POLICY}={raw!r} is invalid: use 'overwrite' (default) or 'immutable'")
    return value


def _env_seconds(env: Mapping[str, str], name: str, default: float, allow_zero: bool = False) -> float:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise VoiceSettingsError(f"{name}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise VoiceSettingsError(f"{name}={raw!r} must be a {'non-negative' if allow_zero else 'positive'} number")
    return value


class VoiceStorageError(RuntimeError):
    """A registered voice's file vanished or broke after start-up (server-side: 500, not 400)."""


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
        self._reserved: frozenset[str] = frozenset(voice_key(n) for n in builtin_names)
        self._index: dict[str, VoiceRecord] = {}
        self._name_locks: dict[str, _KeyedLock] = {}
        self._commit_lock: asyncio.Lock | None = None
        self._last_created_at = 0
        self.sync_interval_s = float(sync_interval_s)
        self._next_sync = 0.0
        self._dir_signature: tuple[int, int] | None = None
        self._bad: dict[Path, Signature] = {}  # invalid files already warned about
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
        self.sync()
        return sorted(self._index.values(), key=lambda r: (r.created_at, r.key))

    def get(self, name: str | None) -> VoiceRecord | None:
        """The voice as its file is now (another replica may have replaced or deleted it)."""
        if not isinstance(name, str) or not name.strip():
            return None
        self.sync()
        key = voice_key(name)
        record = self._index.get(key)
        path = record.path if record is not None else self.directory / voice_file_name(name)
        try:
            st = path.stat()
        except FileNotFoundError:
            if record is not None:
                logger.info("Voice %r was deleted (by another replica)", record.name)
                self._forget(key)
            return None
        except OSError:
            return record
        if record is not None and record.signature == _signature(st):
            return record
        fresh = self._load_record(path, st)
        if fresh is None or fresh.key != key or fresh.key in self._reserved:
            return record if fresh is None else None
        self._index[key] = fresh
        if record is not None and record.version != fresh.version and self.features is not None:
            self.features.invalidate(key)
        if record is None:
            logger.info("Voice %r found (uploaded through another replica)", fresh.name)
        return fresh

    def require(self, name: str | None, param: str | None = "voice") -> VoiceRecord:
        record = self.get(name)
        if record is None:
            raise VoiceNotFound((name or "").strip(), param)
        return record

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        self.sync()
        return len(self._index)

    # --- following a shared directory ----------------------------------------------------------------

    def sync(self, force: bool = False) -> bool:
        """Rescan the directory if it changed (at most every sync_interval_s unless `force`); True
        when it was rescanned."""
        now = time.monotonic()
        if not force and now < self._next_sync:
            return False
        self._next_sync = now + self.sync_interval_s
        try:
            st = os.stat(self.directory)
        except OSError as exc:
            logger.warning("Cannot read the voices directory %s: %s", self.directory, exc)
            return False
        signature = (st.st_ino, st.st_mtime_ns)
        if signature == self._dir_signature:
            return False
        self._dir_signature = signature if time.time() - st.st_mtime > _SETTLE_S else None
        before = self._index
        self._index = self._scan(before)
        if self.features is not None:
            for key, old in before.items():
                new = self._index.get(key)
                if new is None or new.version != old.version:
                    self.features.invalidate(key)
        return True

    def _forget(self, key: str) -> None:
        self._index.pop(key, None)
        if self.features is not None:
            self.features.invalidate(key)

    def _load_record(self, path: Path, st: os.stat_result | None = None) -> VoiceRecord | None:
        """The record of one file (None: invalid, warned about once per version of the file)."""
        try:
            st = st or path.stat()
            return self._read_record(path, st)
        except Exception as exc:  # any problem with one file only skips that file
            sig = _signature(st) if st is not None else (0, 0, 0)
            if self._bad.get(path) != sig:
                self._bad[path] = sig
                logger.warning("Skipping invalid voice file %s: %s", path, exc)
            return None

    def _scan(self, known: Mapping[str, VoiceRecord]) -> dict[str, VoiceRecord]:
        """Every valid voice file of the directory; files whose signature matches a known record
        are not read again."""
        by_path = {r.path: r for r in known.values()}
        found: dict[str, VoiceRecord] = {}
        for path in sorted(self.directory.glob("*" + VOICE_FILE_SUFFIX)):
            try:
                st = path.stat()
            except OSError:
                continue  # deleted meanwhile
            if not path.is_file():
                continue
            prev = by_path.get(path)
            record = prev if prev is not None and prev.signature == _signature(st) else self._load_record(path, st)
            if record is None:
                continue
            if record.key in self._reserved:
                if prev is None:
                    logger.warning("Ignoring voice file %s: %r collides with a built-in or precomputed voice", path,
                                   record.name)
                continue
            other = found.get(record.key)
            if other is not None:
                keep, drop = (record, other) if record.created_at > other.created_at else (other, record)
                logger.warning("Two voice files for %r: using %s, ignoring %s", record.name, keep.path, drop.path)
                record = keep
            found[record.key] = record
        return found

    @property
    def reserved_names(self) -> frozenset[str]:
        return self._reserved

    def set_reserved_names(self, names: Iterable[str]) -> None:
        """Built-in and precomputed names (case-insensitive); uploads of these are refused.

        Call before restore() (or construct with restore=False) so that colliding files on disk are
        ignored at start-up; uploaded voices already indexed under a newly reserved name are dropped
        from the index (their files stay on disk) with a warning.
        """
        self._reserved = frozenset(voice_key(n) for n in names)
        for key in [k for k in self._index if k in self._reserved]:
            record = self._index.pop(key)
            logger.warning("Uploaded voice %r collides with a built-in or precomputed voice; ignored", record.name)

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
        from safetensors import safe_open

        record = voice if isinstance(voice, VoiceRecord) else self.require(voice)
        try:
            with safe_open(str(record.path), framework="numpy") as f:
                audio = f.get_tensor(AUDIO_TENSOR)
        except Exception as exc:  # file vanished or corrupted after start-up
            raise VoiceStorageError(f"stored audio of voice {record.name!r} is unreadable: {exc}") from exc
        return np.ascontiguousarray(audio, dtype=np.float32).reshape(-1), record.sample_rate

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
        self._remove_orphaned_temps()
        found = self._scan({})
        self._index = found
        self._last_created_at = max([self._last_created_at, *(r.created_at for r in found.values())])
        if len(found) > self.max_uploaded >= 0:
            logger.warning("%d uploaded voices on disk exceed %s=%d", len(found), ENV_MAX_UPLOADED, self.max_uploaded)
        logger.info("Restored %d uploaded voice(s) from %s", len(found), self.directory)
        st = os.stat(self.directory)
        self._dir_signature = (st.st_ino, st.st_mtime_ns) if time.time() - st.st_mtime > _SETTLE_S else None
        self._next_sync = time.monotonic() + self.sync_interval_s
        return len(found)

    def _read_record(self, path: Path, st: os.stat_result | None = None) -> VoiceRecord:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            meta = dict(f.metadata() or {})
            if AUDIO_TENSOR not in f.keys():  # noqa: SIM118  (safe_open has no __contains__)
                raise ValueError(f"no {AUDIO_TENSOR!r} tensor")
            sl = f.get_slice(AUDIO_TENSOR)
            shape = list(sl.get_shape())
            dtype = sl.get_dtype()
        if len(shape) != 1 or shape[0] <= 0:
            raise ValueError(f"audio tensor has shape {shape}, expected [samples > 0]")
        if dtype != "F32":
            raise ValueError(f"audio tensor has dtype {dtype}, expected F32")
        try:
            name = validate_voice_name(meta.get("name") or meta.get("voice_name_lower"))
        except InvalidRequest as exc:
            raise ValueError(exc.message) from None
        sample_rate = int(meta.get("sample_rate", ""))
        if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
            raise ValueError(f"sample_rate {sample_rate} out of range")
        st = st or path.stat()
        created_at = int(meta["created_at"]) if meta.get("created_at") else int(st.st_mtime)
        file_size = int(meta["file_size"]) if meta.get("file_size") else int(st.st_size)
        return VoiceRecord(
            name=name,
            consent=str(meta.get("consent", "")),
            created_at=created_at,
            mime_type=str(meta.get("mime_type") or "audio/wav"),
            file_size=file_size,
            sample_rate=sample_rate,
            num_samples=int(shape[0]),
            version=meta.get("version") or f"{created_at}-{st.st_mtime_ns}-{st.st_ino}",
            path=path,
            ref_text=meta.get("ref_text") or None,
            speaker_description=meta.get("speaker_description") or None,
            signature=_signature(st),
        )

    def _remove_orphaned_temps(self) -> None:
        now = time.time()
        for tmp in self.directory.glob(TEMP_PREFIX + "*.tmp"):
            m = _TEMP_RE.match(tmp.name)
            try:
                age = now - tmp.stat().st_mtime
            except OSError:
                continue
            host, pid = (m.group(1), int(m.group(2))) if m else (None, None)
            if host not in (None, _HOST) and age <= _ORPHAN_TEMP_AGE_S:
                continue  # another replica's upload in progress (its pid means nothing here)
            if age > _ORPHAN_TEMP_AGE_S or pid is None or not _pid_alive(pid) or pid == os.getpid():
                try:
                    tmp.unlink()
                    logger.info("Removed orphaned upload temp file %s", tmp)
                except OSError as exc:
                    logger.warning("Could not remove orphaned temp file %s: %s", tmp, exc)

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
        consent = _required_text(consent, "consent", MAX_CONSENT_CHARS)
        ref_text = _optional_text(ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        speaker_description = _optional_text(speaker_description, "speaker_description", MAX_DESCRIPTION_CHARS)
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
        from safetensors.numpy import save

        async with self._commit():
            self._check_admission(draft.name)
            created_at = max(int(time.time()), self._last_created_at + 1)
            record = dataclasses.replace(draft, created_at=created_at, version=uuid.uuid4().hex)
            payload = save({AUDIO_TENSOR: np.ascontiguousarray(wav, dtype=np.float32)}, metadata=record.header())
            exclusive = self.policy == POLICY_IMMUTABLE
            try:
                signature = await asyncio.to_thread(_write_voice_file, record.path, payload, exclusive)
            except FileExistsError:  # immutable: another replica registered the name meanwhile
                self.get(record.name)
                raise self._exists(record.name) from None
            record = dataclasses.replace(record, signature=signature)
            self._last_created_at = created_at
            previous = self._index.get(record.key)
            self._index[record.key] = record
            if previous is not None:
                logger.warning("Voice %r re-uploaded; previous entry overwritten", record.name)
                if previous.path != record.path:  # a restored file under another file name
                    await asyncio.to_thread(_unlink_quietly, previous.path)
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
            record = self._index.get(key)
            if record is None:
                raise VoiceNotFound(name, "name")
            await asyncio.to_thread(_unlink_durable, record.path)
            del self._index[key]
            if self.features is not None:
                self.features.invalidate(key)
        logger.info("Deleted voice %r", record.name)
        return record

    # --- helpers ----------------------------------------------------------------------------------

    def _check_admission(self, name: str) -> None:
        key = voice_key(name)
        if key in self._reserved:
            raise InvalidRequest(
                f"Voice name '{name}' is already used by a built-in or precomputed voice; choose another name", "name"
            )
        if key in self._index:
            if self.policy == POLICY_IMMUTABLE:
                raise self._exists(name)
            return  # overwrite: replacing a voice does not grow the registry
        if len(self._index) >= self.max_uploaded:
            raise InvalidRequest(
                f"Uploaded voice limit reached ({self.max_uploaded}). Delete an existing voice before "
                f"registering a new one, or raise the cap via {ENV_MAX_UPLOADED}.",
                "name",
            )

    @staticmethod
    def _exists(name: str) -> InvalidRequest:
        return InvalidRequest(
            f"Voice '{name}' already exists; delete it (DELETE /v1/audio/voices/{name}) before registering it again",
            "name",
        )

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


def _required_text(value: str | None, param: str, max_chars: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{param} is required", param)
    return _bounded(value.strip(), param, max_chars)


def _optional_text(value: str | None, param: str, max_chars: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{param} must be a string", param)
    return _bounded(value.strip(), param, max_chars) or None


def _bounded(value: str, param: str, max_chars: int) -> str:
    if len(value) > max_chars:
        raise InvalidRequest(f"{param} is too long ({len(value)} characters, at most {max_chars})", param)
    if "\x00" in value:
        raise InvalidRequest(f"{param} must not contain NUL characters", param)
    return value


def _write_voice_file(path: Path, data: bytes, exclusive: bool) -> Signature:
    """Write a voice file atomically (readers see the old file or the new one, never a prefix) and
    return its signature. `exclusive`: create it only if absent (link(2) fails when the name exists,
    also across hosts sharing the directory) -> FileExistsError."""
    prefix = f"{TEMP_PREFIX}{_HOST}.{os.getpid()}-"
    if not exclusive:
        atomic_write_bytes(path, data, temp_prefix=prefix)
        return _signature(path.stat())  # (another replica's rename in these microseconds is seen at its next lookup)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
        signature = _signature(os.stat(tmp))
    finally:
        with suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return signature


def _unlink_durable(path: Path) -> None:
    with suppress(FileNotFoundError):
        path.unlink()
    fsync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        _unlink_durable(path)
    except OSError as exc:
        logger.warning("Could not remove previous voice file %s: %s", path, exc)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
