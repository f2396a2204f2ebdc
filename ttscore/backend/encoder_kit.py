"""What every family's reference-clip encoder glue does the same way (ttscore.backend.clip_encoder runs
them): refuse another family's export, open the family's runtime pieces with their artifact errors as
settings errors, and read one request's clip (`audio`, `sample_rate`) against the family's encoder inputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ttscore.backend.settings import ModelSettingsError, OrtModelSettings
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import ArtifactError, InvalidRequest

T = TypeVar("T")


def require_family(model: str, settings: OrtModelSettings, family: str) -> None:
    """ModelSettingsError unless the model's artifacts are an export of `family`."""
    if settings.manifest.family != family:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir} is a {settings.manifest.family} export, "
                                 f"not {family}")


def open_encoder(model: str, opener: Callable[[], T]) -> T:
    """`opener()`, an ArtifactError (a missing or wrong graph) reported as the model's settings error."""
    try:
        return opener()
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None


def read_clip(tensors: Mapping[str, np.ndarray], inputs: Sequence[Any]) -> tuple[np.ndarray, int]:
    """(float32 mono samples, sample rate) of one request, each of the encoder's `inputs` (the contract's
    rows) present and of its wire type; InvalidRequest naming the first that is not."""
    for row in inputs:
        if row.name not in tensors:
            raise InvalidRequest(f"input '{row.name}' is required", row.name)
        triton_io.check_tensor(row, tensors[row.name])
    audio = np.asarray(tensors["audio"], np.float32).reshape(-1)
    return audio, int(np.asarray(tensors["sample_rate"]).reshape(-1)[0])
