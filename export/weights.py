"""The torch side of a checkpoint's weights for the staged loaders: where each state-dict tensor is, and
loading a stage's tensors into a model built on the meta device (and putting them back).

`tensor_files` turns one weight stem (a single `<stem>.safetensors` or a sharded index, validated
by ttscore.runtime.weights.read_weights) into the map `load_tensors` reads from:
state-dict name -> (file, key in that file). load_tensors converts floating tensors to float32 as
they are read, whatever the stored dtype (fp32, bf16, fp16), which is what the reference loaders
do when asked for float32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError
from ttscore.runtime.weights import read_weights


def tensor_files(checkpoint: Path, stem: str = "model", prefix: str = "") -> dict[str, tuple[Path, str]]:
    """State-dict name (`prefix` + the stored key) -> (safetensors file, key) for `<stem>`'s weights."""
    weights = read_weights(Path(checkpoint), stem)
    return {prefix + name: (path, name) for name, path in weights.tensors.items()}


class CheckpointTensors:
    """A checkpoint's safetensors tensors, each read on its own as float32 when asked, so an export stage holds
    only the weights of the module it traces. `stored`: a tensor's stored name from the name asked for (by
    default the same)."""

    def __init__(self, checkpoint: Path, stem: str = "model", stored: Mapping[str, str] | None = None) -> None:
        self.files = read_weights(Path(checkpoint), stem).tensors
        self.stored = stored

    def get(self, name: str) -> Any:
        import torch
        from safetensors import safe_open

        key = name if self.stored is None else self.stored[name]
        with safe_open(str(self.files[key]), framework="pt") as f:
            return f.get_tensor(key).to(torch.float32)

    def load(self, module: Any, name: Callable[[str], str] = str) -> None:
        """Every parameter and persistent buffer of `module` from the tensor `name(its state-dict name)`, in the
        module's shape (a scalar stored as [1]); strict."""
        state = {p: self.get(name(p)).reshape(t.shape) for p, t in module.state_dict().items()}
        module.load_state_dict(state, strict=True)


def load_tensors(model: Any, names: list[str], files: dict[str, tuple[Path, str]], where: Path) -> None:
    """Materialize the parameters (or persistent buffers) `names` of `model` from safetensors, one
    tensor at a time; floating tensors are cast to float32, others keep their dtype.

    `files` maps a state-dict name to (safetensors file, key in that file). Each tensor opens its
    own mapping: every page read stays resident while a mapping is open, so one mapping for a whole
    stage would hold the stage's on-disk (e.g. bf16) bytes on top of their float32 copies. The
    lazy-loading half of bounded export memory (export/qwen3_tts/reference.py StagedReference for Qwen3-TTS,
    export/voxcpm2/reference.py StagedVoxCPM2): the model is built on the meta device and each
    export stage loads only what it traces, then `unload_tensors` puts it back.
    """
    import torch
    from safetensors import safe_open

    missing = [n for n in names if n not in files]
    if missing:
        raise CheckpointError(f"{where}: {len(missing)} weights missing from the safetensors files, e.g. {missing[0]}")
    for n in names:
        module, leaf = _owner(model, n)
        is_param = leaf in module._parameters
        want = module._parameters[leaf] if is_param else module._buffers.get(leaf)
        if want is None:
            raise CheckpointError(f"{where}: {n} is neither a parameter nor a buffer of the model")
        path, key = files[n]
        with safe_open(str(path), framework="pt") as fh:
            tensor = fh.get_tensor(key)
        if tensor.is_floating_point():
            tensor = tensor.to(torch.float32)
        if tuple(tensor.shape) != tuple(want.shape):
            raise CheckpointError(f"{where}: {n} has shape {tuple(tensor.shape)}, the config says {tuple(want.shape)}")
        if is_param:
            module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=False)
        else:
            module._buffers[leaf] = tensor


def unload_tensors(model: Any, names: list[str]) -> None:
    """Put the parameters `names` back on the meta device (their memory is freed once no one else
    holds them); buffers are left as they are."""
    import torch

    for n in names:
        module, leaf = _owner(model, n)
        p = module._parameters.get(leaf)
        if p is not None and not p.is_meta:
            module._parameters[leaf] = torch.nn.Parameter(
                torch.empty(p.shape, dtype=p.dtype, device="meta"), requires_grad=False
            )


def _owner(model: Any, name: str) -> tuple[Any, str]:
    path, _, leaf = name.rpartition(".")
    return (model.get_submodule(path) if path else model), leaf
