"""VoxCPM2's text tokenizer (the reference's ids, over `tokenizers`)."""

from __future__ import annotations

import json
from pathlib import Path

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.onnx import open_tokenizer


class TextTokenizer:
    """The reference's text ids: `LlamaTokenizerFast.tokenize` (no special tokens), multi-character
    CJK tokens split into characters (their "▁" dropped), ids with unknown -> unk."""

    def __init__(self, directory: Path) -> None:
        self.tok = open_tokenizer(directory)
        cfg_path = directory / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        unk = cfg.get("unk_token", "<unk>")
        unk = unk.get("content") if isinstance(unk, dict) else unk
        unk_id = self.tok.token_to_id(unk) if unk else None
        self.unk_id = unk_id
        vocab = self.tok.get_vocab(with_added_tokens=True)
        self.multichar = {t for t in vocab if len(t) >= 2 and all("\u4e00" <= c <= "\u9fff" for c in t)}

    def tokens(self, text: str) -> list[str]:
        out: list[str] = []
        for token in self.tok.encode(text, add_special_tokens=False).tokens:
            clean = token.replace("▁", "")
            out.extend(list(clean) if clean in self.multichar else [token])
        return out

    def __call__(self, text: str) -> list[int]:
        ids = []
        for t in self.tokens(text):
            i = self.tok.token_to_id(t)
            if i is None:
                if self.unk_id is None:
                    raise InvalidRequest(f"the text has a character the tokenizer cannot encode: {t!r}", "input")
                i = self.unk_id
            ids.append(int(i))
        return ids
