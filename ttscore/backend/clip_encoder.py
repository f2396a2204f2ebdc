"""The Triton model of every family's reference-clip encoder (its voice-features model).

Each is one clip per request (clips differ in length; padding them together would change what they
encode), a health probe answered without running anything, and a bad clip answered INVALID_ARG
naming the field, whatever the family. What differs is the family's: `load(model, settings)` opens its
graphs from the export (ModelSettingsError when the artifacts are not its), `encode(tensors, loaded)`
turns one request's tensors into its outputs (InvalidRequest naming the field). A model.py is then::

    TritonPythonModel = clip_encoder_model("<model>", family_module.load, family_module.encode_request)

Imported only inside the python-backend stub (it imports ttscore.backend.glue).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from ttscore.backend import glue
from ttscore.backend.settings import Instance, OrtModelSettings

E = TypeVar("E")


def clip_encoder_model(default_name: str, load: Callable[[str, OrtModelSettings], E],
                       encode: Callable[[Mapping[str, np.ndarray], E], Mapping[str, np.ndarray]]) -> type:
    """A TritonPythonModel class for one family's encoder (`default_name`: the model's name when the
    config has none; the config's name is the one used, as rendered)."""
    log = logging.getLogger(f"ttscore.model.{default_name}")

    class TritonPythonModel:
        encoder: Any = None

        def initialize(self, args: Mapping[str, Any]) -> None:
            glue.install_logging()
            config = glue.model_config(args)
            settings = OrtModelSettings.from_model_config(config)
            Instance.from_args(args).configure_process()
            self.encoder = load(str(config.get("name", default_name)), settings)

        def execute(self, requests: list[Any]) -> list[Any]:
            # Health probes get an empty response without running the model (ttscore.backend.glue).
            return glue.answer_probes(requests, self._execute)

        def _execute(self, requests: list[Any]) -> list[Any]:
            return glue.each_request(requests, lambda t: encode(t, self.encoder), log, "reference encoding")

        def finalize(self) -> None:
            self.encoder = None

    TritonPythonModel.__qualname__ = f"TritonPythonModel[{default_name}]"
    return TritonPythonModel
