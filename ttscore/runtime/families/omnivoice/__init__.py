"""OmniVoice (k2-fsa/OmniVoice): non-autoregressive iterative unmasking over the exported generator
graph, the whole utterance decoded by the exported codec decoder at the last step."""

from __future__ import annotations

from ttscore.contract import omnivoice as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "OmniVoiceModel", "OmniVoiceRequest", renames={"ref_audio_codes": "ref_codes"})
