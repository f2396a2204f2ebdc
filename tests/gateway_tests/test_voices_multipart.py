"""Streaming multipart parsing: limits enforced while reading, before the rest of the body arrives."""

from __future__ import annotations

import asyncio

import pytest
from voices_audio import wav

from gateway.voices.errors import UploadTooLarge
from gateway.voices.multipart import check_content_length, parse_multipart_form, read_limited
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit

BOUNDARY = "----testboundary7MA4YWxkTrZu0gW"
CTYPE = f"multipart/form-data; boundary={BOUNDARY}"


def body(fields: dict[str, str], files: dict[str, tuple[str, str, bytes]]) -> bytes:
    out = bytearray()
    for name, value in fields.items():
        out += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode() + b"\r\n"
    for name, (filename, ctype, data) in files.items():
        out += (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                f"Content-Type: {ctype}\r\n\r\n").encode()
        out += data + b"\r\n"
    out += f"--{BOUNDARY}--\r\n".encode()
    return bytes(out)


class Stream:
    """An async body that records how much of itself was consumed."""

    def __init__(self, data: bytes, chunk: int = 4096) -> None:
        self.data = data
        self.chunk = chunk
        self.sent = 0

    async def __aiter__(self):
        for i in range(0, len(self.data), self.chunk):
            piece = self.data[i : i + self.chunk]
            self.sent += len(piece)
            yield piece


def parse(data: bytes, **kw):
    return asyncio.run(parse_multipart_form(kw.pop("content_type", CTYPE), Stream(data, kw.pop("chunk", 4096)), **kw))


def test_parses_the_spec_upload_form():
    audio = wav()
    form = parse(body(
        {"consent": "user_consent_id", "name": "custom_voice_1", "ref_text": "Caf\u00e9 transcript.",
         "speaker_description": "warm narrator"},
        {"audio_sample": ("voice_sample.wav", "audio/wav", audio)},
    ), chunk=1000)
    assert form.field("name") == "custom_voice_1" and form.field("ref_text") == "Caf\u00e9 transcript."
    f = form.file("audio_sample")
    assert f is not None and f.data == audio and f.filename == "voice_sample.wav" and f.content_type == "audio/wav"
    assert form.field("missing") is None and form.file("missing") is None


def test_oversized_file_is_rejected_before_the_body_is_read():
    big = b"\x00" * (3 * 1024 * 1024)
    data = body({"name": "v"}, {"audio_sample": ("a.wav", "audio/wav", big)})
    stream = Stream(data, 64 * 1024)
    with pytest.raises(UploadTooLarge) as e:
        asyncio.run(parse_multipart_form(CTYPE, stream, max_file_bytes=1024 * 1024))
    assert e.value.param == "audio_sample" and "exceeds maximum limit of 1MB" in e.value.message
    assert stream.sent < 1024 * 1024 + 2 * 64 * 1024  # stopped right after the limit
    # The whole body is bounded too: junk outside any part cannot stream forever.
    junk = Stream(b"\r\n" * (1024 * 1024) + body({"name": "v"}, {}), 64 * 1024)
    with pytest.raises(UploadTooLarge) as e:
        asyncio.run(parse_multipart_form(CTYPE, junk, max_file_bytes=1024 * 1024, max_parts=2, max_field_bytes=10))
    assert e.value.param is None and junk.sent < 2 * 1024 * 1024


def test_content_length_is_checked_before_reading():
    data = body({}, {"audio_sample": ("a.wav", "audio/wav", b"x" * 100)})
    stream = Stream(data)
    with pytest.raises(UploadTooLarge):
        asyncio.run(parse_multipart_form(CTYPE, stream, max_file_bytes=10, max_field_bytes=10, max_parts=1,
                                         content_length=str(10**9)))
    assert stream.sent == 0
    with pytest.raises(InvalidRequest):
        check_content_length("abc", 10)
    check_content_length(None, 10)


def test_a_file_sent_as_a_plain_field_counts_as_the_file():
    audio = wav()
    data = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="audio_sample"\r\n\r\n'.encode() + audio
            + f"\r\n--{BOUNDARY}--\r\n".encode())
    form = parse(data, file_limits={"audio_sample": 10 * 1024 * 1024}, max_field_bytes=100)
    f = form.file("audio_sample")
    assert f is not None and f.data == audio and f.filename is None and f.content_type is None


def test_field_limits_and_part_count():
    with pytest.raises(InvalidRequest, match="too long") as e:
        parse(body({"ref_text": "x" * 200}, {}), max_field_bytes=100)
    assert e.value.param == "ref_text"
    with pytest.raises(InvalidRequest, match="Too many form parts"):
        parse(body({f"f{i}": "v" for i in range(5)}, {}), max_parts=4)


@pytest.mark.parametrize(
    ("content_type", "data", "fragment"),
    [
        ("application/json", b"{}", "multipart/form-data"),
        ("multipart/form-data", b"", "boundary"),
        (CTYPE, body({"name": "v"}, {})[:-10], "Incomplete"),
        (CTYPE, f"--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{BOUNDARY}--\r\n".encode(), "name"),
        (CTYPE, body({"name": "v"}, {}).replace(b"v\r\n", b"\xff\xfe\r\n"), "UTF-8"),
    ],
)
def test_malformed_bodies_are_400(content_type, data, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        parse(data, content_type=content_type)


def test_read_limited():
    async def chunks(n):
        for _ in range(n):
            yield b"x" * 10

    assert asyncio.run(read_limited(chunks(3), 30)) == b"x" * 30
    with pytest.raises(UploadTooLarge):
        asyncio.run(read_limited(chunks(4), 30))
