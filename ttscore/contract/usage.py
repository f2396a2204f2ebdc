"""Token usage of one request, as it crosses from the generation model to the gateway.

On the wire it is speech_generation's `usage` output, INT32[3] in the field order below; this module
is the only place that knows that order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

U = TypeVar("U", bound="Usage")


@dataclass(frozen=True)
class Usage:
    text_tokens: int = 0  # tokens of the text (plus instructions) in the prompt
    audio_tokens: int = 0  # reference-audio codec frames fed in context (voice cloning)
    output_tokens: int = 0  # generated codec frames so far

    def to_tensor(self) -> NDArray[np.int32]:
        return np.array(astuple(self), dtype=np.int32)

    @classmethod
    def from_tensor(cls: type[U], values: Iterable[Any]) -> U:
        text, audio, out = (int(v) for v in list(values)[:3])
        return cls(text, audio, out)
