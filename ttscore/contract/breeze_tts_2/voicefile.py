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

import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.breeze_tts_2 import CODEBOOK_SIZE, FAMILY, NUM_CODEBOOKS
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import REF_CODE, merge_voice, validate_voice_name, voice_file_name

PROFILE_MODES = ("clone",)
CODEC_SHA256 = "audio_tokenizer_sha256"  # the checkpoint identity key of the codec that made the codes
CODEC_WEIGHTS = "audio_tokenizer/model.safetensors"  # its source file (Manifest.source_sha256)


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
    from safetensors.numpy import save

    name = validate_voice_name(voice_name, "voice_name")
    text = (ref_text or "").strip() or None
    if text is None:
        raise InvalidRequest("a Breeze-TTS-2 voice needs the transcript of the reference audio (--ref-text)",
                             "ref_text")
    codes = np.asarray(ref_codes)
    if codes.ndim != 2 or codes.shape[0] == 0 or codes.shape[1] != NUM_CODEBOOKS or codes.dtype.kind not in "iu":
        raise InvalidRequest(f"reference codes must be a non-empty integer [T, {NUM_CODEBOOKS}] array", "ref_audio")
    if codes.min() < 0 or codes.max() >= CODEBOOK_SIZE:
        raise InvalidRequest(f"reference codes must be in [0, {CODEBOOK_SIZE})", "ref_audio")
    tensors = {REF_CODE: np.ascontiguousarray(codes.astype(np.int32))}
    entry: dict[str, Any] = {"name": name, "file": voice_file_name(name), "model_type": FAMILY, "mode": "clone",
                             "ref_text": text, "ref_code_length": int(codes.shape[0]), "num_codebooks": NUM_CODEBOOKS}
    if checkpoint:
        entry["checkpoint"] = {k: v for k, v in checkpoint.items() if isinstance(v, str) and v}
    description = (speaker_description or "").strip() or None
    if description is not None:
        entry["speaker_description"] = description
    entry["created_at"] = int(time.time())
    payload = save(tensors, metadata={"name": name, "mode": "clone", "model_type": FAMILY})
    merge_voice(Path(output_dir), entry, payload)
    return entry
