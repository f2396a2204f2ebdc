"""Loading a custom_voice_dir at start-up: valid voices exposed, every invalid entry skipped with a warning."""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest
from safetensors.numpy import save_file
from voices_audio import wav

from gateway.voice_registry import precomputed_loaders
from gateway.voices.precomputed import load_precomputed_voices
from gateway.voices.store import VoiceStore
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MANIFEST_NAME, write_voice_profile

QWEN_CHECKS = {"qwen3_tts": {"embedding_dim": 4, "num_code_groups": 16}}  # the served Base checkpoint's sizes

pytestmark = pytest.mark.unit


def manifest(root, voices, **top):
    payload = {"schema_version": 1, "model_type": "qwen3_tts", "voices": voices, **top}
    (root / MANIFEST_NAME).write_text(json.dumps(payload))


def test_loads_upstream_style_profiles(tmp_path):
    """A directory as vllm-omni writes it (int32 ref_code, embedding_dim) loads unchanged."""
    save_file({"speaker_embedding": np.arange(4, dtype=np.float32),
               "ref_code": np.arange(48, dtype=np.int32).reshape(3, 16)}, str(tmp_path / "alice.safetensors"))
    save_file({"speaker_embedding": np.ones((1, 4), np.float32)}, str(tmp_path / "bob.safetensors"))
    manifest(tmp_path, {
        "Alice": {"file": "alice.safetensors", "mode": "icl", "ref_text": "reference transcript", "embedding_dim": 4},
        "bob": {"file": "bob.safetensors", "mode": "xvec", "speaker_description": "deep", "model_revision": "x"},
    })
    voices = load_precomputed_voices(tmp_path, precomputed_loaders(QWEN_CHECKS))
    assert sorted(voices) == ["alice", "bob"]
    alice = voices["alice"]
    assert alice.name == "Alice" and alice.mode == "icl" and alice.ref_text == "reference transcript"
    assert alice.features.ref_codes.dtype == np.int64 and alice.features.ref_codes.shape == (3, 16)
    bob = voices["bob"]
    assert bob.features.x_vector.shape == (4,) and bob.features.ref_codes is None
    assert bob.speaker_description == "deep"


def test_legacy_manifest_without_schema_fields(tmp_path):
    save_file({"speaker_embedding": np.ones(4, np.float32)}, str(tmp_path / "carol.safetensors"))
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(
        {"model": "Qwen3-TTS", "hidden_size": 4, "voices": {"carol": {"file": "carol.safetensors", "mode": "xvec"}}}
    ))
    assert list(load_precomputed_voices(tmp_path, precomputed_loaders())) == ["carol"]


def test_invalid_entries_are_skipped_with_warnings(tmp_path, caplog):
    d = tmp_path
    write_voice_profile(d, "good", np.ones(4), None, mode="xvec")
    save_file({"speaker_embedding": np.ones(4, np.float32)}, str(d / "noref.safetensors"))
    save_file({"speaker_embedding": np.ones(8, np.float32)}, str(d / "wide.safetensors"))
    save_file({"speaker_embedding": np.array([np.inf, 0, 0, 0], np.float32)}, str(d / "inf.safetensors"))
    save_file({"speaker_embedding": np.ones(4, np.float32),
               "ref_code": np.ones((3, 8), np.int32)}, str(d / "groups.safetensors"))
    save_file({"speaker_embedding": np.ones(4, np.float32),
               "ref_code": np.ones((3, 16), np.int32)}, str(d / "notext.safetensors"))
    save_file({"other": np.ones(4, np.float32)}, str(d / "noemb.safetensors"))
    (d / "garbage.safetensors").write_bytes(b"junk")
    (tmp_path.parent / "outside.safetensors").write_bytes(b"")
    voices = json.loads((d / MANIFEST_NAME).read_text())["voices"]
    voices.update({
        "noref": {"file": "noref.safetensors", "mode": "icl", "ref_text": "t"},
        "wide": {"file": "wide.safetensors"},
        "inf": {"file": "inf.safetensors"},
        "groups": {"file": "groups.safetensors", "mode": "icl", "ref_text": "t"},
        "notext": {"file": "notext.safetensors", "mode": "icl"},
        "noemb": {"file": "noemb.safetensors"},
        "garbage": {"file": "garbage.safetensors"},
        "missing": {"file": "missing.safetensors"},
        "escape": {"file": "../outside.safetensors"},
        "badmode": {"file": "noref.safetensors", "mode": "continuation"},
        "bad/name": {"file": "noref.safetensors"},
        "GOOD": {"file": "noref.safetensors"},
        "vivian": {"file": "noref.safetensors"},
        "notobj": 3,
    })
    manifest(d, voices)
    with caplog.at_level(logging.WARNING):
        loaded = load_precomputed_voices(d, precomputed_loaders(QWEN_CHECKS), reserved_names=["Vivian"])
    assert list(loaded) == ["good"]
    for reason in ("needs tensor 'ref_code'", "dim 8", "non-finite", "8 code groups", "needs 'ref_text'",
                   "missing tensor 'speaker_embedding'", "cannot load garbage", "cannot load missing",
                   "escapes custom_voice_dir", "invalid mode", "path separators", "already used", "built-in voice",
                   "not an object"):
        assert reason in caplog.text, reason


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "has no custom_voice_manifest.json"),
        ("{not json", "Cannot read"),
        (json.dumps([1, 2]), "no 'voices'"),
        (json.dumps({"schema_version": 2, "voices": {}}), "schema_version 2"),
        (json.dumps({"model_type": "mars_tts", "voices": {}}), "mars_tts"),
    ],
)
def test_unusable_manifests_load_nothing_but_never_fail(tmp_path, caplog, content, fragment):
    if content is not None:
        (tmp_path / MANIFEST_NAME).write_text(content)
    with caplog.at_level(logging.WARNING):
        assert load_precomputed_voices(tmp_path, precomputed_loaders()) == {}
    assert fragment in caplog.text


def test_unset_dir_is_empty():
    assert load_precomputed_voices(None, precomputed_loaders()) == {} and load_precomputed_voices("", precomputed_loaders()) == {}


def test_precomputed_names_are_reserved_for_uploads(tmp_path):
    write_voice_profile(tmp_path / "pre", "Alice", np.ones(4), None, mode="xvec")
    pre = load_precomputed_voices(tmp_path / "pre", precomputed_loaders())
    store = VoiceStore(tmp_path / "up", builtin_names=["vivian", *(v.name for v in pre.values())])
    with pytest.raises(InvalidRequest, match="built-in or precomputed"):
        asyncio.run(store.upload(name="alice", audio=wav(), consent="c", mime_type="audio/wav"))
    listing = store.listing(["vivian"], [v.name for v in pre.values()])
    assert listing == {"voices": ["vivian", "Alice"], "uploaded_voices": []}
