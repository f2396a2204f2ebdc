"""Bounded LRU cache of voice features (x-vector, reference codes), keyed by (voice, version).

Speaking with voice="name" must not re-run reference processing, so the gateway computes a voice's
features when it is uploaded (through the Triton voice-features ensemble) and keeps them here. The
key carries the voice's version (a new one per upload), so an overwritten voice can never be
served from its predecessor's entry; `invalidate(name)` drops every version of a name on delete
or overwrite. Entries are dropped least-recently-used first when the byte or entry budget is full.

`compute(audio, sample_rate, with_codes) -> (x_vector, ref_codes | None)` is pluggable and may be
sync (ttscore Pipeline.voice_features, run in a worker thread) or async (the Triton client).
Concurrent misses of one key share a single computation.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

ComputeResult = tuple[np.ndarray, np.ndarray | None]
ComputeFn = Callable[[np.ndarray, int, bool], ComputeResult | Awaitable[ComputeResult]]
AudioLoader = Callable[[], tuple[np.ndarray, int]]

DEFAULT_MAX_BYTES = 512 * 1024 * 1024  # the spec's speaker cache budget
DEFAULT_MAX_ENTRIES = 4096


@dataclass(frozen=True)
class VoiceFeatures:
    """What a Base request needs instead of reference audio."""

    x_vector: np.ndarray  # float32 [D]
    ref_codes: np.ndarray | None = None  # int64 [T, groups]; present for in-context (ICL) cloning

    @property
    def nbytes(self) -> int:
        return int(self.x_vector.nbytes) + (int(self.ref_codes.nbytes) if self.ref_codes is not None else 0)

    @classmethod
    def from_result(cls, result: ComputeResult, with_codes: bool) -> VoiceFeatures:
        x_vector, ref_codes = result
        xv = np.ascontiguousarray(np.asarray(x_vector, dtype=np.float32).reshape(-1))
        if with_codes and ref_codes is None:
            raise ValueError("voice-features compute returned no reference codes although they were requested")
        # Codes returned unasked (the Triton ensemble always computes both) are kept: free for ICL later.
        codes = None if ref_codes is None else np.ascontiguousarray(np.asarray(ref_codes, dtype=np.int64))
        xv.setflags(write=False)  # shared between requests: nobody may mutate a cached entry
        if codes is not None:
            codes.setflags(write=False)
        return cls(xv, codes)

    def satisfies(self, need_codes: bool) -> bool:
        return self.ref_codes is not None or not need_codes


Key = tuple[str, str]  # (voice key = lower-cased name, version)


class FeatureCache:
    def __init__(
        self,
        compute: ComputeFn,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        if max_bytes < 0 or max_entries < 0:
            raise ValueError("feature cache limits must be non-negative")
        self._compute = compute
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[Key, VoiceFeatures] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # Bumped by invalidate(): a computation that started before an invalidation must not
        # insert its (now stale) result afterwards.
        self._epochs: dict[str, int] = {}
        self._inflight: dict[tuple[str, str, bool], asyncio.Future[VoiceFeatures]] = {}
        self.hits = 0
        self.misses = 0

    # --- plain cache operations ---------------------------------------------------------------

    def get(self, name: str, version: str, need_codes: bool = False) -> VoiceFeatures | None:
        key = (_key(name), version)
        with self._lock:
            feats = self._entries.get(key)
            if feats is None or not feats.satisfies(need_codes):
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return feats

    def put(self, name: str, version: str, features: VoiceFeatures) -> None:
        with self._lock:
            self._insert_locked((_key(name), version), features)

    def invalidate(self, name: str) -> int:
        """Drop every cached version of `name`; returns how many entries went."""
        k = _key(name)
        with self._lock:
            self._epochs[k] = self._epochs.get(k, 0) + 1
            stale = [key for key in self._entries if key[0] == k]
            for key in stale:
                self._bytes -= self._entries.pop(key).nbytes
        return len(stale)

    def clear(self) -> None:
        with self._lock:
            for k in {key[0] for key in self._entries}:
                self._epochs[k] = self._epochs.get(k, 0) + 1
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, tuple) and len(key) == 2):
            return False
        return (_key(key[0]), key[1]) in self._entries

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "max_bytes": self.max_bytes,
                "max_entries": self.max_entries,
                "hits": self.hits,
                "misses": self.misses,
            }

    def _insert_locked(self, key: Key, features: VoiceFeatures) -> None:
        size = features.nbytes
        if size > self.max_bytes or self.max_entries == 0:
            logger.warning("voice features of %r (%d bytes) exceed the cache budget; not cached", key[0], size)
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        self._entries[key] = features
        self._bytes += size
        while self._entries and (self._bytes > self.max_bytes or len(self._entries) > self.max_entries):
            evicted_key, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
            logger.debug("voice features of %r evicted", evicted_key[0])

    # --- computing ----------------------------------------------------------------------------

    async def compute(self, audio: np.ndarray, sample_rate: int, with_codes: bool) -> VoiceFeatures:
        """Run the pluggable compute (a sync callable runs in a worker thread). Not cached."""
        if inspect.iscoroutinefunction(self._compute):
            result = await self._compute(audio, sample_rate, with_codes)
        else:
            result = await asyncio.to_thread(self._compute, audio, sample_rate, with_codes)
            if inspect.isawaitable(result):
                result = await result
        return VoiceFeatures.from_result(result, with_codes)  # type: ignore[arg-type]

    async def get_or_compute(
        self, name: str, version: str, need_codes: bool, load_audio: AudioLoader
    ) -> VoiceFeatures:
        """Cached features of (name, version), computing them from `load_audio()` on a miss."""
        k = _key(name)
        flight_key = (k, version, need_codes)
        while True:
            cached = self.get(name, version, need_codes)
            if cached is not None:
                return cached
            pending = self._inflight.get(flight_key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                cancelling = getattr(task, "cancelling", None)  # Python >= 3.11
                if not pending.cancelled() or (cancelling is not None and cancelling()):
                    raise  # this request was cancelled, not the one computing for it
                # The request that was computing got cancelled: compute here instead.
        loop = asyncio.get_running_loop()
        future: asyncio.Future[VoiceFeatures] = loop.create_future()
        self._inflight[flight_key] = future
        with self._lock:
            epoch = self._epochs.get(k, 0)
        try:
            audio, sr = await asyncio.to_thread(load_audio)
            feats = await self.compute(audio, sr, need_codes)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "exception was never retrieved" warning without waiters
            raise
        finally:
            self._inflight.pop(flight_key, None)
        with self._lock:
            if self._epochs.get(k, 0) == epoch:
                self._insert_locked((k, version), feats)
        future.set_result(feats)
        return feats


def _key(name: str) -> str:
    return name.strip().lower()
