"""CosyVoice3's text ids: the checkpoint's CosyVoice-BlankEN tokenizer as vLLM-Omni's CosyVoice3Tokenizer
loads it (`AutoTokenizer.from_pretrained`, then its special tokens added), without transformers.

- `tokenizer.json` when the directory has one (a fast tokenizer, read with `tokenizers`);
- else Qwen2's slow files as transformers 4.57.3 converts them: `vocab.json` + `merges.txt` as a byte-level
  BPE (NFC, Qwen2's split regex, byte-level mapping, no unknown token), then `tokenizer_config.json`'s
  `added_tokens_decoder` in id order.
Then vLLM-Omni's additional special tokens, so `<|endofprompt|>` and the paralinguistic tags are single
tokens. No BOS/EOS is added (Qwen2 adds none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ttscore.contract.errors import ArtifactError

QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
               r"""|\s+(?!\S)|\s+""")
# vLLM-Omni's CosyVoice3Tokenizer.special_tokens' additional_special_tokens (the first ones; the rest are
# phoneme tags that text never spells).
SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>", "[noise]",
           "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>", "</laughter>",
           "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]")


def _slow(d: Path) -> Any:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    try:
        vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
        merges = [tuple(line.split(" ")) for line in (d / "merges.txt").read_text(encoding="utf-8").splitlines()
                  if line and not line.startswith("#version")]
        cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{d}: cannot read the Qwen2 tokenizer files ({exc})") from None
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token=None, continuing_subword_prefix="",
                        end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    added = cfg.get("added_tokens_decoder") or {}
    for idx in sorted(added, key=int):
        info = added[idx]
        token = AddedToken(info["content"], single_word=info.get("single_word", False),
                           lstrip=info.get("lstrip", False), rstrip=info.get("rstrip", False),
                           normalized=info.get("normalized", not info.get("special", False)),
                           special=info.get("special", False))
        if token.special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    return tok


class CosyVoice3Tokenizer:
    def __init__(self, directory: Path) -> None:
        from tokenizers import AddedToken, Tokenizer

        d = Path(directory)
        if (d / "tokenizer.json").is_file():
            self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        elif (d / "vocab.json").is_file():
            self.tok = _slow(d)
        else:
            raise ArtifactError(f"{d}: no tokenizer.json nor vocab.json + merges.txt")
        self.tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])

    def ids(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)
