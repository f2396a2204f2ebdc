"""Run in a reference environment by tests/export_tests/test_refenv.py through refenv.run (python refenv_probe.py
IN.npz OUT.npz COMMAND [args...]):

- `versions [module:Class ...]`: the versions of torch, transformers and numpy, after importing every
  named class (an ImportError or a missing attribute fails the run).
- `forward CONFIG.json WEIGHTS.safetensors`: a transformers model built from CONFIG.json's
  {"model": class name, "config": config class name, "kwargs": {...}}, its weights loaded strictly from
  WEIGHTS.safetensors, run on the inputs' input_ids and attention_mask in float32, eager attention;
  returns last_hidden_state.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from refenv import serve


def versions(inputs: Mapping[str, np.ndarray], *classes: str) -> dict[str, object]:
    import torch
    import transformers

    for spec in classes:
        module, _, name = spec.partition(":")
        getattr(importlib.import_module(module), name)
    return {"torch": np.str_(torch.__version__), "transformers": np.str_(transformers.__version__),
            "numpy": np.str_(np.__version__), "python": np.str_(sys.executable)}


def forward(inputs: Mapping[str, np.ndarray], config_path: str, weights_path: str) -> dict[str, object]:
    import torch
    import transformers
    from safetensors.torch import load_file

    spec = json.loads(Path(config_path).read_text())
    config = getattr(transformers, spec["config"])(**spec["kwargs"])
    config._attn_implementation = "eager"
    torch.manual_seed(12345)  # the weights all come from the file: a different init must not matter
    model = getattr(transformers, spec["model"])(config).to(torch.float32).eval()
    model.load_state_dict(load_file(weights_path), strict=True)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(inputs["input_ids"]),
                    attention_mask=torch.from_numpy(inputs["attention_mask"]))
    return {"last_hidden_state": out.last_hidden_state.numpy()}


COMMANDS = {"versions": versions, "forward": forward}

if __name__ == "__main__":
    serve(lambda inputs, command, *args: COMMANDS[command](inputs, *args))
