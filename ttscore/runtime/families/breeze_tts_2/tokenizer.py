"""Breeze-TTS-2's prompt text -> ids, as vLLM-Omni's BreezeTTS2PromptBuilder makes them (over `tokenizers`).

Each text segment is tokenized with its special tokens (<bos>) and decoded back to text; the audio
segment is one `<|AUDIO|>` per reference frame and `<|audio_eos|>`; the whole rendered prompt is then
tokenized once without special tokens. The text mask and the per-segment lengths come from
tokenizing each rendered segment alone (the builder checks that they add up).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    text_mask: list[bool]
    segments: list[tuple[int, int]]  # (start, length) of each text segment in `ids`
    text_tokens: int


class BreezeTokenizer:
    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        path = directory / "tokenizer.json"
        if not path.is_file():
            raise ArtifactError(f"missing {path}")
        self.tok = Tokenizer.from_file(str(path))

    def _render(self, text: str) -> str:
        ids = self.tok.encode(text, add_special_tokens=True).ids
        return str(self.tok.decode(ids, skip_special_tokens=False))

    def _ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def prompt(self, text: str, voice: str, instructions: str | None, ref_text: str | None,
               ref_frames: int | None) -> Prompt:
        speaker = f"[{voice}]"
        target = f"{speaker}{spec.INSTRUCTION_BOS}{instructions}{spec.INSTRUCTION_EOS}{text}" if instructions \
            else f"{speaker}{text}"
        rendered: list[tuple[str, bool]] = []
        if ref_frames is not None:
            rendered.append((self._render(f"{speaker}{ref_text}"), True))
            rendered.append((spec.AUDIO_TAG * ref_frames + spec.AUDIO_EOS, False))
        rendered.append((self._render(target), True))
        ids = self._ids("".join(r for r, _ in rendered))
        mask: list[bool] = []
        segments: list[tuple[int, int]] = []
        for piece, is_text in rendered:
            n = len(self._ids(piece))
            if not is_text and n != ref_frames + 1:  # type: ignore[operator]
                raise InvalidRequest("the tokenizer does not keep the audio placeholders whole", "ref_text")
            if is_text:
                segments.append((len(mask), n))
            mask += [is_text] * n
        if len(mask) != len(ids):
            raise InvalidRequest("the prompt tokenizes differently whole and by segment", "input")
        return Prompt(ids, mask, segments, sum(n for _, n in segments))
