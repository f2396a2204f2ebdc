"""Voxtral TTS's text side: tekken.json's byte-level BPE (as mistral-common's Tekkenizer encodes text:
the pattern splits, each piece's bytes merged by rank, ids = rank + the number of special tokens) and
the speech prompt of mistral-common's `encode_speech_request`:
`<s> [BEGIN_AUDIO] [AUDIO] x N [NEXT_AUDIO_TEXT] text [REPEAT_AUDIO_TEXT] [BEGIN_AUDIO]`,
N = `audio.voice_num_audio_tokens[voice]`. Needs the `regex` module (the pattern's \\p{..} classes).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ttscore.contract.errors import ArtifactError, InvalidRequest


class TekkenTokenizer:
    def __init__(self, path: Path) -> None:
        try:
            import regex
        except ImportError as e:  # pragma: no cover - the environment's, not the request's
            raise ArtifactError("the tekken tokenizer needs the 'regex' package") from e
        try:
            data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ArtifactError(f"{path}: not readable ({e})") from None
        cfg = data["config"]
        self.n_special = int(cfg["default_num_special_tokens"])
        inner = int(cfg["default_vocab_size"]) - self.n_special
        self.ranks = {base64.b64decode(t["token_bytes"]): int(t["rank"]) for t in data["vocab"][:inner]}
        self.pattern = regex.compile(cfg["pattern"])
        self.special = {t["token_str"]: int(t["rank"]) for t in data.get("special_tokens") or []}
        self.voice_frames = {str(k): int(v) for k, v in (data.get("audio") or {}).get("voice_num_audio_tokens", {}).items()}

    def _bpe(self, piece: bytes) -> list[int]:
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                rank = self.ranks.get(parts[i] + parts[i + 1])
                if rank is not None and (best is None or rank < best):
                    best, at = rank, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return [self.ranks[p] for p in parts]

    def text_ids(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self.pattern.findall(text):
            ids += [r + self.n_special for r in self._bpe(piece.encode("utf-8"))]
        return ids

    def prompt(self, text: str, voice: str) -> tuple[list[int], int]:
        """The speech prompt's ids and how many of them are text."""
        if voice not in self.voice_frames:
            raise InvalidRequest(f"unknown voice {voice!r}", "voice")
        s = self.special
        text_ids = self.text_ids(text)
        ids = [s["<s>"], s["[BEGIN_AUDIO]"], *[s["[AUDIO]"]] * self.voice_frames[voice], s["[NEXT_AUDIO_TEXT]"],
               *text_ids, s["[REPEAT_AUDIO_TEXT]"], s["[BEGIN_AUDIO]"]]
        return ids, len(text_ids)
