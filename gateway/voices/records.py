"""Uploaded voices on disk: one `<name lower>.safetensors` per voice holding the decoded reference (`audio`,
float32 mono at the source rate) with its metadata as string fields of the safetensors header; the record
of a voice as read from its file; atomic writes and durable removals; orphaned upload temp files.

Writes are atomic: temp file in the same directory, fsync, os.replace (or link(2) for a name that must not
exist yet), fsync of the directory, so readers see the old file or the new one, never a prefix. Temp files
carry host name and pid: a replica removes only its host's orphans (or any older than a minute).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import atomic_write_bytes, fsync_dir, validate_voice_name, voice_key

from .audio_io import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE

logger = logging.getLogger(__name__)

AUDIO_TENSOR = "audio"
TEMP_PREFIX = ".voice-upload-"
_ORPHAN_TEMP_AGE_S = 60.0  # a live upload holds its temp file for milliseconds
_TEMP_RE = re.compile(re.escape(TEMP_PREFIX) + r"(?:([A-Za-z0-9_-]+)\.)?(\d+)-.*\.tmp$")
HOST = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"
Signature = tuple[int, int, int]  # (inode, size, mtime ns) of a voice file


def file_signature(st: os.stat_result) -> Signature:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class VoiceStorageError(RuntimeError):
    """A registered voice's file vanished or broke after start-up (server-side: 500, not 400)."""


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


# --- reading ------------------------------------------------------------------------------------------------


def read_record(path: Path, st: os.stat_result | None = None) -> VoiceRecord:
    """The record of a voice file (ValueError, or the reader's error, when it is not a valid one)."""
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
        signature=file_signature(st),
    )


def read_audio(record: VoiceRecord) -> tuple[np.ndarray, int]:
    """The stored reference of a voice: (float32 mono, sample rate); VoiceStorageError when unreadable."""
    from safetensors import safe_open

    try:
        with safe_open(str(record.path), framework="numpy") as f:
            audio = f.get_tensor(AUDIO_TENSOR)
    except Exception as exc:  # file vanished or corrupted after start-up
        raise VoiceStorageError(f"stored audio of voice {record.name!r} is unreadable: {exc}") from exc
    return np.ascontiguousarray(audio, dtype=np.float32).reshape(-1), record.sample_rate


def voice_payload(record: VoiceRecord, wav: np.ndarray) -> bytes:
    """The file of a voice: its audio, with the record in the header."""
    from safetensors.numpy import save

    return save({AUDIO_TENSOR: np.ascontiguousarray(wav, dtype=np.float32)}, metadata=record.header())


# --- writing ------------------------------------------------------------------------------------------------


def write_voice_file(path: Path, data: bytes, exclusive: bool) -> Signature:
    """Write a voice file atomically (readers see the old file or the new one, never a prefix) and
    return its signature. `exclusive`: create it only if absent (link(2) fails when the name exists,
    also across hosts sharing the directory) -> FileExistsError."""
    prefix = f"{TEMP_PREFIX}{HOST}.{os.getpid()}-"
    if not exclusive:
        atomic_write_bytes(path, data, temp_prefix=prefix)
        return file_signature(path.stat())  # (another replica's rename in these microseconds is seen at its next lookup)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
        signature = file_signature(os.stat(tmp))
    finally:
        with suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return signature


def unlink_durable(path: Path) -> None:
    with suppress(FileNotFoundError):
        path.unlink()
    fsync_dir(path.parent)


def unlink_quietly(path: Path) -> None:
    try:
        unlink_durable(path)
    except OSError as exc:
        logger.warning("Could not remove previous voice file %s: %s", path, exc)


def remove_orphaned_temps(directory: Path) -> None:
    """Upload temp files a crash or kill left behind: this host's whose process is gone, and any older than
    a minute (another replica's upload in progress is left alone)."""
    now = time.time()
    for tmp in directory.glob(TEMP_PREFIX + "*.tmp"):
        m = _TEMP_RE.match(tmp.name)
        try:
            age = now - tmp.stat().st_mtime
        except OSError:
            continue
        host, pid = (m.group(1), int(m.group(2))) if m else (None, None)
        if host not in (None, HOST) and age <= _ORPHAN_TEMP_AGE_S:
            continue  # another replica's upload in progress (its pid means nothing here)
        if age > _ORPHAN_TEMP_AGE_S or pid is None or not _pid_alive(pid) or pid == os.getpid():
            try:
                tmp.unlink()
                logger.info("Removed orphaned upload temp file %s", tmp)
            except OSError as exc:
                logger.warning("Could not remove orphaned temp file %s: %s", tmp, exc)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["AUDIO_TENSOR", "HOST", "TEMP_PREFIX", "Signature", "VoiceRecord", "VoiceStorageError",
           "delete_response", "file_signature", "read_audio", "read_record", "remove_orphaned_temps",
           "unlink_durable", "unlink_quietly", "upload_response", "voice_payload", "write_voice_file"]
