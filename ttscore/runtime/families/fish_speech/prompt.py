"""Fish Speech's prompt (vLLM-Omni prompt_utils): each piece encoded on its own with the checkpoint's
tokenizer.json (`tokenizers`, no special-token post-processing) and the control tokens looked up by name.

Text-only: `<|im_start|>system\\n` + TEXT_ONLY_SYSTEM_PROMPT + `<|im_end|>` `\\n` `<|im_start|>user\\n` text
`<|im_end|>` `\\n` `<|im_start|>assistant\\n` `<|voice|>`. Cloning: the system text becomes
CLONE_SYSTEM_PROMPT_PREFIX + ref_text (with `<|speaker:0|>` in front unless it names a speaker) +
CLONE_SYSTEM_PROMPT_SUFFIX, then `<|audio_start|>` the reference's semantic ids `<|audio_end|>`. Legacy
`<speaker:N>` tags become `<|speaker:N|>`; any other `<|...|>` control token in a text is refused (400).
"""

from __future__ import annotations

import re
from pathlib import Path

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest

_LEGACY_SPEAKER = re.compile(r"<speaker:(\d+)>")
_SPEAKER = re.compile(r"<\|speaker:\d+\|>")
_PHONEME = re.compile(r"<\|phoneme_(?:start|end)\|>")
_CONTROL = re.compile(r"<\|[^>]+\|>")


def normalize(text: str, field: str = "input", default_speaker: bool = False) -> str:
    out = _LEGACY_SPEAKER.sub(r"<|speaker:\1|>", text)
    bad = sorted({t for t in _CONTROL.findall(out) if not (_SPEAKER.fullmatch(t) or _PHONEME.fullmatch(t))})
    if bad:
        raise InvalidRequest(f"{field}: unsupported control token(s): {', '.join(bad)}", field)
    if default_speaker and not _SPEAKER.search(out):
        out = f"<|speaker:0|>{out}"
    return out


class FishPrompt:
    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self.tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception
            raise ArtifactError(f"{path}: not a tokenizer.json ({e})") from None

    def _text(self, s: str) -> list[int]:
        return list(self.tok.encode(s, add_special_tokens=False).ids)

    def _id(self, token: str) -> list[int]:
        i = self.tok.token_to_id(token)
        if i is None:
            raise ArtifactError(f"tokenizer.json has no {token}")
        return [int(i)]

    def _turn(self, role: str) -> list[int]:
        return self._id(spec.IM_START) + self._text(f"{role}\n")

    def _tail(self, text: str) -> list[int]:
        return (self._id(spec.IM_END) + self._text("\n") + self._turn("user") + self._text(text)
                + self._id(spec.IM_END) + self._text("\n") + self._turn("assistant") + self._id(spec.VOICE))

    def text_tokens(self, text: str) -> int:
        """The input text's own tokens (usage)."""
        return len(self._text(normalize(text)))

    def text_only(self, text: str) -> list[int]:
        return self._turn("system") + self._text(spec.TEXT_ONLY_SYSTEM_PROMPT) + self._tail(normalize(text))

    def clone(self, text: str, ref_text: str, semantic_ids: list[int]) -> tuple[list[int], int]:
        """(ids, index of the first reference semantic id)."""
        text = normalize(text)
        ref = normalize(ref_text, "ref_text", default_speaker=True)
        head = (self._turn("system") + self._text(spec.CLONE_SYSTEM_PROMPT_PREFIX + ref + spec.CLONE_SYSTEM_PROMPT_SUFFIX)
                + self._id(spec.AUDIO_START))
        return head + list(semantic_ids) + self._id(spec.AUDIO_END) + self._tail(text), len(head)
