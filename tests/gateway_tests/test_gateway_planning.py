"""gateway.planning / settings / refaudio / errors: validation, defaults, task inference, routing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile as sf
from gateway_fixtures import fake_deployment

from gateway import errors, refaudio
from gateway.checkpoints import load_checkpoints
from gateway.errors import APIError
from gateway.planning import DRAWN_SEED_MAX, Deployment, SpeechFields, StoredVoice, plan_speech
from gateway.protocol import BatchSpeechRequest
from gateway.settings import Settings, SettingsError
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("planning")


def deployment(root, variants=("custom_voice", "voice_design", "base"), voices=None) -> Deployment:
    return Deployment(load_checkpoints(fake_deployment(root / "-".join(variants), variants)), voices)


def plan(dep: Deployment, **fields):
    return plan_speech(SpeechFields(**fields), dep)


def fails(dep: Deployment, status: int = 400, **fields) -> APIError:
    with pytest.raises(APIError) as info:
        plan(dep, **fields)
    assert info.value.status == status, info.value.message
    return info.value


def wav_data_url(seconds: float = 1.0, rate: int = 16000) -> str:
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(np.arange(int(seconds * rate)) / 5)).astype(np.float32), rate, format="WAV")
    return refaudio.data_url(buf.getvalue())


# --- defaults and task inference ------------------------------------------------------------------


def test_defaults(root):
    p = plan(deployment(root), input="Hello")
    assert p.task == "CustomVoice" and p.speaker == "vivian" and p.language == "auto"
    assert p.output.format == "wav" and p.output.sample_rate == 24000 and p.output.speed == 1.0
    assert p.output.stream is None and p.max_new_tokens == 2048
    # No seed given: the gateway draws one (a seeded family), so the request can be replayed.
    assert p.seed_drawn and p.seed is not None and 0 <= p.seed <= DRAWN_SEED_MAX
    assert p.generation_fields()["task_type"] == "custom_voice"
    assert p.generation_fields()["seed"] == p.seed


def test_a_client_seed_is_kept_and_drawn_seeds_differ(root):
    d = deployment(root)
    given = plan(d, input="Hello", seed=7)
    assert given.seed == 7 and not given.seed_drawn
    assert len({plan(d, input="Hello").seed for _ in range(8)}) > 1


@pytest.mark.parametrize(
    ("fields", "task"),
    [
        ({}, "CustomVoice"),
        ({"voice": "ryan"}, "CustomVoice"),
        ({"ref_audio": "data:audio/wav;base64,AAAA", "ref_text": "t"}, "Base"),
        ({"ref_text": "only text", "ref_audio": "data:;base64,AA"}, "Base"),
        ({"ref_audio": "data:;base64,AA", "x_vector_only_mode": True}, "Base"),
        ({"task_type": "VoiceDesign", "instructions": "warm"}, "VoiceDesign"),
        ({"task_type": "Base", "ref_audio": "data:;base64,AA", "ref_text": "t"}, "Base"),
    ],
)
def test_task_inference(root, fields, task):
    p = plan(deployment(root), input="Hi", **fields)
    assert p.task == task
    assert p.checkpoint.task == task


def test_ref_text_alone_infers_base_and_then_needs_ref_audio(root):
    e = fails(deployment(root), input="Hi", ref_text="transcript")
    assert e.param == "ref_audio"


def test_stored_voice_always_selects_base(root):
    class Store:
        def resolve_voice(self, name):
            if name == "mine":
                return StoredVoice(name, ref_text="hello", audio=np.zeros(2400, np.float32), sample_rate=24000)
            return StoredVoice(name) if name == "plain" else None

        def uploaded_voices(self):
            return [{"name": "mine"}]

    dep = deployment(root, voices=Store())
    p = plan(dep, input="Hi", voice="Mine", task_type="CustomVoice")
    assert p.task == "Base" and p.stored_voice is not None and p.ref_text == "hello" and p.speaker is None
    # inline ref_audio overrides the stored voice
    p = plan(dep, input="Hi", voice="mine", ref_audio="data:;base64,AA", ref_text="t")
    assert p.stored_voice is None and p.ref_audio is not None
    # uploaded without a transcript: x-vector-only cloning
    p = plan(dep, input="Hi", voice="plain")
    assert p.task == "Base" and p.x_vector_only and p.ref_text is None


# --- routing over several checkpoints ---------------------------------------------------------------


def test_routing_by_task_and_model(root):
    dep = deployment(root)
    assert plan(dep, input="Hi").checkpoint.name == "tiny-custom-voice"
    assert plan(dep, input="Hi", task_type="VoiceDesign", instructions="x").checkpoint.name == "tiny-voice-design"
    assert plan(dep, input="Hi", model="tiny-custom-voice").checkpoint.triton_model == "speech_generation_tiny-custom-voice"
    # a hub-style id resolves to the served checkpoint of that name
    assert plan(dep, input="Hi", model="Qwen/tiny-custom-voice").checkpoint.name == "tiny-custom-voice"


def test_unknown_model_is_404(root):
    e = fails(deployment(root), 404, input="Hi", model="xxx")
    assert e.body() == {"error": {"message": "The model `xxx` does not exist.", "type": "NotFoundError",
                                  "param": "model", "code": 404}}


def test_task_the_named_checkpoint_does_not_serve(root):
    e = fails(deployment(root), input="Hi", model="tiny-custom-voice", task_type="Base",
              ref_audio="data:;base64,AA", ref_text="t")
    assert e.body()["error"] == {
        "message": "Qwen3-TTS CustomVoice checkpoint does not support task_type='Base'. "
        "Use task_type='CustomVoice' or load the matching Base checkpoint.",
        "type": "BadRequestError", "param": None, "code": 400,
    }


def test_task_no_served_checkpoint_supports(root):
    e = fails(deployment(root, ("custom_voice",)), input="Hi", task_type="Base", ref_audio="data:;base64,AA",
              ref_text="t")
    assert e.message == ("Qwen3-TTS CustomVoice checkpoint does not support task_type='Base'. "
                         "Use task_type='CustomVoice' or load the matching Base checkpoint.")
    e = fails(deployment(root, ("base",)), input="Hi", voice="vivian")
    assert e.message.startswith("Qwen3-TTS Base checkpoint does not support task_type='CustomVoice'.")
    e = fails(deployment(root, ("custom_voice", "base")), input="Hi", task_type="VoiceDesign", instructions="x")
    assert e.message == ("Qwen3-TTS CustomVoice and Base checkpoints do not support task_type='VoiceDesign'. "
                         "Use task_type='CustomVoice' or task_type='Base' or load the matching VoiceDesign checkpoint.")


# --- bad input: 400 naming the field ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param", "needle"),
    [
        ({"input": ""}, "input", "Input text cannot be empty"),
        ({"input": "   \n\t"}, "input", "Input text cannot be empty"),
        ({"input": "x" * 100_001}, "input", "100001 characters, the maximum is 100000"),
        ({"voice": "nobody"}, "voice", "aiden, dylan, eric, ono_anna, ryan, serena, sohee, uncle_fu, vivian"),
        ({"language": "Klingon"}, "language", "Supported: Auto, Chinese, English, French, German"),
        ({"speed": 0.1}, "speed", "0.25"),
        ({"speed": 4.5}, "speed", "4.0"),
        ({"sample_rate": 7000}, "sample_rate", "8000"),
        ({"sample_rate": 96000}, "sample_rate", "48000"),
        ({"sample_rate": 22050, "response_format": "opus"}, "sample_rate", "8000, 12000, 16000, 24000, 48000"),
        ({"max_new_tokens": 0}, "max_new_tokens", "between 1 and 4096"),
        ({"max_new_tokens": 4097}, "max_new_tokens", "between 1 and 4096"),
        ({"initial_codec_chunk_frames": 0}, "initial_codec_chunk_frames", "between 1 and 300"),
        ({"seed": -1}, "seed", "between 0"),
        ({"response_format": "ogg"}, "response_format", "Supported"),
        ({"stream": True, "response_format": "flac"}, "response_format", "'pcm', 'wav', 'mp3' or 'opus'"),
        ({"stream_format": "sse", "response_format": "aac"}, "response_format", "'pcm', 'wav', 'mp3' or 'opus'"),
        ({"stream": True, "speed": 2.0}, "speed", "speed=1.0"),
        ({"stream_format": "audio", "response_format": "pcm", "speed": 0.5}, "speed", "speed=1.0"),
        ({"stream_format": "video"}, "stream_format", "audio, sse"),
        ({"task_type": "Clone"}, "task_type", "CustomVoice, VoiceDesign, Base"),
        ({"task_type": "VoiceDesign"}, "instructions", "VoiceDesign task requires 'instructions'"),
        ({"task_type": "VoiceDesign", "instructions": "  "}, "instructions", "requires 'instructions'"),
        ({"task_type": "Base"}, "ref_audio", "requires 'ref_audio'"),
        ({"task_type": "Base", "ref_audio": "data:;base64,AA"}, "ref_text", "non-empty 'ref_text'"),
        ({"task_type": "CustomVoice", "ref_text": "t"}, "ref_text", "only valid for Base"),
        ({"task_type": "CustomVoice", "ref_audio": "data:;base64,AA"}, "ref_audio", "only valid for Base"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode", "only valid for Base"),
    ],
)
def test_bad_input_is_400_naming_the_field(root, fields, param, needle):
    e = fails(deployment(root), **{"input": "Hello", **fields})
    assert e.param == param
    assert needle in e.message
    assert e.body()["error"]["type"] == "BadRequestError" and e.body()["error"]["code"] == 400


def test_valid_edges(root):
    dep = deployment(root)
    assert plan(dep, input="x" * 600).texts == ("x" * 600,)  # one segment, as sent
    assert len(plan(dep, input="x" * 100_000).texts) == 167  # one word: cut into 600-character segments
    assert plan(dep, input="Hi", language="ENGLISH").language == "english"
    assert plan(dep, input="Hi", language="Auto").language == "auto"
    assert plan(dep, input="Hi", voice="Vivian").speaker == "vivian"
    assert plan(dep, input="Hi", speed=0.25).output.speed == 0.25
    assert plan(dep, input="Hi", speed=4).output.speed == 4.0
    for fmt, rate in [("wav", 8000), ("wav", 11025), ("flac", 48000), ("mp3", 22050), ("opus", 48000), ("aac", 44100)]:
        assert plan(dep, input="Hi", response_format=fmt, sample_rate=rate).output.sample_rate == rate
    p = plan(dep, input="Hi", stream=True)
    assert p.output.stream == "sse" and p.output.format == "wav"
    assert plan(dep, input="Hi", stream=True, stream_format="audio").output.stream == "audio"
    assert plan(dep, input="Hi", stream=False, stream_format="sse").output.stream == "sse"
    p = plan(dep, input="Hi", task_type="Base", ref_audio="data:;base64,AA", x_vector_only_mode=True, ref_text="ignored")
    assert p.x_vector_only and p.ref_text is None and p.generation_fields()["x_vector_only"] is True
    # the SDK always sends a voice; VoiceDesign / Base ignore it
    p = plan(dep, input="Hi", voice="alloy", task_type="VoiceDesign", instructions="calm")
    assert p.speaker is None and p.instructions == "calm"
    p = plan(dep, input="Hi", voice="alloy", ref_audio="data:;base64,AA", ref_text="t")
    assert p.task == "Base" and p.speaker is None


def test_generation_fields_carry_every_knob(root):
    p = plan(deployment(root), input="Hi", voice="ryan", language="Chinese", instructions="happy", max_new_tokens=12,
             initial_codec_chunk_frames=3, non_streaming_mode=False, seed=7)
    assert p.generation_fields() == {
        "text": "Hi", "task_type": "custom_voice", "speaker": "ryan", "language": "chinese", "instructions": "happy",
        "ref_text": None, "x_vector_only": None, "non_streaming_mode": False, "max_new_tokens": 12, "seed": 7,
        "initial_chunk_frames": 3,
    }
    # extra_params reach the talker's sampling, as vLLM-Omni applies them (temperature 0: greedy)
    knobs = plan(deployment(root), input="Hi", extra_params={"temperature": 0.5, "top_k": 7, "top_p": 0.8})
    assert {k: knobs.generation_fields()[k] for k in ("do_sample", "temperature", "top_k", "top_p")} == {
        "do_sample": True, "temperature": 0.5, "top_k": 7, "top_p": 0.8}
    greedy = plan(deployment(root), input="Hi", extra_params={"temperature": 0}).generation_fields()
    assert greedy["do_sample"] is False and "temperature" not in greedy
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_k": 1.5}, {"min_p": 0.1}, {"subtalker_temperature": 1}):
        assert fails(deployment(root), input="Hi", extra_params=bad).param == "extra_params"


def test_batch_items_override_batch_defaults():
    defaults = {"voice": "vivian", "language": "English", "response_format": "wav", "speed": None, "seed": 3}
    batch = BatchSpeechRequest(**defaults, model="m", items=[{"input": "a", "voice": "ryan", "response_format": "mp3"}])
    f = batch.item_fields(batch.items[0])
    assert (f.input, f.voice, f.language, f.response_format, f.seed, f.model) == ("a", "ryan", "English", "mp3", 3, "m")
    batch = BatchSpeechRequest(**defaults, items=[{"input": "b", "voice": None}])
    f = batch.item_fields(batch.items[0])
    assert f.voice == "vivian" and f.model is None


# --- ref_audio ------------------------------------------------------------------------------------


def test_ref_audio_data_url_decodes():
    audio, rate = refaudio.decode_ref_audio(wav_data_url(0.5, 16000))
    assert rate == 16000 and audio.dtype == np.float32 and audio.size == 8000


@pytest.mark.parametrize(
    ("locator", "needle"),
    [
        ("https://example.com/reference.wav", "data URLs only"),
        ("file:///etc/passwd", "data URLs only"),
        ("just text", "base64 data URL"),
        ("data:audio/wav;base64,@@@@", "not valid base64"),
        ("data:text/plain;base64,aGVsbG8=", "not audio"),
        ("data:audio/wav,notbase64", "base64"),
        ("data:audio/wav;base64,", "empty"),
        ("data:audio/wav;base64," + "aGVsbG8gd29ybGQgdGhpcyBpcyBub3QgYXVkaW8=", "not a supported audio file"),
    ],
)
def test_unusable_ref_audio_is_invalid_naming_ref_audio(locator, needle):
    with pytest.raises(InvalidRequest) as info:
        refaudio.decode_ref_audio(locator)
    assert info.value.param == "ref_audio" and needle in info.value.message


def test_too_short_or_long_ref_audio():
    with pytest.raises(InvalidRequest, match="too short"):
        refaudio.decode_ref_audio(wav_data_url(0.05))
    with pytest.raises(InvalidRequest, match="too long"):
        refaudio.decode_ref_audio(wav_data_url(61, 8000))


# --- settings and error mapping ---------------------------------------------------------------------


def test_settings_accept_the_serve_config_and_reject_nonsense(root):
    s = fake_deployment(root / "s", ("custom_voice", "base"))
    assert [m.name for m in s.models] == ["tiny-custom-voice", "tiny-base"]
    raw = {"triton_url": "x:1", "models": [{"name": "a", "variant": "custom_voice", "triton_model": "t",
                                            "artifacts_dir": str(root / "s" / "art-custom_voice")}]}
    assert Settings.from_dict(raw).triton_url == "x:1"
    assert Settings.from_dict({**raw, "checkpoints": raw["models"], "models": None} | {"models": raw["models"]})
    with pytest.raises(SettingsError, match="unknown"):
        Settings.from_dict({**raw, "typo": 1})
    with pytest.raises(SettingsError, match="variant"):
        Settings.from_dict({"models": [{**raw["models"][0], "variant": "clone"}]})
    with pytest.raises(SettingsError, match="twice"):
        Settings.from_dict({"models": [raw["models"][0], {**raw["models"][0], "triton_model": "u"}]})
    bad = {"models": [{**raw["models"][0], "variant": "base", "voice_features_model": "vf"}]}
    with pytest.raises(SettingsError, match="are custom_voice"):
        load_checkpoints(Settings.from_dict(bad))
    missing = {"models": [{**raw["models"][0], "artifacts_dir": str(root / "nowhere")}]}
    with pytest.raises(SettingsError, match="manifest"):
        load_checkpoints(Settings.from_dict(missing))
    path = root / "cfg.json"
    path.write_text(json.dumps(raw))
    assert Settings.from_file(path).models[0].name == "a"


def test_validation_errors_become_400_with_param():
    e = errors.validation_error([{"type": "less_than_equal", "loc": ("body", "items", 2, "speed"),
                                  "msg": "Input should be less than or equal to 4", "input": 5}])
    assert (e.status, e.param) == (400, "items[2].speed") and "(got 5)" in e.message
    assert errors.validation_error([{"type": "missing", "loc": ("body", "input"), "msg": "x"}]).message == (
        "Missing required parameter: 'input'")
    assert errors.validation_error([{"type": "extra_forbidden", "loc": ("body", "foo"), "msg": "x"}]).param == "foo"
    assert errors.validation_error([{"type": "json_invalid", "loc": ("body", 3), "msg": "x"}]).message.startswith(
        "Malformed JSON")
    e = errors.validation_error([{"type": "string_type", "loc": ("body", "voice", "str"), "msg": "m", "input": 1}])
    assert e.param == "voice"


def test_backend_errors_map_to_statuses():
    e = errors.from_backend("INVALID_ARG", "bad voice", "speaker", "rid")
    assert (e.status, e.param) == (400, "voice")
    assert errors.from_backend("INVALID_ARG", "clip too short", "audio", "rid").param == "ref_audio"
    e = errors.from_backend("UNAVAILABLE", "queue full", None, "rid", retry_after_s=7)
    assert e.status == 503 and e.headers == {"Retry-After": "7"}
    e = errors.from_backend("INTERNAL", "secret detail", None, "rid-1")
    assert e.status == 500 and "secret" not in e.message and "rid-1" in e.message
    assert errors.from_backend("", "weird", None, "r").status == 500


@pytest.mark.parametrize("family", ["breeze_tts_2", "cosyvoice3", "fish_speech", "gepard", "omnivoice", "voxcpm2",
                                    "voxtral_tts"])
def test_refuse_unsupported_names_the_first_field_set_and_auto_only_where_taken(family):
    """gateway.planning.refuse_unsupported, every adapter's one rule: each unsupported request field, set
    alone, is a 400 naming it; "Auto" as the language is no language for a family that takes "Auto"."""
    from gateway.planning import refuse_unsupported
    from ttscore.contract.families import RULES

    rules = RULES[family]
    values = {"language": "German", "instructions": "calm", "task_type": "Base", "x_vector_only_mode": True,
              "non_streaming_mode": False, "initial_codec_chunk_frames": 4, "ref_audio": "data:,", "ref_text": "hi",
              "word_timestamps": True}
    settable = [f for f in rules.unsupported if hasattr(SpeechFields(input="x"), f)]
    assert settable, f"{family}: no unsupported field is a request field"
    for field in settable:
        with pytest.raises(APIError) as err:
            refuse_unsupported(SpeechFields(input="x", **{field: values[field]}), rules)
        assert err.value.param == field and f"'{field}' is not supported by {rules.name}" in err.value.message
    refuse_unsupported(SpeechFields(input="x"), rules)  # nothing set: nothing refused
    if "language" in rules.unsupported:
        auto = SpeechFields(input="x", language=" auto ")
        if rules.auto_language:
            refuse_unsupported(auto, rules)
        else:
            with pytest.raises(APIError):
                refuse_unsupported(auto, rules)
