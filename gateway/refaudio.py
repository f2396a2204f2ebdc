"""`ref_audio` locators -> (float32 mono, sample rate) for Base voice cloning (no Triton, no FastAPI).

This issue accepts base64 data URLs (`data:audio/wav;base64,...`; any audio media type, or none);
http(s) URLs and `file://` URIs are answered with a 400 until the voices issue switches this to
gateway.voices.sources.load_ref_audio (which fetches them with its SSRF guard). Parsing and
decoding are the voices package's (one data-URL parser, one bounded decoder: container from magic
bytes, duration checked before and while decoding), with the voice_features model's limits, so a
clip Triton would reject fails here, naming `ref_audio`, before any work starts.
"""

from __future__ import annotations

import base64

import numpy as np

from ttscore.errors import InvalidRequest

PARAM = "ref_audio"
MIN_SECONDS = 0.1  # the voice_features model's limits (ttscore.triton_models)
MAX_SECONDS = 60.0
MAX_BYTES = 10 * 1024 * 1024  # the spec's upload limit, applied to the decoded bytes
NOT_YET = ("ref_audio URLs are not supported yet: send the audio inline as a base64 data URL "
           "(data:audio/wav;base64,...)")


def ref_audio_bytes(locator: str) -> bytes:
    """The audio file a locator carries; InvalidRequest(param='ref_audio') for anything else."""
    from .voices.sources import decode_data_url  # noqa: PLC0415

    text = locator.strip() if isinstance(locator, str) else ""
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme in ("http", "https", "file"):
        raise InvalidRequest(NOT_YET, PARAM)
    if scheme != "data":
        raise InvalidRequest("ref_audio must be a base64 data URL (data:audio/wav;base64,...)", PARAM)
    return decode_data_url(text, MAX_BYTES)


def decode_ref_audio(locator: str) -> tuple[np.ndarray, int]:
    """Locator -> (float32 mono audio, sample rate); InvalidRequest naming `ref_audio` if unusable."""
    from .voices.audio_io import decode_audio  # noqa: PLC0415  (PyAV / soundfile: only when cloning)

    return decode_audio(ref_audio_bytes(locator), max_seconds=MAX_SECONDS, min_seconds=MIN_SECONDS, param=PARAM)


def data_url(audio_bytes: bytes, mime: str = "audio/wav") -> str:
    """The inverse, for clients and tests."""
    return f"data:{mime};base64,{base64.b64encode(audio_bytes).decode('ascii')}"
