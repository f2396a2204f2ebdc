"""MOSS-TTS-Nano's text tokenizer and its voice-clone prompt rows.

The tokenizer is the checkpoint's SentencePiece model (`tokenizer.model`), used as the reference uses it: plain
`encode` to ids (no BOS/EOS: add_special_tokens false), each piece of the prompt template encoded on its own.

A prompt row is `[text_or_slot_id, c_0 .. c_15]`; a text row carries the audio pad id (the codebook size) in its 16
codebook columns, a reference row the slot id `audio_user_slot` and the clip's 16 codes. The voice-clone prompt
(upstream's `voice_clone` mode; the reference clip has no transcript):

    [im_start] "user\\n" "<user_inst>\\n- Reference(s):\\n" [audio_start]
    <one row per reference frame: [audio_user_slot, c_0 .. c_15]>
    [audio_end] "\\n- Instruction:\\nNone\\n- Tokens:\\nNone\\n ... - Text:\\n" <text>
    "\\n</user_inst>" [im_end] "\\n" [im_start] "assistant\\n" [audio_start]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.moss_tts_nano import graphs as spec

TOKENIZER_FILE = "tokenizer.model"

# The template's text pieces (each encoded separately), in prompt order.
USER = "user\n"
REFERENCE_HEADER = "<user_inst>\n- Reference(s):\n"
AFTER_REFERENCE = ("\n- Instruction:\nNone\n- Tokens:\nNone\n- Quality:\nNone\n- Sound Event:\nNone\n"
                   "- Ambient Sound:\nNone\n- Language:\nNone\n- Text:\n")
USER_END = "\n</user_inst>"
TURN_BREAK = "\n"
ASSISTANT = "assistant\n"

Rows = NDArray[np.int64]


class MossTokenizer:
    """The checkpoint's SentencePiece model (`tokenizer.model` in `directory`, or the file itself)."""

    def __init__(self, path: Path) -> None:
        import sentencepiece

        path = Path(path)
        file = path / TOKENIZER_FILE if path.is_dir() else path
        if not file.is_file():
            raise ArtifactError(f"{path}: no {TOKENIZER_FILE}")
        self.sp: Any = sentencepiece.SentencePieceProcessor(model_file=str(file))
        self._pieces: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        """The text's ids, no special tokens added."""
        return [int(i) for i in self.sp.encode(str(text), out_type=int)]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def piece(self, text: str) -> list[int]:
        """A template piece's ids (encoded once)."""
        ids = self._pieces.get(text)
        if ids is None:
            ids = self._pieces[text] = self.encode(text)
        return ids

    def prompt_ids(self, text_ids: list[int]) -> tuple[list[int], list[int]]:
        """The voice-clone prompt's text ids before the reference rows and after them (`text_ids`: the text's)."""
        before = [spec.IM_START_ID, *self.piece(USER), *self.piece(REFERENCE_HEADER), spec.AUDIO_START_ID]
        after = [spec.AUDIO_END_ID, *self.piece(AFTER_REFERENCE), *text_ids, *self.piece(USER_END), spec.IM_END_ID,
                 *self.piece(TURN_BREAK), spec.IM_START_ID, *self.piece(ASSISTANT), spec.AUDIO_START_ID]
        return before, after


def text_rows(ids: list[int], audio_pad: int) -> Rows:
    """Text rows: the ids in column 0, the audio pad id in the 16 codebook columns."""
    rows = np.full((len(ids), spec.ROW_WIDTH), audio_pad, np.int64)
    rows[:, 0] = ids
    return rows


def code_rows(codes: NDArray[Any], slot: int) -> Rows:
    """Rows of codec frames [frames, 16]: the slot id in column 0."""
    codes = np.asarray(codes)
    rows = np.empty((codes.shape[0], spec.ROW_WIDTH), np.int64)
    rows[:, 0] = slot
    rows[:, 1:] = codes
    return rows


def voice_clone_rows(tokenizer: MossTokenizer, text: str, ref_codes: NDArray[Any], audio_pad: int) -> Rows:
    """The voice-clone prompt of `text` with the reference clip's codes [frames, 16] (module docstring)."""
    codes = np.asarray(ref_codes)
    if codes.ndim != 2 or codes.shape[1] != spec.N_VQ or codes.shape[0] == 0:
        raise InvalidRequest(f"reference codes must be [frames >= 1, {spec.N_VQ}], got {list(codes.shape)}",
                             "ref_audio_tokens")
    if codes.min() < 0 or codes.max() >= audio_pad:
        raise InvalidRequest(f"reference codes must lie in 0..{audio_pad - 1}", "ref_audio_tokens")
    before, after = tokenizer.prompt_ids(tokenizer.encode(text))
    return np.concatenate([text_rows(before, audio_pad), code_rows(codes, spec.AUDIO_USER_SLOT_ID),
                           text_rows(after, audio_pad)])


def voice_prefix_length(tokenizer: MossTokenizer, ref_codes: NDArray[Any]) -> int:
    """How many of `voice_clone_rows`' first rows do not depend on the text: the template before the reference, its
    rows, audio_end and the header after it (the text's ids come next). The same for every text of a voice."""
    before, _ = tokenizer.prompt_ids([])
    return len(before) + len(ref_codes) + 1 + len(tokenizer.piece(AFTER_REFERENCE))
