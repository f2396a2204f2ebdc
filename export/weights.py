"""The torch side of a checkpoint's weights: where each state-dict tensor is, for the staged loaders.

`tensor_files` turns one weight stem (a single `<stem>.safetensors` or a sharded index, validated
by ttscore.runtime.weights.read_weights) into the map export.common.load_tensors reads from:
state-dict name -> (file, key in that file). load_tensors converts floating tensors to float32 as
they are read, whatever the stored dtype (fp32, bf16, fp16), which is what the reference loaders
do when asked for float32.
"""

from __future__ import annotations

from pathlib import Path

from ttscore.runtime.weights import read_weights


def tensor_files(checkpoint: Path, stem: str = "model", prefix: str = "") -> dict[str, tuple[Path, str]]:
    """State-dict name (`prefix` + the stored key) -> (safetensors file, key) for `<stem>`'s weights."""
    weights = read_weights(Path(checkpoint), stem)
    return {prefix + name: (path, name) for name, path in weights.tensors.items()}
