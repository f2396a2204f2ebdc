"""The in-memory index of a voices directory, following it across gateway replicas.

Several replicas may share one directory (a ReadWriteMany volume). Each keeps its own index and feature
cache and follows the directory: a lookup by name stats that voice's file (gone: deleted elsewhere;
another inode, size or mtime: replaced elsewhere, re-read with its new version, so cached features of the
old one are never used), a miss looks for the file, and listings rescan the directory when its mtime
changed, at most every `sync_interval_s`. Readers only ever see complete files (the rename is atomic).
Invalid files are skipped with a warning (once per version of the file; never fatal, never deleted);
files whose name collides with a built-in or precomputed voice are ignored with a warning.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from ttscore.contract.voicefile import VOICE_FILE_SUFFIX, voice_file_name, voice_key

from .features import FeatureCache
from .records import Signature, VoiceRecord, file_signature, read_record

logger = logging.getLogger(__name__)

DEFAULT_SYNC_INTERVAL_S = 1.0
# A directory changed this recently is rescanned again at the next sync: two changes within one
# mtime tick (coarse on some network filesystems) would otherwise look like one.
_SETTLE_S = 2.0


class VoiceIndex:
    """The valid voices of `directory` by key (`records`), with `features` (the cached features of each
    voice) invalidated when a voice changes or goes."""

    def __init__(self, directory: Path, features: FeatureCache | None, reserved: Iterable[str] = (),
                 sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S) -> None:
        self.directory = directory
        self.features = features
        self.reserved: frozenset[str] = frozenset(voice_key(n) for n in reserved)
        self.records: dict[str, VoiceRecord] = {}
        self.sync_interval_s = float(sync_interval_s)
        self._next_sync = 0.0
        self._dir_signature: tuple[int, int] | None = None
        self._bad: dict[Path, Signature] = {}  # invalid files already warned about

    def list(self) -> list[VoiceRecord]:
        """The voices, oldest first."""
        self.sync()
        return sorted(self.records.values(), key=lambda r: (r.created_at, r.key))

    def __len__(self) -> int:
        self.sync()
        return len(self.records)

    def get(self, name: str | None) -> VoiceRecord | None:
        """The voice as its file is now (another replica may have replaced or deleted it)."""
        if not isinstance(name, str) or not name.strip():
            return None
        self.sync()
        key = voice_key(name)
        record = self.records.get(key)
        path = record.path if record is not None else self.directory / voice_file_name(name)
        try:
            st = path.stat()
        except FileNotFoundError:
            if record is not None:
                logger.info("Voice %r was deleted (by another replica)", record.name)
                self.forget(key)
            return None
        except OSError:
            return record
        if record is not None and record.signature == file_signature(st):
            return record
        fresh = self._load_record(path, st)
        if fresh is None or fresh.key != key or fresh.key in self.reserved:
            return record if fresh is None else None
        self.records[key] = fresh
        if record is not None and record.version != fresh.version and self.features is not None:
            self.features.invalidate(key)
        if record is None:
            logger.info("Voice %r found (uploaded through another replica)", fresh.name)
        return fresh

    def forget(self, key: str) -> None:
        self.records.pop(key, None)
        if self.features is not None:
            self.features.invalidate(key)

    def set_reserved(self, names: Iterable[str]) -> None:
        """Reserve built-in and precomputed names; voices indexed under one of them are dropped (their files
        stay on disk) with a warning."""
        self.reserved = frozenset(voice_key(n) for n in names)
        for key in [k for k in self.records if k in self.reserved]:
            record = self.records.pop(key)
            logger.warning("Uploaded voice %r collides with a built-in or precomputed voice; ignored", record.name)

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
        before = self.records
        self.records = self._scan(before)
        if self.features is not None:
            for key, old in before.items():
                new = self.records.get(key)
                if new is None or new.version != old.version:
                    self.features.invalidate(key)
        return True

    def restore(self) -> dict[str, VoiceRecord]:
        """Index every valid voice file of the directory anew (the start-up scan)."""
        self.records = self._scan({})
        st = os.stat(self.directory)
        self._dir_signature = (st.st_ino, st.st_mtime_ns) if time.time() - st.st_mtime > _SETTLE_S else None
        self._next_sync = time.monotonic() + self.sync_interval_s
        return self.records

    def _load_record(self, path: Path, st: os.stat_result | None = None) -> VoiceRecord | None:
        """The record of one file (None: invalid, warned about once per version of the file)."""
        try:
            st = st or path.stat()
            return read_record(path, st)
        except Exception as exc:  # any problem with one file only skips that file
            sig = file_signature(st) if st is not None else (0, 0, 0)
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
            record = prev if prev is not None and prev.signature == file_signature(st) else self._load_record(path, st)
            if record is None:
                continue
            if record.key in self.reserved:
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


__all__ = ["DEFAULT_SYNC_INTERVAL_S", "VoiceIndex"]
