"""OmniVoice precomputed voices: the profile writer (`triton-tts precompute-voice` with an OmniVoice
checkpoint), over the shared voices format of ttscore.contract.voicefile.

Entries share the directory and the manifest with the other families' and name their family:

        "<name>": {"name", "file", "model_type": "omnivoice", "mode": "clone",
                   "ref_text": ... (optional: the transcript of the reference clip, as given),
                   "ref_code_length": T, "num_codebooks": 8,
                   "checkpoint": {"name": ..., "audio_tokenizer_sha256": ... (when known)}, ...}
    <name lower>.safetensors
        ref_code  int32 [T, 8]  the reference clip's codes (the checkpoint's codec_encoder after the
                                reference's preprocessing: clone.ReferenceEncoder), time-major as the
                                shared format stores codes; the model takes them as [8, T]

A voice is a cloning reference: a request naming it equals the same request with the clip as
`ref_audio` and its transcript (if any) as `ref_text`. The gateway's OmniVoice adapter loads them
and checks them against each served checkpoint's codec checksum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.omnivoice import CODEBOOK_SIZE, FAMILY, NUM_CODEBOOKS
from ttscore.contract.voicefile import checked_codes, write_clone_codes

PROFILE_MODES = ("clone",)
CODEC_SHA256 = "audio_tokenizer_sha256"  # the checkpoint identity key of the codec that made the codes
CODEC_WEIGHTS = "audio_tokenizer/model.safetensors"  # its source file (Manifest.source_sha256)


def check_codes(codes: NDArray[Any], param: str = "ref_audio") -> NDArray[np.int32]:
    """Codes [8, T] in the codebook's range as the file stores them ([T, 8] int32), or InvalidRequest."""
    return checked_codes(codes, NUM_CODEBOOKS, CODEBOOK_SIZE, time_major=False, param=param)


def write_omnivoice_profile(
    output_dir: str | Path,
    voice_name: str,
    *,
    ref_codes: NDArray[Any],
    ref_text: str | None,
    checkpoint: dict[str, Any] | None = None,
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """Write an OmniVoice profile (`<name>.safetensors` + its manifest entry) of the codes [8, T];
    returns the entry. `checkpoint` is its identity ({"name", CODEC_SHA256}), checked by the loader
    against the served checkpoints."""
    return write_clone_codes(output_dir, voice_name, FAMILY, check_codes(ref_codes), ref_text=ref_text,
                             checkpoint=checkpoint, speaker_description=speaker_description)
