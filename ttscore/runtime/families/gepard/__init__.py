"""Gepard-1.0 (nineninesix/gepard-1.0): prompt, Gumbel-max per-frame sampling with per-request seeded
noise over exported graphs, NanoCodec as its exact streaming vocoder (export/gepard/README.md)."""

from __future__ import annotations

from ttscore.contract import gepard as contract
from ttscore.runtime.family import DeclaredFamily

FAMILY = DeclaredFamily.of(contract, "GepardModel", "GepardRequest")
