"""MOSS-TTS-Nano (OpenMOSS-Team/MOSS-TTS-Nano): voice cloning from a reference clip's codec codes, the GPT-2-style
global stack over the K/V arena and the per-frame local stack, sampling with the request's own seeded uniforms,
MOSS-Audio-Tokenizer-Nano as its exact streaming vocoder (export/moss_tts_nano/README.md)."""

from __future__ import annotations

from ttscore.contract import moss_tts_nano as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "MossModel", "MossRequest", takes=("manifest", "vocoder", "encoders"))
