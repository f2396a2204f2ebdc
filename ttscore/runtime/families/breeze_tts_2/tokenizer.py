"""Breeze-TTS-2's prompt text -> ids, as vLLM-Omni 0.30.0's `build_breeze_prompt` makes them (over `tokenizers`).

The target is one text segment, `"[S<n>]<ins_bos>{instructions}<ins_eos>{text}"`, tokenized with the
tokenizer's special tokens (<bos>); without `instructions` it carries vLLM-Omni's default instruction
("Speak clearly and naturally."). Cloning puts the reference before it, built at the id level: the
segment `"[S<n>]{ref_text}"` (with its special tokens), then one row per reference frame and one for the
all-EOS frame, whose embeddings are the frames' code embeddings (the rows' ids are only placeholders:
the tokenizer is never asked to keep an audio token whole). Each text segment goes through the text
encoder on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ttscore.contract import breeze_tts_2 as spec
from ttscore.runtime.onnx import open_tokenizer


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    text_mask: list[bool]
    segments: list[tuple[int, int]]  # (start, length) of each text segment in `ids`
    text_tokens: int


class BreezeTokenizer:
    def __init__(self, directory: Path) -> None:
        self.tok = open_tokenizer(directory)

    def _ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=True).ids)

    def prompt(self, text: str, voice: str, instructions: str | None, ref_text: str | None,
               ref_frames: int | None, audio_ids: tuple[int, int]) -> Prompt:
        """`instructions` None: the default instruction. `audio_ids`: the placeholder ids of a reference
        frame's row and of the EOS frame's row (the checkpoint's audio_token_id, audio_eos_token_id)."""
        speaker = voice if voice.startswith("[") and voice.endswith("]") else f"[{voice}]"
        instruction = spec.DEFAULT_INSTRUCTION if instructions is None else instructions
        target = self._ids(f"{speaker}{spec.INSTRUCTION_BOS}{instruction}{spec.INSTRUCTION_EOS}{text}")
        ids: list[int] = []
        mask: list[bool] = []
        segments: list[tuple[int, int]] = []
        if ref_frames is not None:
            reference = self._ids(f"{speaker}{ref_text}")
            segments.append((0, len(reference)))
            ids += reference + [audio_ids[0]] * ref_frames + [audio_ids[1]]
            mask += [True] * len(reference) + [False] * (ref_frames + 1)
        segments.append((len(ids), len(target)))
        ids += target
        mask += [True] * len(target)
        return Prompt(ids, mask, segments, sum(n for _, n in segments))
