"""Uploaded voices: validation, spec JSON shapes, persistence, restore, atomicity and concurrency."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from voices_audio import FakeCompute, encode_av, encode_sf, flac_without_length, tone, wav

from gateway.voices import audio_io
from gateway.voices import records as records_mod
from gateway.voices.admission import VoiceStoreSettings
from gateway.voices.errors import UploadTooLarge, VoiceNotFound, VoiceSettingsError
from gateway.voices.features import FeatureCache
from gateway.voices.records import AUDIO_TENSOR, delete_response, upload_response
from gateway.voices.store import VoiceStore
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit

BUILTIN = ("aiden", "ryan", "vivian")


def make_store(tmp_path: Path, **kw) -> VoiceStore:
    kw.setdefault("builtin_names", BUILTIN)
    return VoiceStore(tmp_path / "speakers", **kw)


def upload(store: VoiceStore, name: str = "custom_voice_1", audio: bytes | None = None, **kw):
    kw.setdefault("consent", "user_consent_id")
    kw.setdefault("mime_type", "audio/wav")
    return asyncio.run(store.upload(name=name, audio=wav() if audio is None else audio, **kw))


def files(store: VoiceStore) -> list[str]:
    return sorted(p.name for p in store.directory.iterdir())


# --- happy path and JSON shapes --------------------------------------------------------------------


def test_upload_list_and_response_shapes(tmp_path):
    store = make_store(tmp_path)
    data = wav(1.5)
    rec = upload(store, audio=data, ref_text="The exact transcript.", speaker_description="warm narrator")
    assert upload_response(rec) == {
        "success": True,
        "voice": {
            "name": "custom_voice_1",
            "consent": "user_consent_id",
            "created_at": rec.created_at,
            "file_size": len(data),
            "mime_type": "audio/wav",
            "ref_text": "The exact transcript.",
            "speaker_description": "warm narrator",
        },
    }
    assert abs(rec.created_at - time.time()) < 5
    plain = upload(store, "plain")
    # ref_text and speaker_description are omitted when not given.
    assert set(plain.to_json()) == {"name", "consent", "created_at", "file_size", "mime_type"}
    assert plain.created_at > rec.created_at  # strictly increasing, even within one second
    listing = store.listing(builtin_voices=BUILTIN, precomputed_voices=["alice"])
    assert listing["voices"] == ["aiden", "ryan", "vivian", "alice", "custom_voice_1", "plain"]
    assert listing["uploaded_voices"] == [rec.to_json(), plain.to_json()]
    assert json.loads(json.dumps(listing)) == listing
    assert files(store) == ["custom_voice_1.safetensors", "plain.safetensors"]


def test_empty_listing_still_has_uploaded_voices(tmp_path):
    assert make_store(tmp_path).listing(BUILTIN) == {"voices": list(BUILTIN), "uploaded_voices": []}


def test_stored_file_holds_audio_and_metadata(tmp_path):
    from safetensors import safe_open

    store = make_store(tmp_path)
    audio = tone(1.25, 16000)
    rec = upload(store, "Narrator", audio=encode_sf(audio, 16000), ref_text="hi")
    with safe_open(str(rec.path), framework="numpy") as f:
        meta = f.metadata()
        stored = f.get_tensor(AUDIO_TENSOR)
    assert rec.path.name == "narrator.safetensors"
    assert meta["name"] == "Narrator" and meta["consent"] == "user_consent_id" and meta["ref_text"] == "hi"
    assert int(meta["sample_rate"]) == 16000 and int(meta["created_at"]) == rec.created_at
    assert meta["version"] == rec.version
    np.testing.assert_allclose(stored, audio, atol=1e-4)  # PCM_16 round trip
    got, sr = store.load_audio("NARRATOR")  # names are case-insensitive
    assert sr == 16000 and got.dtype == np.float32 and got.shape == audio.shape


def test_delete(tmp_path):
    store = make_store(tmp_path)
    upload(store, "gone")
    rec = asyncio.run(store.delete("Gone"))
    assert rec.name == "gone"
    assert delete_response("gone") == {"success": True, "message": "Voice 'gone' deleted successfully"}
    assert store.get("gone") is None and files(store) == []
    with pytest.raises(VoiceNotFound) as e:
        asyncio.run(store.delete("unknown_voice"))
    assert e.value.status == 404
    assert e.value.body() == {"success": False, "error": "Voice 'unknown_voice' not found"}
    assert isinstance(e.value, InvalidRequest)
    with pytest.raises(VoiceNotFound):
        asyncio.run(store.delete("vivian"))  # built-ins are not uploaded voices


# --- formats ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "mime"),
    [("flac", "audio/flac"), ("ogg", "audio/ogg"), ("mp3", "audio/mpeg"), ("aac", "audio/aac"),
     ("mp4", "audio/mp4"), ("webm", "audio/webm")],
)
def test_every_spec_format_uploads(tmp_path, kind, mime):
    a = tone(1.5)
    data = {
        "flac": lambda: encode_sf(a, 24000, "FLAC"),
        "ogg": lambda: encode_sf(a, 24000, "OGG"),
        "mp3": lambda: encode_sf(a, 24000, "MP3"),
        "aac": lambda: encode_av(a, 24000, "adts", "aac"),
        "mp4": lambda: encode_av(a, 24000, "mp4", "aac"),
        "webm": lambda: encode_av(a, 24000, "webm", "libopus"),
    }[kind]()
    store = make_store(tmp_path)
    rec = upload(store, kind, audio=data, mime_type=None, filename=f"sample.{'m4a' if kind == 'mp4' else kind}")
    assert rec.mime_type == mime
    assert 1.4 < rec.duration_s < 1.7


@pytest.mark.parametrize(
    ("content_type", "filename", "expected"),
    [("audio/x-wav", None, "audio/wav"), ("audio/mp3", None, "audio/mpeg"), ("video/mp4", None, "audio/mp4"),
     ("application/octet-stream", "voice.FLAC", "audio/flac"), (None, "clip.webm", "audio/webm"),
     ("audio/webm; codecs=opus", None, "audio/webm")],
)
def test_mime_type_resolution(content_type, filename, expected):
    assert audio_io.resolve_mime_type(content_type, filename) == expected


@pytest.mark.parametrize(("content_type", "filename"), [("text/plain", "a.wav"), (None, "notes.txt"), (None, None)])
def test_unsupported_mime_types_are_400(content_type, filename):
    with pytest.raises(InvalidRequest) as e:
        audio_io.resolve_mime_type(content_type, filename)
    assert e.value.param == "audio_sample"


def test_mime_type_from_the_bytes_when_nothing_else_tells():
    assert audio_io.resolve_mime_type("application/octet-stream", "blob", data=wav()) == "audio/wav"
    assert audio_io.resolve_mime_type(None, None, data=encode_av(tone(1.0), 24000, "webm", "libopus")) == "audio/webm"
    with pytest.raises(InvalidRequest):
        audio_io.resolve_mime_type(None, None, data=b"plain text, not audio")


# --- bad input: clear errors, nothing stored -------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param", "fragment"),
    [
        ({"name": ""}, "name", "required"),
        ({"name": None}, "name", "required"),
        ({"name": "../evil"}, "name", "path separators"),
        ({"name": "a\\b"}, "name", "path separators"),
        ({"name": ".."}, "name", "reserved"),
        ({"name": "bad\nname"}, "name", "control"),
        ({"name": "nul\x00"}, "name", "control"),
        ({"name": "rlo\u202eevil"}, "name", "control"),
        ({"name": "x" * 300}, "name", "longer"),
        ({"name": "Vivian"}, "name", "built-in"),
        ({"consent": ""}, "consent", "required"),
        ({"consent": None}, "consent", "required"),
        ({"audio": None}, "audio_sample", "required"),
        ({"audio": b""}, "audio_sample", "empty"),
        ({"audio": b"definitely not audio, just text" * 10}, "audio_sample", "not a supported audio"),
        ({"audio": b"RIFF\x00\x00\x00\x00WAVEgarbage"}, "audio_sample", "decode"),
        ({"mime_type": "image/png"}, "audio_sample", "Unsupported audio format"),
        ({"audio": "short"}, "audio_sample", "too short"),
        ({"ref_text": "x" * 5000}, "ref_text", "too long"),
    ],
)
def test_bad_uploads_are_rejected_and_store_nothing(tmp_path, kwargs, param, fragment):
    store = make_store(tmp_path)
    upload(store, "keeper")
    before = files(store)
    kw = {"name": "new_voice", "audio": wav(), "consent": "c", "mime_type": "audio/wav", **kwargs}
    if kw["audio"] == "short":
        kw["audio"] = wav(0.5)
    with pytest.raises(InvalidRequest) as e:
        asyncio.run(store.upload(**kw))
    assert e.value.param == param
    assert fragment in e.value.message
    assert files(store) == before and [r.name for r in store.list()] == ["keeper"]


def test_upload_over_the_size_limit_is_rejected(tmp_path):
    store = make_store(tmp_path, max_file_bytes=50_000)
    with pytest.raises(UploadTooLarge) as e:
        upload(store, audio=wav(3.0))
    assert e.value.param == "audio_sample" and "exceeds maximum limit" in e.value.message
    assert files(store) == []


def test_duration_is_checked_from_the_header_before_decoding(tmp_path, monkeypatch):
    """60 s of silence in FLAC is tiny; the header alone must reject it, no sample decoded."""
    store = make_store(tmp_path, max_duration_s=30.0)
    data = encode_sf(np.zeros(60 * 16000, np.float32), 16000, "FLAC")
    assert len(data) < 200_000

    def boom(*a, **k):
        raise AssertionError("decoded although the header said too long")

    monkeypatch.setattr(audio_io, "_decode_soundfile", boom)
    monkeypatch.setattr(audio_io, "_decode_av", boom)
    with pytest.raises(InvalidRequest) as e:
        upload(store, audio=data, mime_type="audio/flac")
    assert "too long (60.0s)" in e.value.message
    # Same for a compressed container decoded by PyAV.
    long_aac = encode_av(tone(40.0, 8000), 8000, "mp4", "aac")
    with pytest.raises(InvalidRequest, match="too long"):
        upload(store, audio=long_aac, mime_type="audio/mp4")
    assert files(store) == []


def test_a_header_without_length_cannot_expand_past_the_limit(tmp_path, monkeypatch):
    store = make_store(tmp_path, max_duration_s=5.0)
    data = flac_without_length(np.zeros(40 * 16000, np.float32), 16000)
    assert audio_io.probe_audio(data).duration_s is None
    reads: list[int] = []
    real = audio_io._decode_soundfile

    def spy(data, max_frames):
        out = real(data, max_frames)
        reads.append(0 if out is None else out.shape[0])
        return out

    monkeypatch.setattr(audio_io, "_decode_soundfile", spy)
    with pytest.raises(InvalidRequest, match="too long"):
        upload(store, audio=data, mime_type="audio/flac")
    assert reads == [5 * 16000 + 1]  # decoding stopped right after the limit


def test_registration_cap(tmp_path):
    store = make_store(tmp_path, max_uploaded=2)
    upload(store, "a")
    upload(store, "b")
    with pytest.raises(InvalidRequest, match=r"limit reached \(2\)") as e:
        upload(store, "c")
    assert "SPEAKER_MAX_UPLOADED" in e.value.message
    upload(store, "A", audio=wav(2.0))  # overwriting does not need a free slot
    assert [r.name for r in store.list()] == ["b", "A"]


def test_overwrite_policy_replaces_in_place(tmp_path, caplog):
    store = make_store(tmp_path)
    first = upload(store, "voice", audio=wav(1.5, freq=200))
    with caplog.at_level(logging.WARNING):
        second = upload(store, "VOICE", audio=wav(2.0, freq=300), ref_text="new")
    assert "overwritten" in caplog.text
    assert second.version != first.version and second.created_at > first.created_at
    assert [r.to_json() for r in store.list()] == [second.to_json()]
    assert files(store) == ["voice.safetensors"]
    assert store.load_audio("voice")[0].shape[0] == 48000


def test_immutable_policy_rejects_duplicates_until_deleted(tmp_path):
    store = make_store(tmp_path, policy="immutable")
    first = upload(store, "voice")
    with pytest.raises(InvalidRequest, match="already exists") as e:
        upload(store, "Voice", audio=wav(2.0))
    assert e.value.param == "name"
    assert store.get("voice") == first and store.load_audio("voice")[0].shape[0] == 36000
    asyncio.run(store.delete("voice"))
    upload(store, "voice", audio=wav(2.0))


# --- settings ---------------------------------------------------------------------------------------


def test_settings_from_env(tmp_path, caplog):
    env = {"SPEAKER_SAMPLES_DIR": str(tmp_path / "s"), "SPEAKER_MAX_UPLOADED": "7",
           "VLLM_OMNI_SPEAKER_REGISTRATION_POLICY": " Immutable ", "SPEAKER_MAX_DURATION_S": "12.5"}
    s = VoiceStoreSettings.from_env(env)
    assert (s.directory, s.max_uploaded, s.policy, s.max_duration_s) == (tmp_path / "s", 7, "immutable", 12.5)
    d = VoiceStoreSettings.from_env({})
    assert d.directory == Path("~/.cache/vllm-omni/speakers").expanduser()
    assert (d.max_uploaded, d.policy, d.max_file_bytes) == (1000, "overwrite", 10 * 1024 * 1024)
    with caplog.at_level(logging.WARNING):
        assert VoiceStoreSettings.from_env({"SPEAKER_MAX_UPLOADED": "many"}).max_uploaded == 1000
    assert "SPEAKER_MAX_UPLOADED" in caplog.text
    with pytest.raises(VoiceSettingsError, match="VLLM_OMNI_SPEAKER_REGISTRATION_POLICY"):
        VoiceStoreSettings.from_env({"VLLM_OMNI_SPEAKER_REGISTRATION_POLICY": "append"})
    with pytest.raises(VoiceSettingsError):
        VoiceStoreSettings.from_env({"SPEAKER_MAX_DURATION_S": "-1"})
    store = VoiceStore.from_env(BUILTIN, env=env)
    assert store.directory.is_dir() and store.policy == "immutable" and store.max_uploaded == 7


# --- persistence and restore ------------------------------------------------------------------------


def test_voices_survive_a_restart(tmp_path):
    store = make_store(tmp_path)
    a = upload(store, "alpha", ref_text="transcript", speaker_description="calm")
    b = upload(store, "Beta", audio=encode_sf(tone(1.1, 16000), 16000, "FLAC"), mime_type="audio/flac")
    restarted = make_store(tmp_path)
    assert restarted.list() == [a, b]
    np.testing.assert_array_equal(restarted.load_audio("alpha")[0], store.load_audio("alpha")[0])
    c = upload(restarted, "gamma")
    assert c.created_at > b.created_at  # the clock continues from what is on disk


def test_invalid_files_on_disk_are_skipped_with_a_warning(tmp_path, caplog):
    from safetensors.numpy import save_file

    store = make_store(tmp_path)
    good = upload(store, "good")
    d = store.directory
    (d / "garbage.safetensors").write_bytes(b"\x00\x01 not safetensors")
    save_file({"other": np.zeros(4, np.float32)}, str(d / "noaudio.safetensors"), metadata={"name": "noaudio"})
    save_file({AUDIO_TENSOR: np.zeros(4, np.float32)}, str(d / "badname.safetensors"),
              metadata={"name": "../x", "sample_rate": "24000"})
    save_file({AUDIO_TENSOR: np.zeros(4, np.float64)}, str(d / "f64.safetensors"),
              metadata={"name": "f64", "sample_rate": "24000"})
    save_file({AUDIO_TENSOR: np.zeros(4, np.float32)}, str(d / "nosr.safetensors"), metadata={"name": "nosr"})
    truncated = good.path.read_bytes()[:-100]
    (d / "truncated.safetensors").write_bytes(truncated)
    save_file({AUDIO_TENSOR: np.zeros(48000, np.float32)}, str(d / "ryan.safetensors"),
              metadata={"name": "Ryan", "sample_rate": "24000", "consent": "x"})
    (d / "dir.safetensors").mkdir()
    with caplog.at_level(logging.WARNING):
        restarted = make_store(tmp_path)
    assert [r.name for r in restarted.list()] == ["good"]
    for bad in ("garbage", "noaudio", "badname", "f64", "nosr", "truncated"):
        assert f"{bad}.safetensors" in caplog.text
    assert "collides with a built-in" in caplog.text  # ryan.safetensors ignored, never shadows the preset


def test_foreign_file_names_are_restored_and_replaced_on_overwrite(tmp_path):
    """Files written by upstream (`<name>_<consent>_<ts>.safetensors`) restore; re-upload cleans them up."""
    from safetensors.numpy import save_file

    d = tmp_path / "speakers"
    d.mkdir()
    save_file({AUDIO_TENSOR: tone(1.2)}, str(d / "Old_consent_1738660000.safetensors"),
              metadata={"name": "Old", "voice_name_lower": "old", "consent": "consent", "created_at": "1738660000",
                        "mime_type": "audio/wav", "file_size": "1024", "sample_rate": "24000"})
    store = make_store(tmp_path)
    rec = store.get("old")
    assert rec is not None and rec.to_json() == {
        "name": "Old", "consent": "consent", "created_at": 1738660000, "file_size": 1024, "mime_type": "audio/wav",
    }
    upload(store, "old")
    assert files(store) == ["old.safetensors"]


# --- atomicity --------------------------------------------------------------------------------------


def test_failed_write_leaves_the_previous_voice_and_no_temp_file(tmp_path, monkeypatch):
    store = make_store(tmp_path)
    first = upload(store, "voice")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        upload(store, "voice", audio=wav(2.0))
    with pytest.raises(OSError):
        upload(store, "other")
    monkeypatch.undo()
    assert store.list() == [first] and files(store) == ["voice.safetensors"]
    assert make_store(tmp_path).list() == [first]


def test_a_cancelled_request_still_completes_its_commit(tmp_path, monkeypatch):
    """Client disconnect during the commit: the file is renamed AND the index follows, or neither."""
    store = make_store(tmp_path)
    real = records_mod.atomic_write_bytes
    started = asyncio.Event()

    def slow_write(*a, **k):
        time.sleep(0.3)
        return real(*a, **k)

    monkeypatch.setattr(records_mod, "atomic_write_bytes", slow_write)

    async def scenario():
        loop = asyncio.get_running_loop()
        orig_to_thread = asyncio.to_thread

        async def to_thread(fn, *a, **k):
            if fn is records_mod.write_voice_file:  # (which calls atomic_write_bytes)
                loop.call_soon(started.set)
            return await orig_to_thread(fn, *a, **k)

        monkeypatch.setattr(asyncio, "to_thread", to_thread)
        task = asyncio.create_task(store.upload(name="v", audio=wav(), consent="c", mime_type="audio/wav"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.6)  # the shielded commit finishes in the background

    asyncio.run(scenario())
    rec = store.get("v")
    assert rec is not None and rec.path.is_file()
    assert make_store(tmp_path).get("v") == rec


KILL_SCRIPT = r"""
import asyncio, os, sys, time
sys.path[:0] = [{root!r}, {tests!r}]
from voices_audio import wav
from gateway.voices.store import VoiceStore
store = VoiceStore({directory!r}, builtin_names=())
real_replace = os.replace
def replace(src, dst):
    if str(dst).endswith("victim.safetensors"):
        open({marker!r}, "w").write(src)
        time.sleep(60)
    return real_replace(src, dst)
os.replace = replace
asyncio.run(store.upload(name="victim", audio=wav(2.0), consent="c", mime_type="audio/wav"))
"""


def test_a_killed_upload_leaves_no_trace(tmp_path):
    store = make_store(tmp_path, builtin_names=())
    survivor = upload(store, "survivor")
    victim_v1 = upload(store, "victim")  # the kill happens while overwriting it
    marker = tmp_path / "marker"
    script = KILL_SCRIPT.format(root=str(Path(__file__).resolve().parents[2]), tests=str(Path(__file__).resolve().parents[1]),
                                directory=str(store.directory), marker=str(marker))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "child never reached the rename"
            time.sleep(0.05)
        temp = Path(marker.read_text())
        assert temp.is_file() and temp.stat().st_size > 0  # fully written and fsynced, not yet renamed
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    restarted = make_store(tmp_path, builtin_names=())
    assert restarted.list() == [survivor, victim_v1]  # the old "victim" intact, the new one absent
    assert files(restarted) == ["survivor.safetensors", "victim.safetensors"]  # temp file cleaned up
    np.testing.assert_array_equal(restarted.load_audio("victim")[0], store.load_audio("victim")[0])


# --- concurrency ------------------------------------------------------------------------------------


def test_concurrent_uploads_of_one_name_end_consistent(tmp_path):
    compute = FakeCompute()
    cache = FeatureCache(compute)
    store = make_store(tmp_path, features=cache)
    clips = [wav(1.0 + 0.1 * i, freq=150 + 20 * i) for i in range(8)]

    async def scenario():
        return await asyncio.gather(
            *(store.upload(name="shared", audio=c, consent=f"c{i}", mime_type="audio/wav") for i, c in enumerate(clips))
        )

    records = asyncio.run(scenario())
    final = store.get("shared")
    assert final == max(records, key=lambda r: r.created_at)
    assert files(store) == ["shared.safetensors"]
    audio, sr = store.load_audio(final)
    restarted = make_store(tmp_path)
    assert restarted.get("shared") == final  # the file on disk is the indexed voice
    # The cached features belong to the audio that won, and only to it.
    assert len(cache) == 1
    feats = asyncio.run(store.voice_features("shared"))
    np.testing.assert_array_equal(feats.x_vector, compute.expected(audio, sr, False)[0])


def test_concurrent_uploads_respect_the_cap(tmp_path):
    store = make_store(tmp_path, max_uploaded=3)

    async def scenario():
        return await asyncio.gather(
            *(store.upload(name=f"v{i}", audio=wav(), consent="c", mime_type="audio/wav") for i in range(6)),
            return_exceptions=True,
        )

    results = asyncio.run(scenario())
    assert sum(not isinstance(r, Exception) for r in results) == 3
    assert all(isinstance(r, InvalidRequest) for r in results if isinstance(r, Exception))
    assert len(store) == 3 and len(files(store)) == 3


def test_upload_and_delete_of_one_name_interleave_cleanly(tmp_path):
    store = make_store(tmp_path)
    upload(store, "v")

    async def scenario():
        return await asyncio.gather(
            store.delete("v"),
            store.upload(name="v", audio=wav(2.0), consent="c", mime_type="audio/wav"),
            return_exceptions=True,
        )

    deleted, uploaded = asyncio.run(scenario())
    assert not isinstance(deleted, Exception) and not isinstance(uploaded, Exception)
    assert store.get("v") == uploaded and make_store(tmp_path).get("v") == uploaded
