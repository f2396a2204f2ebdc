"""The voice-features LRU: keys, budget, invalidation, single flight; and the store computing at upload."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from voices_audio import FakeCompute, encode_sf, tone, wav

from gateway.voices.features import FeatureCache, VoiceFeatures
from gateway.voices.store import VoiceStore
from ttscore.contract.errors import InvalidRequest


def feats(dim: int = 4, frames: int | None = None) -> VoiceFeatures:
    codes = None if frames is None else np.zeros((frames, 16), np.int64)
    return VoiceFeatures(np.ones(dim, np.float32), codes)


def loader(seconds: float = 1.0):
    return lambda: (tone(seconds), 24000)


@pytest.mark.unit
def test_keys_are_name_and_version():
    cache = FeatureCache(FakeCompute())
    cache.put("Alice", "v1", feats())
    assert cache.get("alice", "v1") is not None  # names are case-insensitive
    assert cache.get("alice", "v2") is None  # another upload generation never matches
    assert ("ALICE", "v1") in cache


@pytest.mark.unit
def test_codes_are_required_only_when_asked_for():
    cache = FeatureCache(FakeCompute())
    cache.put("a", "v", feats())
    assert cache.get("a", "v", need_codes=False) is not None
    assert cache.get("a", "v", need_codes=True) is None
    cache.put("a", "v", feats(frames=3))
    assert cache.get("a", "v", need_codes=True) is not None
    assert cache.get("a", "v", need_codes=False) is not None


@pytest.mark.unit
def test_lru_budget_in_bytes_and_entries():
    one = feats(dim=256).nbytes  # 1 KiB
    cache = FeatureCache(FakeCompute(), max_bytes=3 * one, max_entries=10)
    for name in "abc":
        cache.put(name, "v", feats(dim=256))
    assert cache.get("a", "v") is not None  # a is now the most recently used
    cache.put("d", "v", feats(dim=256))
    assert cache.get("b", "v") is None and cache.get("a", "v") is not None
    assert cache.stats()["bytes"] == 3 * one
    cache.put("huge", "v", feats(dim=4096))  # larger than the whole budget: not cached at all
    assert cache.get("huge", "v") is None and len(cache) == 3
    by_count = FeatureCache(FakeCompute(), max_entries=2)
    for name in "xyz":
        by_count.put(name, "v", feats())
    assert len(by_count) == 2 and by_count.get("x", "v") is None


@pytest.mark.unit
def test_invalidate_drops_every_version_of_a_name():
    cache = FeatureCache(FakeCompute())
    cache.put("a", "v1", feats())
    cache.put("a", "v2", feats())
    cache.put("b", "v1", feats())
    assert cache.invalidate("A") == 2
    assert cache.get("a", "v1") is None and cache.get("a", "v2") is None and cache.get("b", "v1") is not None
    assert cache.stats()["bytes"] == feats().nbytes


@pytest.mark.unit
def test_cached_arrays_are_read_only():
    f = VoiceFeatures.from_result((np.ones(4), np.zeros((2, 16))), with_codes=True)
    assert f.x_vector.dtype == np.float32 and f.ref_codes.dtype == np.int64
    with pytest.raises(ValueError):
        f.x_vector[0] = 2.0
    with pytest.raises(ValueError, match="no reference codes"):
        VoiceFeatures.from_result((np.ones(4), None), with_codes=True)


@pytest.mark.unit
def test_concurrent_misses_compute_once():
    calls = []
    gate = threading.Event()

    def slow(audio, sr, with_codes):
        calls.append(with_codes)
        gate.wait(5)
        return np.ones(4, np.float32), None

    cache = FeatureCache(slow)

    async def scenario():
        tasks = [asyncio.create_task(cache.get_or_compute("a", "v", False, loader())) for _ in range(5)]
        await asyncio.sleep(0.1)
        gate.set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(scenario())
    assert calls == [False] and all(r is results[0] for r in results)
    assert cache.get("a", "v") is results[0]


@pytest.mark.unit
def test_async_compute_and_errors_propagate_without_caching():
    async def compute(audio, sr, with_codes):
        if audio.shape[0] < sr:
            raise InvalidRequest("reference audio too short", "ref_audio")
        return np.full(4, 2.0, np.float32), np.ones((3, 16), np.int64)

    cache = FeatureCache(compute)
    with pytest.raises(InvalidRequest):
        asyncio.run(cache.get_or_compute("a", "v", True, loader(0.5)))
    assert len(cache) == 0
    got = asyncio.run(cache.get_or_compute("a", "v", True, loader(1.0)))
    assert got.ref_codes.shape == (3, 16)


@pytest.mark.unit
def test_a_result_computed_across_an_invalidation_is_not_cached():
    """Delete during a computation: the stale result must not reappear in the cache."""
    cache = FeatureCache(lambda a, sr, c: (time.sleep(0.2), (np.ones(4, np.float32), None))[1])

    async def scenario():
        task = asyncio.create_task(cache.get_or_compute("a", "v", False, loader()))
        await asyncio.sleep(0.05)
        cache.invalidate("a")
        return await task

    assert asyncio.run(scenario()) is not None
    assert cache.get("a", "v") is None


@pytest.mark.unit
def test_a_cancelled_computation_does_not_fail_its_waiters():
    gate = threading.Event()

    def slow(audio, sr, with_codes):
        gate.wait(5)
        return np.ones(4, np.float32), None

    cache = FeatureCache(slow)

    async def scenario():
        first = asyncio.create_task(cache.get_or_compute("a", "v", False, loader()))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(cache.get_or_compute("a", "v", False, loader()))
        await asyncio.sleep(0.05)
        first.cancel()
        await asyncio.sleep(0.05)
        gate.set()
        return await second

    assert asyncio.run(scenario()) is not None


# --- the store computes at upload and serves from the cache ------------------------------------------


@pytest.mark.unit
def test_store_computes_at_upload_and_invalidates_on_delete_and_overwrite(tmp_path):
    compute = FakeCompute()
    cache = FeatureCache(compute)
    store = VoiceStore(tmp_path / "s", features=cache)
    rec = asyncio.run(store.upload(name="icl", audio=wav(1.5), consent="c", ref_text="hello", mime_type="audio/wav"))
    assert compute.calls == [(36000, 24000, True)]
    f = asyncio.run(store.voice_features("ICL"))
    assert f.ref_codes is not None and compute.calls == [(36000, 24000, True)]  # served from the cache
    assert asyncio.run(store.voice_features("icl", x_vector_only=True)) is f
    xv = asyncio.run(store.upload(name="xv", audio=wav(1.2), consent="c", mime_type="audio/wav"))
    assert compute.calls[-1] == (28800, 24000, False) and asyncio.run(store.voice_features("xv")).ref_codes is None
    # Overwrite: the old version is gone, the new one cached.
    new = asyncio.run(store.upload(name="icl", audio=wav(2.0), consent="c", mime_type="audio/wav"))
    assert cache.get("icl", rec.version) is None and cache.get("icl", new.version) is not None
    asyncio.run(store.delete("xv"))
    assert cache.get("xv", xv.version) is None


@pytest.mark.unit
def test_failed_feature_extraction_rejects_the_upload(tmp_path):
    def compute(audio, sr, with_codes):
        raise InvalidRequest("this checkpoint does not support voice cloning (not a Base model)", "ref_audio")

    store = VoiceStore(tmp_path / "s", features=FeatureCache(compute))
    with pytest.raises(InvalidRequest, match="not a Base model"):
        asyncio.run(store.upload(name="v", audio=wav(), consent="c", mime_type="audio/wav"))
    assert len(store) == 0 and list(store.directory.iterdir()) == []


@pytest.mark.unit
def test_after_a_restart_features_are_recomputed_from_the_stored_audio(tmp_path):
    compute = FakeCompute()
    store = VoiceStore(tmp_path / "s", features=FeatureCache(compute))
    asyncio.run(store.upload(name="v", audio=wav(1.5), consent="c", ref_text="t", mime_type="audio/wav"))
    before = asyncio.run(store.voice_features("v"))
    restarted = VoiceStore(tmp_path / "s", features=FeatureCache(compute))
    after = asyncio.run(restarted.voice_features("v"))
    np.testing.assert_array_equal(after.x_vector, before.x_vector)
    np.testing.assert_array_equal(after.ref_codes, before.ref_codes)
    assert len(compute.calls) == 2


@pytest.mark.export  # the tiny_base fixture exports a tiny Base checkpoint (once per session)
def test_features_with_the_real_pipeline(tmp_path, tiny_base):
    _, _, pipeline = tiny_base
    calls = []

    def compute(audio, sr, with_codes):
        calls.append(with_codes)
        return pipeline.voice_features(audio, sr, with_codes)

    store = VoiceStore(tmp_path / "s", features=FeatureCache(compute))
    data = encode_sf(tone(1.3, 16000), 16000, "FLAC", "PCM_24")
    asyncio.run(store.upload(name="clone", audio=data, consent="c", ref_text="reference transcript",
                             mime_type="audio/flac"))
    stored, sr = store.load_audio("clone")
    x_ref, codes_ref = pipeline.voice_features(stored, sr, with_codes=True)
    got = asyncio.run(store.voice_features("clone"))
    np.testing.assert_allclose(got.x_vector, x_ref, atol=1e-6)
    np.testing.assert_array_equal(got.ref_codes, codes_ref)
    assert calls == [True]  # computed once, at upload
    restarted = VoiceStore(tmp_path / "s", features=FeatureCache(pipeline.voice_features))
    again = asyncio.run(restarted.voice_features("clone"))
    np.testing.assert_allclose(again.x_vector, x_ref, atol=1e-6)
    np.testing.assert_array_equal(again.ref_codes, codes_ref)
