"""word_timestamps over a fake Triton backend (issue 40): the field's rules, the words' placement (times on the
output timeline across segments and sentences, clamped, monotonic; char offsets into the original input) on every
path (whole file, SSE, WebSocket, batch), and an aligner failure ending the request. The real aligner through the
real Triton: tests/e2e_tests/test_e2e_word_timestamps.py."""

from __future__ import annotations

import base64
import io
import json
import wave

import numpy as np
import pytest
from gateway_fixtures import ALIGNER_MODEL, SAMPLE_RATE, FakeBackend, fake_app_client, fake_audio, fake_words

from gateway import encoding, sse, word_timing
from gateway.errors import APIError
from gateway.settings import Settings
from gateway.speech_fields import SpeechFields, refuse_unsupported
from ttscore.contract.families import RULES

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
WS = "/v1/audio/speech/stream"
FRAME_S = 1920 / SAMPLE_RATE


@pytest.fixture
def fake():
    return FakeBackend()


@pytest.fixture
def client(tmp_path, fake):
    with fake_app_client(tmp_path, fake, aligner_model=ALIGNER_MODEL) as c:
        yield c


def expected(text: str, seconds: float, offset_s: float = 0.0, char_offset: int = 0) -> list[tuple]:
    """The fake aligner's words of `text` over `seconds`, as the gateway must place them (written out: even
    spans, the last one's end clamped to the clip)."""
    raw = fake_words(text, seconds)
    n = len(raw["word_text"])
    return [(raw["word_text"][i].decode(), offset_s + i * seconds / n, offset_s + (i + 1) * seconds / n,
             char_offset + int(raw["char_start"][i]), char_offset + int(raw["char_end"][i])) for i in range(n)]


def as_tuples(words: list[dict]) -> list[tuple]:
    return [(w["word"], w["start"], w["end"], w["char_start"], w["char_end"]) for w in words]


def assert_words(got: list[dict], want: list[tuple]) -> None:
    assert [(w[0], w[3], w[4]) for w in as_tuples(got)] == [(w[0], w[3], w[4]) for w in want]
    np.testing.assert_allclose([w[1:3] for w in as_tuples(got)], [w[1:3] for w in want], atol=2e-6)
    for w in got:
        assert w["start_ms"] == round(w["start"] * 1000) and w["end_ms"] == round(w["end"] * 1000)


# --- pure placement --------------------------------------------------------------------------------


def test_sentence_words_are_clamped_into_the_clip_monotonic_and_offset_into_the_input():
    out = {"word_text": np.array([b"a", b"b", b"c", b"d"], dtype=np.object_),
           "word_start": np.array([-0.2, 0.5, 0.4, 1.9], np.float32),
           "word_end": np.array([0.6, 0.45, 2.5, np.nan], np.float32),
           "char_start": np.array([0, 2, 4, 6], np.int32), "char_end": np.array([1, 3, 5, 7], np.int32)}
    words = word_timing.sentence_words(out, duration=2.0, char_offset=10)
    assert [(w.word, w.char_start, w.char_end) for w in words] == [("a", 10, 11), ("b", 12, 13), ("c", 14, 15),
                                                                   ("d", 16, 17)]
    np.testing.assert_allclose([(w.start, w.end) for w in words],
                               [(0.0, 0.6), (0.6, 0.6), (0.6, 2.0), (2.0, 2.0)], atol=1e-6)
    with pytest.raises(ValueError, match="word_end"):
        word_timing.sentence_words({k: v for k, v in out.items() if k != "word_end"}, 2.0, 0)


def test_text_offsets_find_each_segment_in_the_original_input_in_order():
    text = "  Hi there.\n\nHi there. And more  "
    assert word_timing.text_offsets(text, ["Hi there.", "Hi there.", "And more"]) == (2, 13, 23)
    assert word_timing.text_offsets("abc", ["zz", "c"]) == (0, 2)  # a rewritten segment starts where the last ended


def test_times_shift_and_follow_speed():
    w = (word_timing.Word("a", 1.0, 2.0, 0, 1),)
    assert word_timing.shifted(w, 0.5)[0].start == 1.5
    assert word_timing.at_speed(w, 2.0)[0].end == 1.0


def test_with_word_timestamps_every_sentence_is_a_segment_and_a_long_one_is_cut():
    from gateway.longtext import split_sentences

    assert split_sentences("  One here.\n\nTwo, there! Three? ", 600) == ["One here.", "Two, there!", "Three?"]
    long = "alpha beta gamma, delta epsilon zeta, eta theta iota kappa. Short one."
    parts = split_sentences(long, 25)
    assert parts[-1] == "Short one." and all(len(p) <= 25 for p in parts) and " ".join(parts) == long


# --- the field's rules -------------------------------------------------------------------------------


def test_without_an_aligner_word_timestamps_is_a_400_saying_how_to_enable_it(tmp_path, fake):
    with fake_app_client(tmp_path, fake) as c:
        r = c.post(SPEECH, json={"input": "Hello there.", "voice": "vivian", "word_timestamps": True})
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["param"] == "word_timestamps" and "serve --aligner" in err["message"]
        ok = c.post(SPEECH, json={"input": "Hello there.", "voice": "vivian", "word_timestamps": False})
        assert ok.status_code == 200 and ok.headers["content-type"].startswith("audio/")


def test_a_non_boolean_word_timestamps_is_a_400_naming_it(client):
    for value in ("true", 1, 0.0, [True]):
        r = client.post(SPEECH, json={"input": "Hello.", "voice": "vivian", "word_timestamps": value})
        assert r.status_code == 400, value
        assert r.json()["error"]["param"] == "word_timestamps"


def test_gepard_refuses_word_timestamps_naming_it_and_takes_false():
    rules = RULES["gepard"]
    with pytest.raises(APIError) as err:
        refuse_unsupported(SpeechFields(input="x", word_timestamps=True), rules)
    assert err.value.status == 400 and err.value.param == "word_timestamps"
    refuse_unsupported(SpeechFields(input="x", word_timestamps=False), rules)
    assert [f for f, r in RULES.items() if "word_timestamps" in r.unsupported] == ["gepard"]


def test_raw_audio_streams_have_no_place_for_words(client):
    r = client.post(SPEECH, json={"input": "Hello.", "voice": "vivian", "stream_format": "audio",
                                  "response_format": "pcm", "word_timestamps": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "word_timestamps"


def test_the_aligner_is_a_needed_model_and_reaches_the_gateway_from_the_plan(tmp_path):
    from gateway_fixtures import fake_deployment

    from triton_tts.serve import gateway_config

    settings = fake_deployment(tmp_path, ("custom_voice",), aligner_model=ALIGNER_MODEL)
    assert ALIGNER_MODEL in settings.triton_models()
    assert gateway_config([], "h:1", {"vocoders": [], "aligner_model": ALIGNER_MODEL})["aligner_model"] == ALIGNER_MODEL
    assert "aligner_model" not in gateway_config([], "h:1", {"vocoders": [], "aligner_model": None})
    with pytest.raises(Exception, match="aligner_model"):
        Settings.from_dict({"triton_url": "h:1", "models": settings.model_dump()["models"], "aligner_model": 3})


# --- whole file, long text, SSE, batch ----------------------------------------------------------------


def wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data)) as w:
        return w.getnframes() / w.getframerate()


def test_whole_file_is_json_with_the_audio_and_its_words(client, fake):
    text = "Hello there, my runaway friend!"  # (FakeBackend: ends at its length limit, "length")
    plain = client.post(SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 3, "seed": 1})
    r = client.post(SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 3, "seed": 1, "word_timestamps": True})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.headers["x-finish-reason"] == plain.headers["x-finish-reason"] == "length"
    body = r.json()
    audio = base64.b64decode(body["audio"])
    assert audio == plain.content and body["media_type"] == "audio/wav" and body["usage"]["total_tokens"] > 0
    seconds = wav_seconds(audio)
    assert_words(body["timestamps"], expected(text, seconds))
    assert [text[w["char_start"]:w["char_end"]] for w in body["timestamps"]] == text.split()
    (sent_text, sent_audio, rate, _), = fake.aligner_calls
    assert sent_text == text and rate == SAMPLE_RATE
    # exactly the audio the client got (its 16-bit samples), not the model's floats
    np.testing.assert_array_equal(sent_audio, encoding.parse_wav(audio)[1] / np.float32(32768))
    assert sent_audio.dtype == np.float32 and not np.array_equal(sent_audio, fake_audio(3))
    m = client.get("/metrics").text
    assert "tts_alignment_seconds_count 1.0" in m  # the plain request aligned nothing


def test_speed_puts_the_words_on_the_played_timeline(client):
    text = "one two"
    r = client.post(SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 3, "speed": 2.0, "word_timestamps": True})
    assert r.status_code == 200
    assert_words(r.json()["timestamps"], [(w, s / 2, e / 2, a, b) for w, s, e, a, b in expected(text, 3 * FRAME_S)])


def long_text() -> tuple[str, list[str]]:
    first = "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma."
    second = "  Tau upsilon phi chi psi omega, and the alphabet is done; it ends here at last, truly, now."
    return f"{first}\n\n{second}  ", [first, second.strip()]


def test_each_sentence_is_a_generation_whose_words_follow_on_the_timeline_and_index_the_input(tmp_path, fake):
    text, segments = long_text()
    with fake_app_client(tmp_path, fake, aligner_model=ALIGNER_MODEL) as c:
        r = c.post(SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 3, "word_timestamps": True})
    assert r.status_code == 200
    assert [call[0] for call in fake.aligner_calls] == segments
    seg_s = 3 * FRAME_S
    want = [*expected(segments[0], seg_s, 0.0, text.index(segments[0])),
            *expected(segments[1], seg_s, seg_s, text.index(segments[1]))]
    words = r.json()["timestamps"]
    assert_words(words, want)
    assert [text[w["char_start"]:w["char_end"]] for w in words] == text.split()
    ends = [t for w in words for t in (w["start"], w["end"])]
    assert ends == sorted(ends) and ends[-1] <= wav_seconds(base64.b64decode(r.json()["audio"])) + 1e-6


def test_sse_sends_each_sentences_words_after_its_audio_before_the_next_sentences(tmp_path, fake):
    text, segments = long_text()
    with fake_app_client(tmp_path, fake, aligner_model=ALIGNER_MODEL) as c:
        r = c.post(SPEECH, json={"input": text, "voice": "vivian", "max_new_tokens": 3, "stream": True, "response_format": "pcm",
                                 "word_timestamps": True})
    events = sse.parse(r.content)
    kinds = [name for name, _ in events]
    assert kinds.count(sse.TIMESTAMPS) == 2 and kinds[-1] == sse.DONE
    assert events[-1][1]["finish_reason"] == "stop"
    first = kinds.index(sse.TIMESTAMPS)
    before = b"".join(base64.b64decode(d["audio"]) for n, d in events[:first] if n == sse.DELTA)
    seg_s = 3 * FRAME_S
    assert len(before) == 2 * round(seg_s * SAMPLE_RATE)  # the first segment's audio, all of it, and no more
    assert sse.DELTA in kinds[first + 1:kinds.index(sse.TIMESTAMPS, first + 1)]
    assert_words(events[first][1]["timestamps"], expected(segments[0], seg_s, 0.0, text.index(segments[0])))
    second = events[kinds.index(sse.TIMESTAMPS, first + 1)][1]["timestamps"]
    assert_words(second, expected(segments[1], seg_s, seg_s, text.index(segments[1])))


def test_an_aligner_failure_ends_the_request_with_an_error(client, fake):
    fake.aligner_error = "INTERNAL"
    r = client.post(SPEECH, json={"input": "Hello there.", "voice": "vivian", "stream": True,
                                  "response_format": "pcm", "word_timestamps": True})
    events = sse.parse(r.content)
    assert events[0][0] == sse.DELTA and events[-1][0] == sse.ERROR
    assert events[-1][1]["error"]["type"] == "server_error"
    whole = client.post(SPEECH, json={"input": "Hello there.", "voice": "vivian", "word_timestamps": True})
    assert whole.status_code >= 500
    fake.aligner_error = None
    assert client.post(SPEECH, json={"input": "Hello there.", "voice": "vivian", "word_timestamps": True}).status_code == 200


def test_batch_items_carry_their_words(client):
    r = client.post("/v1/audio/speech/batch", json={"voice": "vivian", "max_new_tokens": 3, "word_timestamps": True,
                                                    "items": [{"input": "one two"}, {"input": "three",
                                                                                     "word_timestamps": False}]})
    results = r.json()["results"]
    assert_words(results[0]["timestamps"], expected("one two", 3 * FRAME_S))
    assert "timestamps" not in results[1]


# --- WebSocket ----------------------------------------------------------------------------------------


def test_websocket_sends_each_sentences_words_between_its_audio_and_audio_done(client):
    with client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"type": "session.config", "voice": "vivian", "max_new_tokens": 3,
                                 "split_granularity": "sentence", "stream_audio": True, "response_format": "pcm",
                                 "word_timestamps": True}))
        ws.send_text(json.dumps({"type": "input.text", "text": "First one here. Second, right after."}))
        ws.send_text(json.dumps({"type": "input.done"}))
        messages = []
        while True:
            m = ws.receive()
            item = json.loads(m["text"]) if m.get("text") is not None else m["bytes"]
            messages.append(item)
            if isinstance(item, dict) and item["type"] == "session.done":
                break
    kinds = ["bytes" if isinstance(m, bytes) else m["type"] for m in messages]
    assert kinds.count("audio.chunk") == 2
    for i, sentence in enumerate(["First one here.", "Second, right after."]):
        at = [j for j, m in enumerate(messages) if isinstance(m, dict) and m["type"] == "audio.chunk"][i]
        chunk = messages[at]
        assert kinds[at - 1] == "bytes" and kinds[at + 1] == "audio.done"
        assert chunk["sentence_index"] == i and chunk["audio_b64"] == ""
        assert_words(chunk["timestamps"], expected(sentence, 3 * FRAME_S, i * 3 * FRAME_S))


def test_websocket_words_after_a_sentence_that_failed_part_way_count_its_audio(client):
    with client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"type": "session.config", "voice": "vivian", "max_new_tokens": 5,
                                 "split_granularity": "sentence", "stream_audio": True, "response_format": "pcm",
                                 "word_timestamps": True}))
        ws.send_text(json.dumps({"type": "input.text", "text": "fail-midstream. Second one here."}))
        ws.send_text(json.dumps({"type": "input.done"}))
        messages = []
        while not (messages and isinstance(messages[-1], dict) and messages[-1]["type"] == "session.done"):
            m = ws.receive()
            messages.append(json.loads(m["text"]) if m.get("text") is not None else m["bytes"])
    dones = [m for m in messages if isinstance(m, dict) and m["type"] == "audio.done"]
    assert [d["error"] for d in dones] == [True, False]
    first_audio = dones[0]["total_bytes"] // 2 / SAMPLE_RATE  # pcm16: what the client got of the failed one
    assert first_audio > 0
    (chunk,) = [m for m in messages if isinstance(m, dict) and m["type"] == "audio.chunk"]
    assert chunk["sentence_index"] == 1
    assert_words(chunk["timestamps"], expected("Second one here.", 5 * FRAME_S, first_audio))


def test_websocket_whole_clip_requests_send_their_words_after_the_clip(client):
    text = "First one here. Second, right after."
    with client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"type": "session.config", "voice": "vivian", "max_new_tokens": 3,
                                 "word_timestamps": True}))  # split none, one wav per request
        ws.send_text(json.dumps({"type": "input.text", "text": text}))
        ws.send_text(json.dumps({"type": "input.done"}))
        messages = []
        while not (messages and isinstance(messages[-1], dict) and messages[-1]["type"] == "session.done"):
            m = ws.receive()
            messages.append(json.loads(m["text"]) if m.get("text") is not None else m["bytes"])
    kinds = ["bytes" if isinstance(m, bytes) else m["type"] for m in messages]
    assert kinds == ["audio.start", "bytes", "audio.chunk", "audio.done", "session.done"]
    first, second = "First one here.", "Second, right after."  # one generation a sentence: offsets into the request
    assert_words(messages[2]["timestamps"], [*expected(first, 3 * FRAME_S), *expected(second, 3 * FRAME_S, 3 * FRAME_S,
                                                                                       text.index(second))])

