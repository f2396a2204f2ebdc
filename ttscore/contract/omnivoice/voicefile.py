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

from ttscore.contract.omnivoice import CODEBOOK_SIZE, FAMILY, NUM_CODEBOOKS
from ttscore.contract.voicefile import CodesVoices

PROFILE_MODES = ("clone",)
CODEC_SHA256 = "audio_tokenizer_sha256"  # the checkpoint identity key of the codec that made the codes
CODEC_WEIGHTS = "audio_tokenizer/model.safetensors"  # its source file (Manifest.source_sha256)


# The profile writer: codes [8, T] (and the transcript, if any) -> `<name>.safetensors` + its manifest entry.
write_omnivoice_profile = CodesVoices(FAMILY, NUM_CODEBOOKS, CODEBOOK_SIZE, time_major=False).write
