"""Qwen2 byte-level BPE text tokenizer built from a checkpoint's vocab.json + merges.txt.

Equivalent to what the reference gets from `AutoProcessor.from_pretrained(path, fix_mistral_regex=True)`
(transformers 4.57.3 converts the slow Qwen2 tokenizer: NFC, regex split, byte-level BPE, added
tokens from tokenizer_config.json), without importing transformers.

One quirk is reproduced on purpose: with `fix_mistral_regex=True`, transformers 4.57.3 replaces the
pre-tokenizer regex by Mistral's whenever the checkpoint's config.json has no `transformers_version`
or one in (4.57.2, 5.0) (tokenization_utils_base.py, `_patch_mistral_regex`). The reference therefore
splits text that way for such checkpoints, and so do we, so token ids stay identical.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from ttscore.contract.errors import CheckpointError

QWEN2_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
MISTRAL_FIX_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


def _version_tuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def pretokenizer_regex(config: dict[str, Any]) -> str:
    """The split regex the reference ends up using for a checkpoint with this config.json."""
    version = config.get("transformers_version")
    model_type = config.get("model_type")
    if version:
        v = _version_tuple(str(version))
        if v <= (4, 57, 2) and model_type not in ("mistral", "mistral3", "voxtral", "ministral", "pixtral"):
            return QWEN2_REGEX
        if v >= (5, 0, 0):
            return QWEN2_REGEX
    return MISTRAL_FIX_REGEX


class TextTokenizer:
    def __init__(self, directory: str | Path, regex: str = QWEN2_REGEX) -> None:
        d = Path(directory)
        try:
            vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
            merges = []
            for line in (d / "merges.txt").read_text(encoding="utf-8").splitlines():
                if not line or line.startswith("#version"):
                    continue
                a, b = line.split(" ")
                merges.append((a, b))
            tok_cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"cannot read tokenizer files in {d}: {exc}") from None
        tok = Tokenizer(
            BPE(
                vocab=vocab,
                merges=merges,
                dropout=None,
                unk_token=None,
                continuing_subword_prefix="",
                end_of_word_suffix="",
                fuse_unk=False,
                byte_fallback=False,
            )
        )
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        added = tok_cfg.get("added_tokens_decoder") or {}
        specials: list[tuple[int, AddedToken]] = []
        normal: list[tuple[int, AddedToken]] = []
        for idx in sorted(added, key=int):
            info = added[idx]
            token = AddedToken(
                info["content"],
                single_word=info.get("single_word", False),
                lstrip=info.get("lstrip", False),
                rstrip=info.get("rstrip", False),
                normalized=info.get("normalized", not info.get("special", False)),
                special=info.get("special", False),
            )
            (specials if info.get("special", False) else normal).append((int(idx), token))
        # Same order as transformers' PreTrainedTokenizerFast: sorted by configured id, each token
        # taking the next free id of the backend (equal to the configured id in real checkpoints).
        for _, token in sorted(specials + normal, key=lambda t: t[0]):
            if token.special:
                tok.add_special_tokens([token])
            else:
                tok.add_tokens([token])
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=True).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))


# Prompt templates (qwen_tts/inference/qwen3_tts_model.py: _build_assistant_text, _build_ref_text,
# _build_instruct_text).
def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def ref_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n"
