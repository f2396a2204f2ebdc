"""The ElevenLabs dialect's pure vocabulary: output formats, errors, and the character alignment built from word
timestamps (gateway.elevenlabs.wire)."""

from __future__ import annotations

import pytest

from gateway import errors
from gateway.elevenlabs import wire
from gateway.elevenlabs.wire import char_alignment
from gateway.word_timing import Word

pytestmark = pytest.mark.unit


def test_output_formats():
    assert wire.output_format("pcm_44100") == ("pcm", 44100)
    assert wire.output_format("ulaw_8000") == ("ulaw", 8000)
    assert wire.output_format(None) == ("mp3", 44100)
    assert wire.output_format("mp3_22050_32") == ("mp3", 22050)
    with pytest.raises(wire.ElevenLabsValidationError) as err:
        wire.output_format("opus_48000_64")
    assert err.value.status == 422 and err.value.body()["detail"][0]["loc"] == ["query", "output_format"]


def test_dialect_errors():
    voice = wire.dialect_error(errors.bad_request("Unknown voice 'x'", "voice"))
    assert voice.status == 404 and voice.body() == {"detail": {"status": "voice_not_found", "message": "Unknown voice 'x'"}}
    assert wire.dialect_error(errors.model_not_found("m")).body()["detail"]["status"] == "model_not_found"
    busy = wire.dialect_error(errors.unavailable("busy", 7))
    assert busy.status == 503 and busy.headers == {"Retry-After": "7"}
    assert wire.dialect_error(errors.invalid_api_key(missing=True)).body()["detail"]["status"] == "invalid_api_key"
    assert wire.dialect_error(errors.bad_request("bad", "speed")).body()["detail"]["status"] == "invalid_speed"
    assert wire.is_dialect_path("/v1/text-to-speech/v/stream") and wire.is_dialect_path("/v1/voices")
    assert not wire.is_dialect_path("/v1/audio/voices") and not wire.is_dialect_path("/v1/audio/speech")


def test_words_share_their_time_and_gaps_go_to_the_characters_between():
    text = "Hi, you"
    words = [Word("Hi,", 0.1, 0.4, 0, 3), Word("you", 0.6, 0.9, 4, 7)]
    al = char_alignment(text, words, 1.0)
    assert al.chars == list(text)
    assert al.starts[:3] == pytest.approx([0.1, 0.2, 0.3]) and al.ends[:3] == pytest.approx([0.2, 0.3, 0.4])
    assert (al.starts[3], al.ends[3]) == pytest.approx((0.4, 0.6))  # the space holds the pause
    assert al.starts[4:] == pytest.approx([0.6, 0.7, 0.8])
    assert al.ends[-1] == pytest.approx(1.0)  # the last character holds the silence after it


def test_leading_text_starts_at_zero_and_times_never_go_back():
    text = '"Go" now'
    words = [Word("Go", 0.5, 0.7, 1, 3), Word("now", 0.6, 0.65, 5, 8)]  # overlapping: clamped forward
    al = char_alignment(text, words, 0.7)
    assert al.starts[0] == 0.0 and al.ends[0] == pytest.approx(0.5)
    assert all(b >= a for a, b in zip(al.starts, al.starts[1:], strict=False))
    assert all(0.0 <= s <= e <= 0.7 for s, e in zip(al.starts, al.ends, strict=True))


def test_no_words_spreads_the_text_over_the_audio():
    al = char_alignment("ab", [], 2.0)
    assert al.starts == pytest.approx([0.0, 1.0]) and al.ends == pytest.approx([1.0, 2.0])


def test_renderings():
    al = char_alignment("ab", [Word("ab", 0.0012, 0.2507, 0, 2)], 0.3)
    ws = al.ws()
    assert ws["chars"] == ["a", "b"] and ws["charStartTimesMs"] == [1, 126]
    assert [s + d for s, d in zip(ws["charStartTimesMs"], ws["charDurationsMs"], strict=True)] == [126, 300]
    assert al.ws(offset_s=0.1)["charStartTimesMs"] == [-99, 26]
    http = al.http()
    assert http["characters"] == ["a", "b"] and http["character_end_times_seconds"] == [0.126, 0.3]


def test_alignment_is_none_without_words():
    assert wire.alignment("ab", None, 1.0) is None
    al = wire.alignment("ab", [Word("ab", 0.0, 1.0, 0, 2)], 1.0)
    assert al is not None and al.ends == pytest.approx([0.5, 1.0])
