"""Uploaded voices on a directory shared by several gateway replicas: two VoiceStore instances on one
directory stand for two replicas (the real processes: tests/e2e_tests/test_multi_replica.py). Lookups by name
see the other replica's uploads, replacements and deletes at once, listings within the sync
interval; cached features never outlive the file they came from; concurrent uploads of one name
resolve as documented; a replica never removes another host's upload in progress."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from voices_audio import FakeCompute, tone, wav

from gateway.voices import records as records_mod
from gateway.voices.admission import POLICY_IMMUTABLE
from gateway.voices.features import FeatureCache
from gateway.voices.store import VoiceStore
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit


def replica(directory: Path, compute: FakeCompute | None = None, **kw) -> VoiceStore:
    cache = FeatureCache(compute or FakeCompute())
    return VoiceStore(directory, builtin_names=("vivian",), features=cache, **kw)


def upload(store: VoiceStore, name: str, audio: bytes | None = None):
    return asyncio.run(store.upload(name=name, audio=audio or wav(1.5), consent="ok", mime_type="audio/wav"))


def test_an_upload_on_one_replica_is_found_by_name_on_the_other_at_once(tmp_path):
    a, b = replica(tmp_path, sync_interval_s=3600), replica(tmp_path, sync_interval_s=3600)
    rec = upload(a, "Alice")
    assert [r.name for r in b.list()] == []  # listings follow within the sync interval (an hour here) ...
    found = b.get("alice")  # ... a lookup by name checks the file itself
    assert found is not None and found.name == "Alice" and found.version == rec.version
    assert [r.name for r in b.list()] == ["Alice"]  # indexed now


def test_listings_follow_the_directory_within_the_sync_interval(tmp_path):
    a, b = replica(tmp_path, sync_interval_s=0.2), replica(tmp_path, sync_interval_s=0.2)
    b.list()
    upload(a, "bob")
    deadline = time.monotonic() + 5
    while "bob" not in [r.name for r in b.list()] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r.name for r in b.list()] == ["bob"]
    asyncio.run(a.delete("bob"))
    time.sleep(0.25)
    assert b.list() == [] and len(b) == 0


def test_a_delete_on_one_replica_is_seen_by_the_other_and_its_features_go(tmp_path):
    compute = FakeCompute()
    a, b = replica(tmp_path, sync_interval_s=3600), replica(tmp_path, compute, sync_interval_s=3600)
    upload(a, "carol")
    asyncio.run(b.voice_features("carol"))
    assert b.features is not None and len(b.features) == 1
    asyncio.run(b.voice_features("carol"))
    assert len(compute.calls) == 1  # cached on b
    asyncio.run(b.delete("carol"))
    assert a.get("carol") is None and "carol" not in a and not (tmp_path / "carol.safetensors").exists()
    with pytest.raises(InvalidRequest):
        a.require("carol")


def test_a_voice_replaced_elsewhere_is_reread_and_its_old_features_are_never_used(tmp_path):
    compute = FakeCompute()
    a, b = replica(tmp_path, sync_interval_s=3600), replica(tmp_path, compute, sync_interval_s=3600)
    first = upload(a, "dave", wav(1.5))
    old = asyncio.run(b.voice_features("dave"))
    second = upload(a, "dave", wav(2.5))
    assert second.version != first.version
    seen = b.get("dave")
    assert seen is not None and seen.version == second.version and seen.num_samples == second.num_samples
    new = asyncio.run(b.voice_features("dave"))
    assert len(compute.calls) == 2 and compute.calls[1][0] == second.num_samples
    assert float(new.x_vector[2]) != float(old.x_vector[2])  # the duration feature of the new clip


def test_a_half_written_upload_is_invisible(tmp_path):
    a, b = replica(tmp_path), replica(tmp_path, sync_interval_s=0)
    # What an upload in progress on another host looks like: its temp file, partly written.
    (tmp_path / f"{records_mod.TEMP_PREFIX}otherhost.1-abc.tmp").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"au")
    (tmp_path / "eve.safetensors.partial").write_bytes(b"junk")
    assert b.list() == [] and b.get("eve") is None
    upload(a, "eve")
    assert [r.name for r in b.list()] == ["eve"]


def test_concurrent_immutable_uploads_of_one_name_through_two_replicas_let_exactly_one_win(tmp_path):
    a = replica(tmp_path, policy=POLICY_IMMUTABLE, sync_interval_s=3600)
    b = replica(tmp_path, policy=POLICY_IMMUTABLE, sync_interval_s=3600)

    async def both():
        return await asyncio.gather(
            a.upload(name="frank", audio=wav(1.5), consent="a", mime_type="audio/wav"),
            b.upload(name="frank", audio=wav(2.0), consent="b", mime_type="audio/wav"),
            return_exceptions=True,
        )

    results = asyncio.run(both())
    won = [r for r in results if not isinstance(r, Exception)]
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(won) == 1 and len(lost) == 1
    assert isinstance(lost[0], InvalidRequest) and lost[0].param == "name" and "already exists" in lost[0].message
    for store in (a, b):
        rec = store.get("frank")
        assert rec is not None and rec.version == won[0].version
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frank.safetensors"]  # no temp file left


def test_concurrent_overwrite_uploads_converge_on_the_last_rename(tmp_path):
    a, b = replica(tmp_path, sync_interval_s=3600), replica(tmp_path, sync_interval_s=3600)
    first = upload(a, "grace", wav(1.5))
    last = upload(b, "grace", wav(2.0))
    assert first.version != last.version
    assert a.get("grace").version == b.get("grace").version == last.version  # type: ignore[union-attr]


def test_restore_keeps_another_hosts_fresh_temp_file_and_removes_stale_ones(tmp_path):
    young = tmp_path / f"{records_mod.TEMP_PREFIX}otherhost.1-young.tmp"
    old = tmp_path / f"{records_mod.TEMP_PREFIX}otherhost.1-old.tmp"
    mine = tmp_path / f"{records_mod.TEMP_PREFIX}{records_mod.HOST}.{2**22 + 7}-dead.tmp"  # our host, no such pid
    for p in (young, old, mine):
        p.write_bytes(b"partial")
    stale = time.time() - 3600
    os.utime(old, (stale, stale))
    replica(tmp_path)
    assert young.exists() and not old.exists() and not mine.exists()


def test_a_cloned_tone_is_the_audio_the_other_replica_stored(tmp_path):
    a, b = replica(tmp_path), replica(tmp_path)
    upload(a, "heidi", wav(1.5))
    audio, rate = b.load_audio("heidi")
    expected = tone(1.5)
    assert rate == 24000 and audio.shape == expected.shape and float(abs(audio - expected).max()) < 1e-4
