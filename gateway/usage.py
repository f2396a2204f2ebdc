"""Token usage of one speech request (pure): the SSE `speech.audio.done` / batch `usage` object and
the non-streaming `x-vllm-omni-*` response headers, computed from the same numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ttscore.contract.usage import Usage as WireUsage


@dataclass(frozen=True)
class Usage(WireUsage):
    """The contract's usage (text, audio, output tokens) with the Speech API's views of it."""

    @property
    def input_tokens(self) -> int:
        return self.text_tokens + self.audio_tokens

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        """Usage of two generations of one request (the segments of a long text)."""
        return Usage(self.text_tokens + other.text_tokens, self.audio_tokens + other.audio_tokens,
                     self.output_tokens + other.output_tokens)

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "input_token_details": {"text_tokens": self.text_tokens, "audio_tokens": self.audio_tokens},
        }

    def headers(self) -> dict[str, str]:
        return {
            "x-vllm-omni-input-tokens": str(self.input_tokens),
            "x-vllm-omni-output-tokens": str(self.output_tokens),
            "x-vllm-omni-total-tokens": str(self.total_tokens),
            "x-vllm-omni-input-text-tokens": str(self.text_tokens),
            "x-vllm-omni-input-audio-tokens": str(self.audio_tokens),
        }


USAGE_HEADERS = tuple(Usage().headers())
