"""Breeze-TTS-2 precomputed voices: the profile writer (`triton-tts precompute-voice` with a
Breeze-TTS-2 checkpoint), over the shared voices format of ttscore.contract.voicefile.

Entries share the directory and the manifest with the other families' and name their family:

        "<name>": {"name", "file", "model_type": "breeze_tts_2", "mode": "clone",
                   "ref_text": ... (the transcript of the reference clip), "ref_code_length": T,
                   "num_codebooks": 16,
                   "checkpoint": {"name": ..., "audio_tokenizer_sha256": ... (when known)}, ...}
    <name lower>.safetensors
        ref_code  int32 [T, 16]  the reference clip's codec codes (the checkpoint's audio_tokenizer)

A voice is the reference of clone mode (and, with `instructions`, direction): a request naming it
equals the same request with the clip as `ref_audio` and its transcript as `ref_text`. The gateway's
Breeze-TTS-2 adapter loads them and checks them against each served checkpoint's codec checksum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from ttscore.contract.breeze_tts_2 import CODEBOOK_SIZE, FAMILY, NUM_CODEBOOKS
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import CodesVoices

PROFILE_MODES = ("clone",)
CODEC_SHA256 = "audio_tokenizer_sha256"  # the checkpoint identity key of the codec that made the codes
CODEC_WEIGHTS = "audio_tokenizer/model.safetensors"  # its source file (Manifest.source_sha256)
VOICES = CodesVoices(FAMILY, NUM_CODEBOOKS, CODEBOOK_SIZE, time_major=True)


def write_breeze_tts_2_profile(
    output_dir: str | Path,
    voice_name: str,
    *,
    ref_codes: NDArray[Any],
    ref_text: str | None,
    checkpoint: dict[str, Any] | None = None,
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """Write a Breeze-TTS-2 profile (`<name>.safetensors` + its manifest entry); returns the entry.
    `checkpoint` is its identity ({"name", CODEC_SHA256}), checked by the loader against the served
    checkpoints."""
    if not (ref_text or "").strip():
        raise InvalidRequest("a Breeze-TTS-2 voice needs the transcript of the reference audio (--ref-text)",
                             "ref_text")
    return VOICES.write(output_dir, voice_name, ref_codes=ref_codes, ref_text=ref_text, checkpoint=checkpoint,
                        speaker_description=speaker_description)
