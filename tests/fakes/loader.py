"""Load a `model_repository/<model>/1/model.py` under the recording pb_utils fake."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from fakes import triton_python_backend_utils as fake_pb_utils
from google.protobuf import json_format

REPO_ROOT = Path(__file__).resolve().parents[2]
_counter = itertools.count()


def install_fake_pb_utils() -> ModuleType:
    """Make `import triton_python_backend_utils` resolve to the shared fake (one module object, so
    its classes are the ones tests inspect)."""
    sys.modules["triton_python_backend_utils"] = fake_pb_utils
    return fake_pb_utils


def load_model_module(model: str, repository: Path | None = None) -> ModuleType:
    install_fake_pb_utils()
    path = (repository or REPO_ROOT / "model_repository") / model / "1" / "model.py"
    name = f"_model_{model}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def config_json(config_path: Path, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The model_config JSON Triton hands to initialize(), from a config.pbtxt (dims as ints, as
    the real server sends them)."""
    from ttscore.backend.repository import load_config

    config = load_config(config_path)
    for key, value in (parameters or {}).items():
        config.parameters[key].string_value = value
    data = json_format.MessageToDict(config, preserving_proto_field_name=True)
    for t in (*data.get("input", []), *data.get("output", [])):
        t["dims"] = [int(d) for d in t.get("dims", [])]
    data.setdefault("max_batch_size", 0)
    return data


def model_args(config: dict[str, Any], kind: str = "CPU", device_id: int = 0) -> dict[str, str]:
    return {
        "model_config": json.dumps(config),
        "model_instance_kind": kind,
        "model_instance_device_id": str(device_id),
        "model_instance_name": f"{config.get('name', 'model')}_0",
        "model_name": str(config.get("name", "model")),
        "model_version": "1",
        "model_repository": str(REPO_ROOT / "model_repository" / str(config.get("name", ""))),
    }


def committed_config(model: str, **parameters: str) -> dict[str, Any]:
    return config_json(REPO_ROOT / "model_repository" / model / "config.pbtxt", parameters)
