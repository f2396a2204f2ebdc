"""The MOSS-TTS-Nano family's side of the contract, re-exported here: `graphs` (the LM's constants, prompt token
ids and GraphSpecs), `rules` (RULES and WIRE) and `codec` (the codec's constants and specs)."""

from __future__ import annotations

from ttscore.contract.moss_tts_nano.codec import *  # noqa: F403
from ttscore.contract.moss_tts_nano.graphs import *  # noqa: F403
from ttscore.contract.moss_tts_nano.rules import *  # noqa: F403
