"""Voices over HTTP (app + fake Triton backend): GET/POST/DELETE /v1/audio/voices, speaking with
uploaded and precomputed voices, restore at start-up, ref_audio sources, and the voice settings."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import X_VECTOR_DIM, FakeBackend, fake_deployment
from voices_audio import tone, wav

from gateway import refaudio
from gateway.app import create_app
from gateway.settings import SettingsError
from gateway.voice_registry import store_env
from ttscore.contract.voicefile import MANIFEST_NAME, write_voice_profile

pytestmark = pytest.mark.gateway

VOICES = "/v1/audio/voices"
SPEECH = "/v1/audio/speech"
BUILTIN = ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"]


def make_client(tmp_path: Path, fake: FakeBackend | None = None, **settings):
    settings.setdefault("speaker_samples_dir", str(tmp_path / "speakers"))
    app = create_app(fake_deployment(tmp_path, **settings), backend_factory=lambda s: fake or FakeBackend())
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def fake():
    return FakeBackend()


@pytest.fixture
def client(tmp_path, fake):
    with make_client(tmp_path, fake) as c:
        yield c


def upload(client, name="custom_voice_1", audio: bytes | None = None, *, filename="voice_sample.wav",
           ctype="audio/wav", **fields):
    data = {"name": name, "consent": "user_consent_id", **fields}
    data = {k: v for k, v in data.items() if v is not None}
    files = {"audio_sample": (filename, wav(1.5) if audio is None else audio, ctype)}
    return client.post(VOICES, data=data, files=files)


def error_of(r, param="unset"):
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    if param != "unset":
        assert err["param"] == param, err
    return err["message"]


def speaker_files(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "speakers").iterdir())


# --- upload, list, delete: the spec's shapes ------------------------------------------------------


def test_upload_list_delete_shapes(client, fake, tmp_path):
    r = upload(client, ref_text="The exact transcript of the audio sample.", speaker_description="warm narrator")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True
    voice = body["voice"]
    assert set(voice) == {"name", "consent", "created_at", "mime_type", "file_size", "ref_text",
                          "speaker_description"}
    assert voice["name"] == "custom_voice_1" and voice["consent"] == "user_consent_id"
    assert voice["mime_type"] == "audio/wav" and voice["file_size"] == len(wav(1.5))
    assert voice["ref_text"] == "The exact transcript of the audio sample."
    # the features were computed once, at upload, through the voice_features model
    assert [c[0] for c in fake.feature_calls] == ["voice_features"]
    assert speaker_files(tmp_path) == ["custom_voice_1.safetensors"]

    assert upload(client, name="plain").status_code == 200  # no ref_text, no description: omitted
    listing = client.get(VOICES).json()
    assert listing["voices"] == [*BUILTIN, "custom_voice_1", "plain"]
    assert [v["name"] for v in listing["uploaded_voices"]] == ["custom_voice_1", "plain"]
    assert listing["uploaded_voices"][0] == voice
    assert set(listing["uploaded_voices"][1]) == {"name", "consent", "created_at", "mime_type", "file_size"}

    r = client.delete(f"{VOICES}/custom_voice_1")
    assert r.status_code == 200 and r.json() == {"success": True, "message": "Voice 'custom_voice_1' deleted successfully"}
    r = client.delete(f"{VOICES}/custom_voice_1")
    assert r.status_code == 404 and r.json() == {"success": False, "error": "Voice 'custom_voice_1' not found"}
    r = client.delete(f"{VOICES}/unknown_voice")
    assert r.status_code == 404 and r.json() == {"success": False, "error": "Voice 'unknown_voice' not found"}
    assert speaker_files(tmp_path) == ["plain.safetensors"]
    assert client.get(VOICES).json()["voices"] == [*BUILTIN, "plain"]


def test_empty_listing_has_uploaded_voices(client):
    listing = client.get(VOICES).json()
    assert {k: v for k, v in listing.items() if k != "voice_aliases"} == {"voices": BUILTIN, "uploaded_voices": []}


def test_built_in_names_are_rejected_and_cannot_be_deleted(client, tmp_path):
    assert "built-in" in error_of(upload(client, name="Vivian"), "name")
    assert "cannot be deleted" in error_of(client.delete(f"{VOICES}/vivian"), "name")
    assert speaker_files(tmp_path) == []


def test_reupload_overwrites_and_recomputes_features(client, fake):
    assert upload(client, audio=wav(1.5, freq=200.0)).status_code == 200
    first = client.get(VOICES).json()["uploaded_voices"][0]
    r = upload(client, name="CUSTOM_VOICE_1", audio=wav(2.0, freq=300.0), ref_text="New transcript")
    assert r.status_code == 200
    listing = client.get(VOICES).json()
    assert len(listing["uploaded_voices"]) == 1 and listing["uploaded_voices"][0]["ref_text"] == "New transcript"
    assert listing["uploaded_voices"][0]["created_at"] > first["created_at"]
    assert len(fake.feature_calls) == 2  # the new clip's features, not the old cache entry
    assert client.post(SPEECH, json={"input": "Hi", "voice": "custom_voice_1"}).status_code == 200
    assert len(fake.feature_calls) == 2
    assert fake.calls[-1].fields["ref_codes"].shape == (int(np.ceil(2.0 * 12.5)), 16)


def test_immutable_policy_rejects_duplicates(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_OMNI_SPEAKER_REGISTRATION_POLICY", "immutable")
    with make_client(tmp_path) as c:
        assert upload(c).status_code == 200
        assert "already exists" in error_of(upload(c), "name")
        assert c.delete(f"{VOICES}/custom_voice_1").status_code == 200
        assert upload(c).status_code == 200


def test_registration_cap_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEAKER_MAX_UPLOADED", "1")
    with make_client(tmp_path) as c:
        assert upload(c).status_code == 200
        assert "limit reached" in error_of(upload(c, name="second"), "name")
        assert upload(c).status_code == 200  # overwriting does not grow the registry


def test_config_keys_override_the_environment(tmp_path):
    settings = fake_deployment(tmp_path, speaker_samples_dir=str(tmp_path / "cfg"), speaker_max_uploaded=3,
                               speaker_registration_policy="immutable")
    env = store_env(settings, {"SPEAKER_SAMPLES_DIR": "/elsewhere", "VLLM_OMNI_SPEAKER_REGISTRATION_POLICY": "overwrite"})
    assert env["SPEAKER_SAMPLES_DIR"] == str(tmp_path / "cfg")
    assert env["SPEAKER_MAX_UPLOADED"] == "3" and env["VLLM_OMNI_SPEAKER_REGISTRATION_POLICY"] == "immutable"


def test_a_bad_policy_fails_start_up(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_OMNI_SPEAKER_REGISTRATION_POLICY", "sometimes")
    with pytest.raises(SettingsError, match="VLLM_OMNI_SPEAKER_REGISTRATION_POLICY"):
        create_app(fake_deployment(tmp_path), backend_factory=lambda s: FakeBackend())


# --- bad uploads: clear 400s, nothing stored ------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "param", "fragment"),
    [
        ({"name": None}, "name", "required"),
        ({"consent": None}, "consent", "required"),
        ({"name": "a/b"}, "name", "path separators"),
        ({"name": "..\\evil"}, "name", "path separators"),
        ({"name": "bad\x07name"}, "name", "control"),
        ({"name": "zero\u200bwidth"}, "name", "invisible"),
        ({"name": ".."}, "name", "reserved"),
        ({"audio": b"this is not audio at all, just text", "filename": "notes.wav"}, "audio_sample", "not a supported audio"),
        ({"audio": b"plain text", "filename": "notes.txt", "ctype": "text/plain"}, "audio_sample", "Unsupported audio format"),
        ({"audio": wav(31.0, sr=8000)}, "audio_sample", "too long"),
        ({"audio": wav(0.5)}, "audio_sample", "too short"),
    ],
)
def test_bad_uploads_are_400_and_store_nothing(client, fake, tmp_path, kwargs, param, fragment):
    kw = {"name": "custom_voice_1", **kwargs}
    if kw.get("consent", "") is None:
        kw["consent"] = None
    name = kw.pop("name")
    r = upload(client, name, **kw) if "consent" not in kw else _upload_without(client, name, **kw)
    assert fragment in error_of(r, param)
    assert speaker_files(tmp_path) == [] and fake.feature_calls == []
    assert client.get(VOICES).json()["uploaded_voices"] == []


def _upload_without(client, name, consent, **kw):
    data = {k: v for k, v in {"name": name, "consent": consent}.items() if v is not None}
    return client.post(VOICES, data=data, files={"audio_sample": ("v.wav", wav(1.5), "audio/wav")})


def test_missing_file_unknown_fields_and_non_multipart(client, tmp_path):
    r = client.post(VOICES, data={"name": "x", "consent": "c"}, files={"other": ("a.bin", b"123")})
    assert "Unrecognized form field 'other'" in error_of(r, "other")
    r = client.post(VOICES, data={"name": "x", "consent": "c", "dummy": "1"},
                    files={"audio_sample": ("v.wav", wav(1.5), "audio/wav")})
    assert "dummy" in error_of(r, "dummy")
    r = client.post(VOICES, data={"name": "x", "consent": "c"}, files={"ref_text": ("t.txt", b"hi")})
    assert "must be a text field" in error_of(r, "ref_text")
    r = client.post(VOICES, files={"name": (None, "x"), "consent": (None, "c")})
    assert "audio_sample is required" in error_of(r, "audio_sample")
    r = client.post(VOICES, json={"name": "x", "consent": "c"})
    assert "multipart/form-data" in error_of(r)
    assert speaker_files(tmp_path) == []


def _multipart_head(boundary: str) -> bytes:
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nbig\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"consent\"\r\n\r\nc\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"big.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()


def test_upload_over_10_mb_is_rejected_while_streaming(tmp_path):
    """Over a real socket, chunked (no Content-Length): the 400 arrives after a little more than
    10 MB, while the client is still sending; the rest is never read and nothing is stored."""
    import select
    import socket

    from test_gateway_app import start_gateway_with

    from ttscore.backend.triton_server import free_port

    settings = fake_deployment(tmp_path, speaker_samples_dir=str(tmp_path / "speakers"))
    port = free_port()
    server, thread = start_gateway_with(settings, FakeBackend(), port)
    boundary = "XyZboundary"
    chunk = b"\0" * (256 * 1024)
    sent = 0
    response = b""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(f"POST {VOICES} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n".encode())
        head = _multipart_head(boundary)
        sock.sendall(f"{len(head):x}\r\n".encode() + head + b"\r\n")
        for _ in range(160):  # 40 MB if nobody stopped us
            if select.select([sock], [], [], 0.01)[0]:
                break
            try:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except OSError:
                break
            sent += len(chunk)
        sock.settimeout(10)
        try:
            while b"\r\n\r\n" not in response or not response.rstrip().endswith(b"}"):
                data = sock.recv(65536)
                if not data:
                    break
                response += data
        except OSError:
            pass
        sock.close()
    finally:
        server.should_exit = True
        thread.join(10)
    assert response.startswith(b"HTTP/1.1 400"), response[:200]
    assert b"File size exceeds maximum limit of 10MB" in response
    assert 10 * 1024 * 1024 <= sent < 20 * 1024 * 1024, sent  # (socket buffers hold a few MB)
    assert not (tmp_path / "speakers").exists() or speaker_files(tmp_path) == []


def test_upload_over_10_mb_by_content_length_is_rejected_before_reading(client, tmp_path):
    boundary = "XyZboundary"
    r = client.post(VOICES, content=_multipart_head(boundary) + b"\0" * (11 * 1024 * 1024),
                    headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert "File size exceeds maximum limit of 10MB" in error_of(r, "audio_sample")
    assert speaker_files(tmp_path) == []


def test_triton_down_at_upload_is_503_and_stores_nothing(tmp_path):
    fake = FakeBackend(ready=False)
    with make_client(tmp_path, fake) as c:
        r = upload(c)
        assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailableError"
        assert c.get(VOICES).json()["uploaded_voices"] == [] and speaker_files(tmp_path) == []


def test_other_voices_survive_a_bad_upload(client):
    assert upload(client, name="good").status_code == 200
    assert upload(client, name="good2", audio=b"garbage").status_code == 400
    assert upload(client, name="good", audio=b"garbage").status_code == 400  # a failed overwrite keeps the old one
    assert [v["name"] for v in client.get(VOICES).json()["uploaded_voices"]] == ["good"]
    assert client.post(SPEECH, json={"input": "Hi", "voice": "good"}).status_code == 200


# --- speaking with uploaded voices --------------------------------------------------------------------


def test_uploaded_voice_selects_base_and_uses_the_cached_features(client, fake):
    assert upload(client, name="icl", ref_text="Reference transcript").status_code == 200
    assert upload(client, name="xvec").status_code == 200
    assert len(fake.feature_calls) == 2

    r = client.post(SPEECH, json={"input": "Hello, this is a cloned voice", "voice": "icl", "max_new_tokens": 3})
    assert r.status_code == 200, r.text
    call = fake.calls[-1]
    assert call.model == "speech_generation_tiny-base" and call.fields["task_type"] == "base"
    assert call.fields["ref_text"] == "Reference transcript" and call.fields["ref_codes"].shape == (19, 16)
    assert call.fields["x_vector"].shape == (X_VECTOR_DIM,)
    assert r.headers["x-vllm-omni-input-audio-tokens"] == "19"

    # no transcript: x-vector only; task_type CustomVoice is overridden by the uploaded voice (spec)
    r = client.post(SPEECH, json={"input": "Hi", "voice": "XVEC", "task_type": "CustomVoice"})
    assert r.status_code == 200, r.text
    call = fake.calls[-1]
    assert call.fields.get("x_vector_only") is True and "ref_codes" not in call.fields and "ref_text" not in call.fields
    assert r.headers["x-vllm-omni-input-audio-tokens"] == "0"
    assert len(fake.feature_calls) == 2  # no reference processing when speaking


def test_uploaded_voice_needs_a_base_checkpoint(tmp_path):
    with make_client(tmp_path, variants=("custom_voice",)) as c:
        assert upload(c).status_code == 200  # stored; no Base model to compute features with
        r = c.post(SPEECH, json={"input": "Hi", "voice": "custom_voice_1"})
        assert "does not support task_type='Base'" in error_of(r)


def test_delete_then_speak_is_400(client, fake):
    assert upload(client).status_code == 200
    assert client.post(SPEECH, json={"input": "Hi", "voice": "custom_voice_1"}).status_code == 200
    assert client.delete(f"{VOICES}/custom_voice_1").status_code == 200
    n = len(fake.calls)
    assert "Invalid voice 'custom_voice_1'" in error_of(client.post(SPEECH, json={"input": "Hi", "voice": "custom_voice_1"}),
                                                        "voice")
    assert len(fake.calls) == n


def test_voices_are_restored_at_start_up_and_computed_once_on_use(tmp_path):
    fake = FakeBackend()
    with make_client(tmp_path, fake) as c:
        assert upload(c, ref_text="Transcript").status_code == 200
    (tmp_path / "speakers" / "broken.safetensors").write_bytes(b"not a safetensors file")
    fake2 = FakeBackend()
    with make_client(tmp_path, fake2) as c:
        listing = c.get(VOICES).json()
        assert [v["name"] for v in listing["uploaded_voices"]] == ["custom_voice_1"]
        for _ in range(2):
            r = c.post(SPEECH, json={"input": "Hi", "voice": "custom_voice_1"})
            assert r.status_code == 200 and fake2.calls[-1].fields["ref_text"] == "Transcript"
        assert len(fake2.feature_calls) == 1


# --- precomputed voices ------------------------------------------------------------------------------


@pytest.fixture
def custom_voice_dir(tmp_path):
    d = tmp_path / "custom_voices"
    rng = np.random.default_rng(0)
    write_voice_profile(d, "alice", rng.standard_normal(X_VECTOR_DIM), np.arange(5 * 16).reshape(5, 16) % 2048,
                        mode="icl", ref_text="Original transcript", speaker_description="calm")
    write_voice_profile(d, "bob", rng.standard_normal(X_VECTOR_DIM), None, mode="xvec")
    write_voice_profile(d, "wrongdim", rng.standard_normal(X_VECTOR_DIM + 1), None, mode="xvec")
    write_voice_profile(d, "Vivian", rng.standard_normal(X_VECTOR_DIM), None, mode="xvec")  # a built-in name
    return d


def test_precomputed_voices_are_listed_and_spoken(tmp_path, custom_voice_dir, fake, monkeypatch):
    from ttscore.contract.manifest import Manifest

    monkeypatch.setattr(Manifest, "speaker_embed_dim", property(lambda self: X_VECTOR_DIM))  # hand-written manifests
    with make_client(tmp_path, fake, custom_voice_dir=str(custom_voice_dir)) as c:
        listing = c.get(VOICES).json()
        assert listing["voices"] == [*BUILTIN, "alice", "bob"] and listing["uploaded_voices"] == []
        r = c.post(SPEECH, json={"input": "Hi", "voice": "alice"})
        assert r.status_code == 200, r.text
        f = fake.calls[-1].fields
        assert f["ref_text"] == "Original transcript" and f["ref_codes"].shape == (5, 16)
        r = c.post(SPEECH, json={"input": "Hi", "voice": "bob"})
        assert r.status_code == 200 and fake.calls[-1].fields["x_vector_only"] is True
        assert fake.feature_calls == []  # precomputed: no reference processing at all
        assert "precomputed" in error_of(upload(c, name="ALICE"), "name")
        assert "cannot be deleted" in error_of(c.delete(f"{VOICES}/alice"))
        assert "no reference codes" in error_of(c.post(SPEECH, json={"input": "Hi", "voice": "bob", "ref_text": "x"}))


def test_a_missing_or_broken_custom_voice_dir_is_not_fatal(tmp_path):
    (tmp_path / "cv").mkdir()
    (tmp_path / "cv" / MANIFEST_NAME).write_text("{not json")
    for d in (tmp_path / "nowhere", tmp_path / "cv"):
        with make_client(tmp_path, custom_voice_dir=str(d)) as c:
            assert c.get(VOICES).json()["voices"] == BUILTIN


# --- ref_audio sources ---------------------------------------------------------------------------------


class _AudioHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        data, ctype = (wav(1.0), "audio/wav") if self.path == "/ref.wav" else (b"<html>hi</html>", "text/html")
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def audio_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _AudioHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def clone(c, ref_audio):
    return c.post(SPEECH, json={"input": "Hi", "ref_audio": ref_audio, "ref_text": "Transcript", "max_new_tokens": 2})


def test_ref_audio_urls_to_private_addresses_are_refused(client, fake, audio_server):
    for url in (f"{audio_server}/ref.wav", "http://10.0.0.1/ref.wav", "http://169.254.169.254/latest/meta-data"):
        assert "non-public address" in error_of(clone(client, url), "ref_audio")
    assert fake.calls == [] and fake.feature_calls == []


def test_ref_audio_urls_when_private_addresses_are_allowed(tmp_path, fake, audio_server):
    with make_client(tmp_path, fake, allow_private_urls=True) as c:
        r = clone(c, f"{audio_server}/ref.wav")
        assert r.status_code == 200, r.text
        assert fake.feature_calls[-1][1:3] == (24000, 24000)
        assert "not audio" in error_of(clone(c, f"{audio_server}/page.html"), "ref_audio")


def test_file_ref_audio_only_under_the_allowed_directory(tmp_path, fake):
    media = tmp_path / "media"
    media.mkdir()
    (media / "ref.wav").write_bytes(wav(1.0))
    (tmp_path / "secret.wav").write_bytes(wav(1.0))
    with make_client(tmp_path, fake) as c:
        assert "disabled" in error_of(clone(c, (media / "ref.wav").as_uri()), "ref_audio")
    with make_client(tmp_path, fake, allowed_local_media_path=str(media)) as c:
        assert clone(c, (media / "ref.wav").as_uri()).status_code == 200
        assert "outside" in error_of(clone(c, f"file://{media}/../secret.wav"), "ref_audio")
        assert "outside" in error_of(clone(c, (tmp_path / "secret.wav").as_uri()), "ref_audio")
        assert "does not exist" in error_of(clone(c, (media / "nope.wav").as_uri()), "ref_audio")


def test_data_url_ref_audio_still_works(client, fake):
    assert clone(client, refaudio.data_url(wav(1.0))).status_code == 200
    assert "ref_audio must be a URL" in error_of(clone(client, "ftp://example.com/a.wav"), "ref_audio")


def test_ref_audio_resolve_decodes_any_source(tmp_path):
    (tmp_path / "r.wav").write_bytes(wav(0.5, sr=16000))
    from gateway.voices.sources import RefAudioSettings

    audio, rate = asyncio.run(refaudio.resolve_ref_audio((tmp_path / "r.wav").as_uri(),
                                                         RefAudioSettings(allowed_local_media_path=tmp_path)))
    assert rate == 16000 and audio.shape == (8000,)
    np.testing.assert_allclose(audio, tone(0.5, 16000), atol=1e-4)


def test_openapi_documents_the_voice_routes(client):
    spec = client.get("/openapi.json").json()
    post = spec["paths"][VOICES]["post"]
    assert set(post["requestBody"]["content"]) == {"multipart/form-data"}
    assert post["requestBody"]["content"]["multipart/form-data"]["schema"]["required"] == ["audio_sample", "consent", "name"]
    assert "404" in spec["paths"][VOICES + "/{name}"]["delete"]["responses"]
    assert json.dumps(spec).count("422") == 0


def test_settings_reject_wrong_types(tmp_path):
    with pytest.raises(SettingsError, match="allow_private_urls"):
        fake_deployment(tmp_path, allow_private_urls="yes")
    with pytest.raises(SettingsError, match="unknown gateway config"):
        fake_deployment(tmp_path, speaker_dir="x")
    s = fake_deployment(tmp_path, custom_voice_dir="/cv", ws_idle_timeout_s=5, allowed_media_domains=["a.example"])
    assert (s.custom_voice_dir, s.ws_idle_timeout_s, s.allowed_media_domains) == ("/cv", 5, ("a.example",))


def test_httpx_client_can_upload_like_curl(client):
    """The same multipart body curl -F produces (explicit boundary, filename, type)."""
    r = client.post(VOICES, files=[("audio_sample", ("voice_sample.wav", wav(1.2), "audio/x-wav")),
                                   ("consent", (None, "user_consent_id")), ("name", (None, "curl_like"))])
    assert r.status_code == 200 and r.json()["voice"]["mime_type"] == "audio/wav"


def test_serve_forwards_the_voice_options_into_the_gateway_config(tmp_path):
    """`triton-tts serve --custom-voice-dir D --allowed-local-media-path M --allow-private-urls`."""
    import argparse

    from gateway_fixtures import fake_manifest

    from gateway.settings import Settings
    from triton_tts.serve import Served, add_serve_parser, gateway_config, plan_deployment
    from ttscore.contract.manifest import read_manifest

    sub = argparse.ArgumentParser().add_subparsers()
    add_serve_parser(sub)
    args = sub.choices["serve"].parse_args(["--custom-voice-dir", "cv", "--allowed-local-media-path", "m",
                                            "--allow-private-urls"])
    assert (args.custom_voice_dir, args.allowed_local_media_path, args.allow_private_urls) == ("cv", "m", True)
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps(fake_manifest("base")))
    served = [Served("tiny-base", tmp_path, art, read_manifest(art))]
    cfg = gateway_config(served, "127.0.0.1:8001", plan_deployment(served),
                         {"custom_voice_dir": "/cv", "allowed_local_media_path": "/m", "allow_private_urls": True})
    s = Settings.from_dict(cfg)
    assert (s.custom_voice_dir, s.allowed_local_media_path, s.allow_private_urls) == ("/cv", "/m", True)
    assert "custom_voice_dir" not in gateway_config(served, "x", None, {"custom_voice_dir": None})
