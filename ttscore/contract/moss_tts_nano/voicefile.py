"""MOSS-TTS-Nano precomputed voices: the profile writer (`triton-tts precompute-voice` with a MOSS-TTS-Nano
checkpoint), over the shared voices format of ttscore.contract.voicefile.

Entries share the directory and the manifest with the other families' and name their family:

        "<name>": {"name", "file", "model_type": "moss_tts_nano", "mode": "clone",
                   "ref_code_length": T, "num_codebooks": 16,
                   "checkpoint": {"name": ..., "codec_sha256": ... (when the export recorded it)}, ...}
    <name lower>.safetensors
        ref_code  int32 [T, 16]  the reference clip's codes (the checkpoint's moss_codec_encoder: resampled to
                                 48 kHz, whole frames)

No transcript: the family's voice-clone prompt takes none (a request's `ref_text` is ignored). A request naming the
voice equals the same request with the clip as `ref_audio`. The gateway's MOSS-TTS-Nano adapter loads them and
checks them against each served checkpoint's codec checksum (the export's manifest `codec.sha256`).
"""

from __future__ import annotations

from typing import Any

from ttscore.contract.moss_tts_nano.codec import CODEBOOK_SIZE, MANIFEST_FIELD, NUM_QUANTIZERS
from ttscore.contract.moss_tts_nano.rules import FAMILY
from ttscore.contract.voicefile import CodesVoices

PROFILE_MODES = ("clone",)
CODEC_SHA256 = "codec_sha256"  # the checkpoint identity key of the codec that made the codes
MANIFEST_SHA256 = "sha256"  # the manifest's codec section (MANIFEST_FIELD) key of the codec's checksum


def manifest_codec_sha256(manifest_raw: dict[str, Any]) -> str | None:
    """The codec checksum an export's manifest records (`codec.sha256`), None when it has none."""
    section = manifest_raw.get(MANIFEST_FIELD)
    sha = section.get(MANIFEST_SHA256) if isinstance(section, dict) else None
    return sha if isinstance(sha, str) and sha else None


# The profile writer: codes [T, 16] in [0, 1024) -> `<name>.safetensors` + its manifest entry (no transcript:
# the family's prompt takes none); `checkpoint` is its identity ({"name", CODEC_SHA256}).
write_moss_tts_nano_profile = CodesVoices(FAMILY, NUM_QUANTIZERS, CODEBOOK_SIZE, time_major=True).write
