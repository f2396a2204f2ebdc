"""OpenAI drop-in names (gateway.aliases) over the fake backend: tts-1 / gpt-4o-mini-tts and OpenAI's voice
names reach the served models; configured maps replace the defaults; unknown names keep the spec's errors."""

from __future__ import annotations

import io

import pytest
import soundfile as sf
from gateway_fixtures import FakeBackend, fake_app_client, fake_audio, fake_deployment

from gateway import encoding, refaudio
from gateway.aliases import effective_voice_aliases
from gateway.app import create_app
from gateway.families.qwen3_tts import VOICE_ALIASES as DEFAULT_VOICE_ALIASES
from gateway.settings import SettingsError

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
CUSTOM = "speech_generation_tiny-custom-voice"
BASE = "speech_generation_tiny-base"


@pytest.fixture
def fake():
    return FakeBackend()


def client_of(tmp_path, fake, **settings):
    return fake_app_client(tmp_path, fake, **settings)


def speak(c, **kw):
    return c.post(SPEECH, json={"input": "Hello.", "max_new_tokens": 2, **kw})


def test_openai_model_and_voice_names_reach_the_presets(tmp_path, fake):
    with client_of(tmp_path, fake) as c:
        for model in ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"):
            for voice, preset in (("alloy", "vivian"), ("nova", "ono_anna"), ("onyx", "uncle_fu"), ("ALLOY", "vivian")):
                r = speak(c, model=model, voice=voice)
                assert r.status_code == 200, r.text
                assert (fake.calls[-1].model, fake.calls[-1].fields["speaker"]) == (CUSTOM, preset)
        # an alias without a target routes like an omitted model: a reference clip goes to Base
        ref = refaudio.data_url(encoding.encode(fake_audio(5), 24000, "wav"))
        r = speak(c, model="tts-1", ref_audio=ref, ref_text="Transcript.")
        assert r.status_code == 200, r.text
        assert fake.calls[-1].model == BASE
        # presets keep their own names; unknown names keep the spec's errors
        assert speak(c, model="tts-1", voice="ryan").status_code == 200
        assert fake.calls[-1].fields["speaker"] == "ryan"
        r = speak(c, model="tts-2", voice="alloy")
        assert r.status_code == 404 and r.json()["error"]["message"] == "The model `tts-2` does not exist."
        r = speak(c, model="tts-1", voice="bogus")
        assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
        assert "Invalid voice 'bogus'" in r.json()["error"]["message"]


def test_listings_show_the_aliases(tmp_path, fake):
    with client_of(tmp_path, fake) as c:
        cards = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
        assert cards["tts-1"]["alias_of"] == "tiny-custom-voice" and cards["tts-1"]["routed_by_task"] is True
        assert cards["tts-1"]["voices"] == cards["tiny-custom-voice"]["voices"]
        assert "alias_of" not in cards["tiny-custom-voice"]
        assert c.get("/v1/audio/voices").json()["voice_aliases"] == DEFAULT_VOICE_ALIASES


def test_uploads_cannot_take_an_alias_name(tmp_path, fake):
    buf = io.BytesIO()
    sf.write(buf, fake_audio(20), 24000, format="WAV")
    with client_of(tmp_path, fake) as c:
        r = c.post("/v1/audio/voices", files={"audio_sample": ("a.wav", buf.getvalue(), "audio/wav")},
                   data={"name": "Alloy", "consent": "ok"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "name"


def test_configured_maps_replace_the_defaults(tmp_path, fake):
    settings = {"model_aliases": {"house-tts": "tiny-base", "any-tts": None},
                "voice_aliases": {"Alloy": "ryan", "narrator": "aiden", "vivian": "ryan"}}
    with client_of(tmp_path, fake, **settings) as c:
        assert speak(c, model="tts-1").status_code == 404  # the defaults are replaced
        assert speak(c, model="any-tts", voice="alloy").status_code == 200
        assert fake.calls[-1].fields["speaker"] == "ryan"
        assert speak(c, model="any-tts", voice="narrator").status_code == 200
        assert fake.calls[-1].fields["speaker"] == "aiden"
        assert speak(c, voice="vivian").status_code == 200  # a preset's own name is never re-mapped
        assert fake.calls[-1].fields["speaker"] == "vivian"
        # pinned to the Base model: its task rules apply, as for its own id
        r = speak(c, model="house-tts", voice="alloy")
        assert r.status_code == 400 and "does not support task_type='CustomVoice'" in r.json()["error"]["message"]
        assert c.get("/v1/audio/voices").json()["voice_aliases"] == {"alloy": "ryan", "narrator": "aiden"}
    with client_of(tmp_path / "none", fake, model_aliases={}, voice_aliases={}) as c:
        assert speak(c, model="tts-1").status_code == 404
        assert speak(c, voice="alloy").status_code == 400
        assert "voice_aliases" not in c.get("/v1/audio/voices").json()
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == [
            "tiny-custom-voice", "tiny-voice-design", "tiny-base"]


@pytest.mark.parametrize(("settings", "needle"), [
    ({"model_aliases": {"tiny-base": None}}, "already a served model id"),
    ({"model_aliases": {"tts-1": "nope"}}, "not a served model id"),
    ({"model_aliases": ["tts-1"]}, "must be an object"),
    ({"voice_aliases": {"alloy": "nobody"}}, "alloy -> nobody"),
    ({"voice_aliases": {"alloy": ""}}, "non-empty"),
])
def test_bad_alias_config_fails_at_startup(tmp_path, settings, needle):
    with pytest.raises(SettingsError, match=needle):
        create_app(fake_deployment(tmp_path, **settings), backend_factory=lambda s: FakeBackend())


@pytest.mark.unit
def test_default_voice_aliases_keep_only_served_speakers():
    assert effective_voice_aliases(None, ["ryan", "vivian"], DEFAULT_VOICE_ALIASES) == {
        a: s for a, s in DEFAULT_VOICE_ALIASES.items() if s in ("ryan", "vivian")}
    assert effective_voice_aliases(None, [], DEFAULT_VOICE_ALIASES) == {}
