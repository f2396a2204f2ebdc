"""OmniVoice's prompt ids (the reference's `_prepare_inference_inputs`), over `tokenizers`."""

from __future__ import annotations

from pathlib import Path

from ttscore.contract.omnivoice import text as text_rules
from ttscore.runtime.onnx import open_tokenizer


class OmniVoiceTokenizer:
    def __init__(self, directory: Path) -> None:
        self.tok = open_tokenizer(directory)

    def _ids(self, text: str, special: bool) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=special).ids)

    def prompt(self, text: str, *, ref_text: str | None, language: str | None, instructions: str | None,
               denoise: bool) -> list[int]:
        """The style ids then the text ids: [<|denoise|>] <|lang_start|>lang<|lang_end|>
        <|instruct_start|>items<|instruct_end|> <|text_start|>ref_text text<|text_end|> (each
        non-verbal tag tokenized alone)."""
        style = ("<|denoise|>" if denoise else "") + f"<|lang_start|>{language or 'None'}<|lang_end|>"
        style += f"<|instruct_start|>{instructions or 'None'}<|instruct_end|>"
        wrapped = f"<|text_start|>{text_rules.prompt_text(text, ref_text)}<|text_end|>"
        ids = self._ids(style, True)
        for piece in text_rules.split_nonverbal(wrapped):
            ids += self._ids(piece, False)
        return ids
