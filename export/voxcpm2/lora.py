"""VoxCPM2 startup LoRA adapters (`--lora DIR`): the native VoxCPM2 training export, merged into the
base weights before export.

The format is the one vLLM-Omni's `voxcpm2/lora.py` (`merge_voxcpm2_lora`) serves and the reference
`voxcpm==2.0.3` trains (`LoRAConfig`, `modules/layers/lora.py` `LoRALinear`):

    lora_config.json           {"lora_config": {"r": int > 0, "alpha": finite number,
                                "enable_lm"/"enable_dit"/"enable_proj": bool,
                                "target_modules_lm"/"target_modules_dit"/"target_proj_modules": [names]}}
    lora_weights.safetensors   "<module path>.lora_A" [r, in], "<module path>.lora_B" [out, r] for
                               every targeted nn.Linear, the path as in the reference VoxCPM2Model

Targets: `lm` every Linear whose last name is in `target_modules_lm` under `base_lm` and
`residual_lm`; `dit` the same under `feat_decoder.estimator` (`target_modules_dit`); `proj` the
model's own attributes named in `target_proj_modules`. Every enabled name must match in every root.
The merge is `W + alpha / r * B @ A` in float32, one layer at a time (as the reference's LoRALinear
computes `x W^T + alpha / r * (x A^T) B^T`). Everything is validated before any weight changes:
missing, unexpected, non-finite, non-float or wrongly shaped tensors fail with the tensor named.
PEFT adapters (adapter_config.json / adapter_model.*) and pickle checkpoints are refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError

CONFIG = "lora_config.json"
WEIGHTS = "lora_weights.safetensors"
FORMAT = "voxcpm2-native-lora"
ATTENTION = ("q_proj", "v_proj", "k_proj", "o_proj")  # the reference LoRAConfig's defaults
PROJECTIONS = ("enc_to_lm_proj", "lm_to_dit_proj", "res_to_dit_proj", "fusion_concat_proj")
# group -> (the roots it searches, its config key, default names)
GROUPS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "lm": (("base_lm", "residual_lm"), "target_modules_lm", ATTENTION),
    "dit": (("feat_decoder.estimator",), "target_modules_dit", ATTENTION),
    "proj": (("",), "target_proj_modules", PROJECTIONS),
}
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
PICKLE_SUFFIXES = (".ckpt", ".pth", ".pt", ".bin", ".pkl")


class LoraError(CheckpointError):
    """An adapter that cannot be served: the message names the file, field or tensor."""


@dataclass(frozen=True)
class LoraConfig:
    r: int
    alpha: float
    groups: dict[str, tuple[str, ...]]  # enabled group -> target names

    @property
    def scale(self) -> float:
        return self.alpha / self.r


def _refuse_foreign(path: Path) -> None:
    if not path.is_dir():
        raise LoraError(f"{path}: a VoxCPM2 LoRA adapter is a directory holding {CONFIG} and {WEIGHTS}")
    peft = [n for n in PEFT_FILES if (path / n).exists()]
    if peft:
        raise LoraError(f"{path}: PEFT adapters ({', '.join(peft)}) are not accepted: give the native VoxCPM2 "
                        f"LoRA export ({CONFIG} + {WEIGHTS}) that voxcpm's training writes")
    if not (path / WEIGHTS).is_file():
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise LoraError(f"{path}: pickle checkpoints ({', '.join(pickles)}) are not accepted: "
                            f"the adapter's weights must be {WEIGHTS}")
        raise LoraError(f"{path}: no {WEIGHTS}")
    if not (path / CONFIG).is_file():
        raise LoraError(f"{path}: no {CONFIG}")


def read_config(path: Path) -> LoraConfig:
    """The adapter's `lora_config` object, checked (no torch)."""
    path = Path(path)
    _refuse_foreign(path)
    try:
        meta = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LoraError(f"{path / CONFIG} is unreadable: {exc}") from None
    cfg = meta.get("lora_config") if isinstance(meta, dict) else None
    if not isinstance(cfg, dict):
        raise LoraError(f"{path / CONFIG} must hold a 'lora_config' object")
    r, alpha = cfg.get("r"), cfg.get("alpha")
    if type(r) is not int or r <= 0:
        raise LoraError(f"{path / CONFIG}: lora_config.r must be a positive integer, got {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
        raise LoraError(f"{path / CONFIG}: lora_config.alpha must be a finite number, got {alpha!r}")
    groups: dict[str, tuple[str, ...]] = {}
    for group, (_, key, default) in GROUPS.items():
        enabled = cfg.get(f"enable_{group}", False)
        if type(enabled) is not bool:
            raise LoraError(f"{path / CONFIG}: lora_config.enable_{group} must be a boolean, got {enabled!r}")
        if not enabled:
            continue
        names = cfg.get(key, list(default))
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise LoraError(f"{path / CONFIG}: lora_config.{key} must be a non-empty list of module names")
        groups[group] = tuple(names)
    if not groups:
        raise LoraError(f"{path / CONFIG}: lora_config enables no group (enable_lm, enable_dit, enable_proj)")
    return LoraConfig(r=r, alpha=float(alpha), groups=groups)


def identity(path: Path) -> dict[str, Any]:
    """What the manifest records of the adapter (and what an export cache is keyed by): its name
    (the directory's), sha256 over both files, r, alpha and the enabled groups."""
    path = Path(path).resolve()
    cfg = read_config(path)
    digest = hashlib.sha256()
    for name in (CONFIG, WEIGHTS):
        file_hash = hashlib.sha256()
        with (path / name).open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                file_hash.update(block)
        digest.update(f"{name}:{file_hash.hexdigest()}\n".encode())
    return {"name": path.name, "format": FORMAT, "sha256": digest.hexdigest(), "r": cfg.r, "alpha": cfg.alpha,
            "groups": {g: list(n) for g, n in cfg.groups.items()}}


def targets(model: Any, cfg: LoraConfig, where: Path) -> dict[str, tuple[int, int]]:
    """Module path (in the reference VoxCPM2Model) -> (in_features, out_features) of every targeted
    Linear; the module tree may be on the meta device."""
    from torch import nn

    found: dict[str, tuple[int, int]] = {}
    for group, names in cfg.groups.items():
        roots = GROUPS[group][0]
        for prefix in roots:
            root = model.get_submodule(prefix) if prefix else model
            matched = set()
            for name, module in root.named_modules():
                selector = name if group == "proj" else name.rsplit(".", 1)[-1]
                if selector in names and isinstance(module, nn.Linear):
                    found[f"{prefix}.{name}" if prefix else name] = (module.in_features, module.out_features)
                    matched.add(selector)
            missing = sorted(set(names) - matched)
            if missing:
                raise LoraError(f"{where / CONFIG}: {GROUPS[group][1]} names {missing} that are no Linear layer "
                                f"of {prefix or 'the model'}")
    return found


class LoraAdapter:
    """A validated adapter for one model: `merge(model, names)` folds it into whichever targeted
    weights among the just-loaded parameters `names` (each once per load)."""

    def __init__(self, path: Path, model: Any) -> None:
        import torch
        from safetensors import SafetensorError, safe_open

        self.path = path = Path(path)
        self.config = cfg = read_config(path)
        self.identity = identity(path)
        shapes = targets(model, cfg, path)
        weights = path / WEIGHTS
        expected = {f"{t}.lora_{s}" for t in shapes for s in ("A", "B")}
        state: dict[str, Any] = {}
        try:
            with safe_open(str(weights), framework="pt") as fh:
                keys = set(fh.keys())
                missing, unexpected = sorted(expected - keys), sorted(keys - expected)
                if missing or unexpected:
                    raise LoraError(
                        f"{weights}: the tensors do not match the configured targets: "
                        f"{len(missing)} missing{' (e.g. ' + missing[0] + ')' if missing else ''}, "
                        f"{len(unexpected)} unexpected{' (e.g. ' + unexpected[0] + ')' if unexpected else ''}")
                for key in sorted(expected):
                    state[key] = fh.get_tensor(key)
        except (SafetensorError, OSError, ValueError) as exc:
            raise LoraError(f"{weights} is not a readable safetensors file: {exc}") from None
        for name, (fan_in, fan_out) in shapes.items():
            for suffix, shape in (("A", (cfg.r, fan_in)), ("B", (fan_out, cfg.r))):
                key = f"{name}.lora_{suffix}"
                tensor = state[key]
                if not tensor.is_floating_point():
                    raise LoraError(f"{weights}: tensor {key} is {tensor.dtype}, expected a floating-point tensor")
                if tuple(tensor.shape) != shape:
                    raise LoraError(f"{weights}: tensor {key} has shape {tuple(tensor.shape)}, expected {shape} "
                                    f"(r={cfg.r})")
                if not bool(torch.isfinite(tensor).all()):
                    raise LoraError(f"{weights}: tensor {key} holds non-finite values")
        self._state = state
        self.targets = shapes

    def merge(self, model: Any, names: list[str]) -> list[str]:
        """W + alpha / r * B @ A (float32) for every targeted `<module>.weight` in `names`; returns
        the modules merged."""
        import torch

        merged = []
        with torch.no_grad():
            for name in names:
                module_name, _, leaf = name.rpartition(".")
                if leaf != "weight" or module_name not in self.targets:
                    continue
                weight = model.get_submodule(module_name).weight
                a = self._state[f"{module_name}.lora_A"].to(torch.float32)
                b = self._state[f"{module_name}.lora_B"].to(torch.float32)
                weight.copy_(torch.addmm(weight.float(), b, a, alpha=self.config.scale).to(weight.dtype))
                merged.append(module_name)
        return merged
