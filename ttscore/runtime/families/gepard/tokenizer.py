"""Gepard-1.0's prompt ids over `tokenizers`: vLLM-Omni's `build_gepard_prompt_ids` on the text's ids
(the tokenizer without special tokens, as its adapter calls it)."""

from __future__ import annotations

import math
from pathlib import Path

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.gepard.checkpoint import GepardInfo
from ttscore.runtime.onnx import open_tokenizer


def prompt_ids(text_ids: list[int], info: GepardInfo) -> list[int]:
    """[speaker slots] + [SOT text EOT] x (R - 1) + [SOT text EOT SOS]: short texts repeat R times
    (R = min(ceil(target / n), max) below `apply_below` tokens), so that a few tokens carry weight
    against the speaker prefix; only the last copy opens the speech."""
    n = len(text_ids)
    if n == 0:
        raise InvalidRequest("'input' has no text tokens", "input")
    if not info.repetition_enabled or n >= info.repetition_apply_below or n >= info.repetition_target:
        repeats = 1
    else:
        repeats = max(1, min(math.ceil(info.repetition_target / n), info.repetition_max))
    block = [info.start_of_text, *text_ids, info.end_of_text]
    slots = [info.speaker_token_base + i for i in range(info.num_speaker_slots)]
    return slots + block * (repeats - 1) + [*block, info.start_of_speech]


class GepardTokenizer:
    def __init__(self, directory: Path) -> None:
        self.tok = open_tokenizer(directory)

    def text_ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)
