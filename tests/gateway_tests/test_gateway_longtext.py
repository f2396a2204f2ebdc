"""Long text (gateway.longtext): splitting into segments, ordered concurrent generation, and the Speech
API over the fake backend (one stream in segment order, one usage total, one request id, a clear 400)."""

from __future__ import annotations

import asyncio
import base64
import json
import re

import numpy as np
import pytest
from gateway_fixtures import FakeBackend, fake_app_client, fake_audio

from gateway import encoding
from gateway.longtext import ordered, segment_seed, split_segments
from ttscore.contract.rules import SEED_MAX

SPEECH = "/v1/audio/speech"

ARTICLE = (
    "Dr. Smith measured 3.14 litres at 9 a.m. on the first day. Nobody believed him.\n\n"
    "The second paragraph is longer: it talks about the weather, the river, the bridge, and the people "
    "who crossed it every morning on their way to work; some of them waved. Others did not!\n\n"
    "A third paragraph asks a question? It answers it at once. \"Yes,\" she said. Then it ends."
)


def words(text: str) -> list[str]:
    return text.split()


# --- splitting --------------------------------------------------------------------------------------


@pytest.mark.unit
def test_short_input_is_one_segment_exactly_as_sent():
    assert split_segments("  Hello there.  ", 600) == ["  Hello there.  "]


@pytest.mark.unit
@pytest.mark.parametrize("limit", [40, 60, 100, 200, 1000])
def test_segments_are_ordered_slices_within_the_limit(limit):
    segments = split_segments(ARTICLE, limit)
    assert all(0 < len(s) <= limit for s in segments)
    assert words(" ".join(segments)) == words(ARTICLE)  # nothing lost, nothing reordered
    at = 0
    for s in segments:  # each is a contiguous slice of the input, in order
        found = ARTICLE.find(s, at)
        assert found >= at, s
        at = found + len(s)
    if limit >= 200:  # room for whole sentences: every cut is at a sentence end, never after Dr. or a.m.
        assert all(re.search(r"[.!?][\"']?$", s) for s in segments), segments
        assert not any(s.endswith(("Dr.", "a.m.")) for s in segments)


@pytest.mark.unit
def test_paragraphs_pack_greedily():
    segments = split_segments(ARTICLE, 200)
    assert segments[0] == "Dr. Smith measured 3.14 litres at 9 a.m. on the first day. Nobody believed him."
    assert len(segments) == 3


@pytest.mark.unit
def test_fallbacks_clause_then_words_then_characters():
    clause = "one, two, three, four, five, six, seven, eight, nine, ten"
    assert split_segments(clause, 20) == ["one, two, three,", "four, five, six,", "seven, eight, nine,", "ten"]
    plain = "alpha beta gamma delta epsilon zeta eta theta"
    assert split_segments(plain, 12) == ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
    assert split_segments("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    cjk = "今天天气很好。我们去公园散步吧！" * 3
    segments = split_segments(cjk, 20)
    assert "".join(segments) == cjk and all(s.endswith(("。", "！")) for s in segments)


@pytest.mark.unit
def test_segment_seeds():
    assert [segment_seed(7, i, SEED_MAX) for i in range(3)] == [7, 8, 9]
    assert segment_seed(SEED_MAX, 1, SEED_MAX) == 0
    assert segment_seed(None, 4, SEED_MAX) is None
    assert segment_seed(9, 2, 10) == 0  # within the family's own range


# --- ordered generation ---------------------------------------------------------------------------------


def _maker(index: int, delays: list[float], log: list[str]):
    async def gen():
        log.append(f"start {index}")
        try:
            for k in range(3):
                await asyncio.sleep(delays[index])
                yield (index, k)
        finally:
            log.append(f"end {index}")
    return gen


@pytest.mark.unit
def test_ordered_keeps_segment_order_and_runs_ahead():
    async def run():
        log: list[str] = []
        delays = [0.03, 0.0, 0.0, 0.01]  # later segments finish before the first one
        makers = [_maker(i, delays, log) for i in range(4)]
        items = [x async for x in ordered(makers, lookahead=2)]
        return items, log

    items, log = asyncio.run(run())
    assert items == [(i, k) for i in range(4) for k in range(3)]
    # segment 1 ran while segment 0 was still producing; segment 2 waited for segment 0 to be handed on
    assert log.index("start 1") < log.index("end 0") < log.index("start 2")


@pytest.mark.unit
def test_ordered_lookahead_one_is_sequential():
    async def run():
        log: list[str] = []
        items = [x async for x in ordered([_maker(i, [0.0] * 3, log) for i in range(3)], lookahead=1)]
        return items, log

    items, log = asyncio.run(run())
    assert items == [(i, k) for i in range(3) for k in range(3)]
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]


@pytest.mark.unit
def test_ordered_raises_a_failure_in_turn_and_cancels_the_rest_when_closed():
    class Boom(Exception):
        pass

    async def run():
        log: list[str] = []

        def failing():
            async def gen():
                log.append("start 1")
                raise Boom()
                yield  # pragma: no cover
            return gen

        makers = [_maker(0, [0.01], log), failing(), _maker(2, [0.0, 0.0, 1.0], log)]
        got = []
        with pytest.raises(Boom):
            async for x in ordered(makers, lookahead=3):
                got.append(x)
        assert got == [(0, 0), (0, 1), (0, 2)]  # segment 0's audio first, then the failure
        assert "end 2" in log  # segment 2 (sleeping 1 s) was cancelled, not waited for

        stream = ordered([_maker(i, [0.0, 0.5], log) for i in range(2)], lookahead=2)
        assert await stream.__anext__() == (0, 0)
        await stream.aclose()
        assert log[-2:] in (["end 0", "end 1"], ["end 1", "end 0"])

    asyncio.run(run())


# --- through the Speech API (fake backend) ------------------------------------------------------------


@pytest.fixture
def fake():
    return FakeBackend()


def client_of(tmp_path, fake, **settings):
    return fake_app_client(tmp_path, fake, **settings)


def body(**kw):
    return {"input": ARTICLE, "voice": "vivian", "max_new_tokens": 5, "seed": 11, **kw}


@pytest.mark.gateway
def test_long_input_streams_its_segments_in_order_with_one_usage_and_one_id(tmp_path, fake):
    segments = split_segments(ARTICLE, 100)
    assert len(segments) >= 3
    with client_of(tmp_path, fake, segment_chars=100) as c:
        r = c.post(SPEECH, json=body(response_format="pcm", stream_format="audio"),
                   headers={"X-Request-Id": "long-1"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "long-1"
        pcm = np.frombuffer(r.content, np.int16)
        # each segment is a generation of its own text with seed 11 + i, handed on in order
        assert [c.fields["text"] for c in fake.calls] == segments
        assert [c.fields["seed"] for c in fake.calls] == [11 + i for i in range(len(segments))]
        assert [c.request_id for c in fake.calls] == [f"long-1-s{i}" for i in range(len(segments))]
        want = np.concatenate([fake_audio(5) for _ in segments])
        assert np.array_equal(pcm, encoding.to_int16(want))

        r = c.post(SPEECH, json=body())  # whole clip: one usage total in the headers
        text_tokens = sum(len(s.split()) for s in segments)
        assert r.headers["x-vllm-omni-input-text-tokens"] == str(text_tokens)
        assert r.headers["x-vllm-omni-output-tokens"] == str(5 * len(segments))

        r = c.post(SPEECH, json=body(stream=True, response_format="pcm"))
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
        assert np.array_equal(np.frombuffer(audio, np.int16), encoding.to_int16(want))
        (done,) = [e for e in events if e["type"] == "speech.audio.done"]
        assert done["usage"]["output_tokens"] == 5 * len(segments)
        assert done["usage"]["input_token_details"]["text_tokens"] == text_tokens


@pytest.mark.gateway
def test_short_input_is_one_generation_with_the_request_id(tmp_path, fake):
    with client_of(tmp_path, fake) as c:
        r = c.post(SPEECH, json=body(input="Hello there."), headers={"X-Request-Id": "short-1"})
        assert r.status_code == 200
        assert [(c.request_id, c.fields["seed"]) for c in fake.calls] == [("short-1", 11)]


@pytest.mark.gateway
def test_a_reference_is_processed_once_for_every_segment(tmp_path, fake):
    from gateway import refaudio

    ref = refaudio.data_url(encoding.encode(fake_audio(5), 24000, "wav"))
    with client_of(tmp_path, fake, segment_chars=100) as c:
        r = c.post(SPEECH, json=body(voice=None, ref_audio=ref, ref_text="Transcript."))
        assert r.status_code == 200, r.text
    assert len(fake.feature_calls) == 1 and len(fake.calls) == len(split_segments(ARTICLE, 100)) > 1
    assert all(c.fields["ref_codes"] is not None for c in fake.calls)


@pytest.mark.gateway
def test_input_limit_is_a_clear_400(tmp_path, fake):
    with client_of(tmp_path, fake, max_input_chars=500) as c:
        r = c.post(SPEECH, json=body(input="a " * 251))
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["param"] == "input" and "502 characters, the maximum is 500" in error["message"]
        assert not fake.calls
