"""What the Triton side knows of one model family: the Triton models (model_repository folders) its
deployments use besides `speech_generation`, and the contract each of them is rendered against.

A family's glue (request validation, facts read from the manifest) lives in its own package,
`ttscore/backend/<family>/`, whose `FAMILY` is a `BackendFamily`; the model_repository/<model>/1/model.py
files stay thin and call it. Registration: ttscore.backend.families.
"""

from __future__ import annotations

from dataclasses import dataclass

from ttscore.contract.graphs import GraphSpec


@dataclass(frozen=True)
class TritonModel:
    name: str  # the model_repository folder (a Triton model name, public)
    graph: GraphSpec | None = None  # the exported graph it hosts, deployment sizes symbolic (checked on render)
    state_key: str | None = None  # a streaming vocoder: the Manifest attribute holding its state size


@dataclass(frozen=True)
class BackendFamily:
    name: str  # manifest "family"
    models: tuple[TritonModel, ...]  # every Triton model of the family's deployments but speech_generation
    vocoder: str | None = None  # the streaming vocoder model speech_generation may call by BLS
    voice_features: str | None = None  # the model that turns reference audio into the request's voice inputs

    def model(self, name: str) -> TritonModel | None:
        return next((m for m in self.models if m.name == name), None)
