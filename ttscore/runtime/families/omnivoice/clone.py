"""Cloning from audio: a reference clip -> its codes [8, T] through the exported codec_encoder graph,
after the reference's own preprocessing (omnivoice==0.2.1 `create_voice_clone_prompt` with
`preprocess_prompt=True`, its default), in numpy:

1. mono (channels averaged), then resampled to 24 kHz with the reference's resampler
   (torchaudio.functional.resample's defaults: ttscore.runtime.sinc_resample);
2. a clip quieter than RMS 0.1 is scaled up to RMS 0.1 (silent clips stay as they are);
3. silence removal as its pydub calls do it (`remove_silence(mid_sil=200, lead_sil=100,
   trail_sil=200)`): the clip as 16-bit samples, every silence of 200 ms or more under -50 dBFS
   (searched every 10 ms) cut down to at most 200 ms kept on each side (`split_on_silence`), then
   the leading silence (10 ms chunks under -50 dBFS) trimmed to 100 ms and the trailing one to
   200 ms; the result is those 16-bit samples as float32 (so the clip is quantized to 16 bits even
   when nothing is cut, as in the reference);
4. cut to a whole number of codec frames (the last partial frame dropped), then encoded.

Not done (documented decisions): the reference trims a clip longer than 20 s at its largest silence
only when it has no transcript and must transcribe the clip itself with Whisper, which this project
does not run; `codes` never trims (the contract's RefAudioBounds cap a clip at 60 s). Rates whose
torchaudio kernel would be enormous (a reduced ratio like 44101:24000) are resampled with
ttscore.runtime.audio.resample (soxr) instead. The transcript's own rule (`add_punctuation`) is
ttscore.contract.omnivoice.text.clone_ref_text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import omnivoice as contract
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime import silence
from ttscore.runtime.onnx import OnnxGraph, open_graph

PARAM = "ref_audio"
# remove_silence's arguments in create_voice_clone_prompt, and split_on_silence's / the edge trim's.
MID_SILENCE_MS = 200
LEAD_SILENCE_MS = 100
TRAIL_SILENCE_MS = 200
SILENCE_DBFS = -50.0
SEEK_MS = 10  # split_on_silence's seek_step and detect_leading_silence's chunk_size
MIN_RMS = 0.1


def to_24k(audio: NDArray[np.float32], sample_rate: int) -> NDArray[np.float32]:
    from ttscore.runtime import sinc_resample as sinc

    rate = int(sample_rate)
    if rate == contract.SAMPLE_RATE:
        return audio
    if sinc.kernel_taps(rate, contract.SAMPLE_RATE) <= sinc.MAX_TAPS:
        return sinc.resample(audio, rate, contract.SAMPLE_RATE)
    from ttscore.runtime.audio import resample

    return np.asarray(resample(audio, rate, contract.SAMPLE_RATE), np.float32)


def normalize_rms(audio: NDArray[np.float32]) -> NDArray[np.float32]:
    rms = float(np.sqrt(np.mean(audio**2)))
    if 0 < rms < MIN_RMS:
        return np.asarray(audio * MIN_RMS / rms, np.float32)
    return audio


# --- silence removal (pydub's, ttscore.runtime.silence; times in milliseconds) ---------------------------
def _trim_edges(samples: NDArray[np.int16], rate: int, lead: int, trail: int, thresh_db: float) -> NDArray[np.int16]:
    """omnivoice.utils.audio.remove_silence_edges."""
    pcm = silence.Pcm(samples, rate)
    start = max(0, silence.leading_silence(pcm, thresh_db, SEEK_MS) - lead)
    pcm = silence.Pcm(pcm.slice(start, pcm.ms())[::-1].copy(), rate)
    start = max(0, silence.leading_silence(pcm, thresh_db, SEEK_MS) - trail)
    return pcm.slice(start, pcm.ms())[::-1].copy()


def remove_silence(audio: NDArray[np.float32], rate: int = contract.SAMPLE_RATE) -> NDArray[np.float32]:
    """omnivoice.utils.audio.remove_silence(audio, rate, mid_sil=200, lead_sil=100, trail_sil=200)."""
    pcm16 = (np.asarray(audio, np.float32) * np.float32(32768.0)).clip(-32768, 32767).astype(np.int16)
    joined = silence.split_on_silence(silence.Pcm(pcm16, rate), MID_SILENCE_MS, SILENCE_DBFS, MID_SILENCE_MS, SEEK_MS)
    trimmed = _trim_edges(joined, rate, LEAD_SILENCE_MS, TRAIL_SILENCE_MS, SILENCE_DBFS)
    return trimmed.astype(np.float32) / np.float32(32768.0)


def preprocess(audio: NDArray[Any], sample_rate: int) -> NDArray[np.float32]:
    """A reference clip as the reference encodes it: 24 kHz mono float32, a whole number of frames."""
    from ttscore.runtime.audio import check_reference, to_mono

    mono = to_mono(audio)  # 1-D as it is, [samples, channels] averaged over the channels
    if mono.ndim != 1:
        raise InvalidRequest(f"reference audio must be mono samples or [samples, channels], got shape {mono.shape}",
                             PARAM)
    wav = check_reference(mono, int(sample_rate), PARAM, bounds=contract.RULES.ref_audio)
    wav = normalize_rms(to_24k(wav, int(sample_rate)))
    wav = remove_silence(wav)
    if wav.size == 0:
        raise InvalidRequest("reference audio is empty after silence removal (all of it is under -50 dBFS)", PARAM)
    keep = wav.size - wav.size % contract.HOP
    if keep == 0:
        raise InvalidRequest(f"reference audio is shorter than one codec frame ({1000 * contract.HOP // contract.SAMPLE_RATE}"
                             " ms) after silence removal", PARAM)
    return np.ascontiguousarray(wav[:keep], dtype=np.float32)


class ReferenceEncoder:
    """An OmniVoice export's codec_encoder graph: reference clip -> codes [8, T]. An export without
    one (its checkpoint's audio tokenizer had only the decoder side) loads; `codes` then refuses."""

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None) -> None:
        name = contract.CODEC_ENCODER.name
        self.graph: OnnxGraph | None = (open_graph(Path(artifacts), manifest, name, threads)
                                        if name in manifest.graphs else None)

    @property
    def available(self) -> bool:
        return self.graph is not None

    def codes(self, audio: NDArray[np.float32], sample_rate: int) -> NDArray[np.int64]:
        """Reference audio (mono, or [samples, channels]; any rate in the contract's bounds) -> codes
        [8, T] int64, T = the preprocessed clip's whole frames. Raises InvalidRequest(param="ref_audio")."""
        if self.graph is None:
            raise InvalidRequest(
                f"cloning from reference audio needs the codec encoder, and this {contract.RULES.name} export has "
                "none (its checkpoint's audio_tokenizer/ has only the decoder side): export a checkpoint whose audio "
                "tokenizer includes the encoder, or clone from precomputed codes", PARAM)
        wav = preprocess(audio, sample_rate)
        codes = self.graph.run({"audio": wav})["codes"]
        return np.ascontiguousarray(codes, dtype=np.int64)
