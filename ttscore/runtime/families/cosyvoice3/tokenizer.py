"""CosyVoice3's text ids: the checkpoint's Qwen2 tokenizer (`tokenizer.json` of CosyVoice-BlankEN, read
with `tokenizers`) with the special tokens vLLM-Omni's CosyVoice3Tokenizer adds at load, so
`<|endofprompt|>` and the paralinguistic tags are single tokens. (A BlankEN without tokenizer.json,
vocab.json + merges.txt only, is not read yet.)"""

from __future__ import annotations

from pathlib import Path

from ttscore.contract.errors import ArtifactError

# vLLM-Omni's CosyVoice3Tokenizer.special_tokens' additional_special_tokens (the first ones; the rest are
# phoneme tags that text never spells).
SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>", "[noise]",
           "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>",
           "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]")


class CosyVoice3Tokenizer:
    def __init__(self, directory: Path) -> None:
        from tokenizers import AddedToken, Tokenizer

        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise ArtifactError(f"{directory}: no tokenizer.json")
        self.tok = Tokenizer.from_file(str(path))
        self.tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])

    def ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)
