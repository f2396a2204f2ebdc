"""`ref_audio` locators -> (float32 mono, sample rate) for Base voice cloning (no Triton, no FastAPI).

`resolve_ref_audio` accepts what the spec lists: a base64 data URL, an http(s) URL (fetched by
gateway.voices.sources with its SSRF guard: public addresses only unless allowed, bounded size,
time and redirects) and a `file://` URI under the configured allowed directory. Decoding is the
voices package's bounded decoder (container from magic bytes, duration checked from the header
before decoding and again while decoding) with the voice_features model's limits, so a clip Triton
would reject fails here, naming `ref_audio`, before any work starts.

`decode_ref_audio` is the synchronous data-URL-only subset (tests, tools).
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.families import ref_audio_bounds
from ttscore.contract.rules import RefAudioBounds

from .voices.sources import RefAudioSettings

PARAM = "ref_audio"
# The family's limits (FamilyRules.ref_audio) when it is known, else the widest of the served families'.
BOUNDS = ref_audio_bounds()
MIN_SECONDS = BOUNDS.min_seconds
MAX_SECONDS = BOUNDS.max_seconds
MAX_BYTES = 10 * 1024 * 1024  # the spec's upload limit, applied to the decoded bytes
DATA_ONLY = ("decode_ref_audio takes base64 data URLs only (data:audio/wav;base64,...); "
             "URLs are fetched by resolve_ref_audio")


def ref_audio_bytes(locator: str) -> bytes:
    """The audio file a data URL carries; InvalidRequest(param='ref_audio') for anything else."""
    from .voices.sources import decode_data_url

    text = locator.strip() if isinstance(locator, str) else ""
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme in ("http", "https", "file"):
        raise InvalidRequest(DATA_ONLY, PARAM)
    if scheme != "data":
        raise InvalidRequest("ref_audio must be a base64 data URL (data:audio/wav;base64,...)", PARAM)
    return decode_data_url(text, MAX_BYTES)


def decode_bytes(data: bytes, bounds: RefAudioBounds = BOUNDS) -> tuple[np.ndarray, int]:
    """An audio file's bytes -> (float32 mono, sample rate), within a family's reference limits."""
    from .voices.audio_io import decode_audio  # PyAV / soundfile: only when cloning

    return decode_audio(data, max_seconds=bounds.max_seconds, min_seconds=bounds.min_seconds, param=PARAM,
                        min_rate=bounds.min_rate, max_rate=bounds.max_rate)


def decode_ref_audio(locator: str) -> tuple[np.ndarray, int]:
    """Data URL -> (float32 mono audio, sample rate); InvalidRequest naming `ref_audio` if unusable."""
    return decode_bytes(ref_audio_bytes(locator))


async def resolve_ref_audio(locator: str, settings: RefAudioSettings, bounds: RefAudioBounds = BOUNDS
                            ) -> tuple[np.ndarray, int]:
    """Any allowed locator (data:, http(s):, file:) -> (float32 mono audio, sample rate)."""
    from .voices.sources import load_ref_audio

    data = await load_ref_audio(locator, settings)
    return await asyncio.to_thread(decode_bytes, data, bounds)


def data_url(audio_bytes: bytes, mime: str = "audio/wav") -> str:
    """The inverse, for clients and tests."""
    return f"data:{mime};base64,{base64.b64encode(audio_bytes).decode('ascii')}"
