"""Loading the VoxCPM2 reference implementation (the `voxcpm` package) for export and parity checks.

`voxcpm.model` imports its first-generation model (`voxcpm/model/voxcpm.py`) next to VoxCPM2, and
that module imports `torchaudio` at import time for prompt loading we never call; torchaudio would
pull another torch build. `voxcpm_imports` installs an inert stand-in for it while `voxcpm` is first
imported (export.reference.stubbed_imports). Nothing else of voxcpm's
declared dependencies (gradio, funasr, modelscope, ...) is needed for VoxCPM2 load and generate.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from export.reference import stubbed_imports
from ttscore.contract.errors import CheckpointError

_STUBBED = ("torchaudio",)


def voxcpm_imports() -> contextlib.AbstractContextManager[None]:
    """voxcpm's VoxCPM2 model imported, with a stand-in for torchaudio."""
    return stubbed_imports("voxcpm.model.voxcpm2", _STUBBED)


def reference_classes() -> dict[str, Any]:
    """The reference's config and module classes, by role."""
    with voxcpm_imports():
        from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
        from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2, audio_vae_v2
        from voxcpm.modules.locdit import unified_cfm
    return {
        "config": VoxCPMConfig,
        "model": VoxCPM2Model,
        "vae_config": AudioVAEConfigV2,
        "vae": AudioVAEV2,
        "vae_module": audio_vae_v2,
        "cfm_module": unified_cfm,
    }


def load_reference(checkpoint: str | Path, lora: str | Path | None = None) -> Any:
    """`VoxCPM2Model.from_local` on CPU, converted to float32 (export and parity run in float32).

    from_local loads with `strict=False`; a checkpoint whose tensors do not match the model exactly
    would load silently, so the key sets are compared here and any difference is a CheckpointError.
    `lora`: a native LoRA adapter directory applied the reference's own way (not merged): the model
    is built with its `LoRAConfig` (LoRALinear layers) and `load_lora_weights` must load every
    lora_A/lora_B the model has and skip none.
    """

    path = Path(checkpoint)
    classes = reference_classes()
    lora_config = None
    if lora is not None:
        with voxcpm_imports():
            from voxcpm.model.voxcpm2 import LoRAConfig
        raw = json.loads((Path(lora) / "lora_config.json").read_text(encoding="utf-8"))["lora_config"]
        lora_config = LoRAConfig(**raw)
    try:
        model = classes["model"].from_local(str(path), optimize=False, device="cpu", lora_config=lora_config)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: the voxcpm reference cannot load it: {exc}") from exc
    if lora is not None:
        loaded, skipped = model.load_lora_weights(str(lora), device="cpu")
        want = sorted(n for n, _ in model.named_parameters() if ".lora_" in n)
        if skipped or sorted(loaded) != want:
            raise CheckpointError(f"{lora}: the reference loaded {len(loaded)} of {len(want)} LoRA tensors, "
                                  f"skipped {skipped[:1]}")
    missing, unexpected = checkpoint_key_diff(model, path)
    missing = [n for n in missing if ".lora_" not in n]
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the model: {len(missing)} missing (e.g. {missing[:1]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:1]})"
        )
    to_float32(model)
    return model


class StagedVoxCPM2:
    """The reference `VoxCPM2Model` (float32) with its parameters on the meta device until an export
    stage asks for some of them: the VoxCPM2 use of the staged loading in export/weights.py
    (`load_tensors` / `unload_tensors`, as Qwen3-TTS's export.qwen3_tts.reference.StagedReference).

    `load_reference` materializes all ~2.39 B parameters in float32 (~10 GB at the released size).
    Here the module tree is built empty exactly as `from_local` builds it (same constructors, the
    same `.to(config dtype)` of its buffers, then `to_float32`), so the RoPE tables and static KV
    caches are what `load_reference` gives; the persistent buffers (AudioVAE's sr_bin_boundaries)
    are read from the checkpoint at once, and `loaded(names)` reads only the named parameters, one
    tensor at a time from `model.safetensors` / `audiovae.safetensors`, putting them back on the
    meta device when the block ends.
    """

    def __init__(self, checkpoint: str | Path, lora: Path | None = None) -> None:
        import torch
        from accelerate import init_empty_weights

        from export.weights import load_tensors

        self.checkpoint = path = Path(checkpoint)
        classes = reference_classes()
        with voxcpm_imports():
            from transformers import LlamaTokenizerFast
            from voxcpm.model.utils import get_dtype

        try:
            config = classes["config"].model_validate_json((path / "config.json").read_text(encoding="utf-8"))
            tokenizer = LlamaTokenizerFast.from_pretrained(str(path))
            self.files = checkpoint_files(path)
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path}: the voxcpm reference cannot load it: {exc}") from exc
        with init_empty_weights(include_buffers=False):
            vae_cfg = getattr(config, "audio_vae_config", None)
            vae = classes["vae"](config=vae_cfg) if vae_cfg else classes["vae"]()
            model = classes["model"](config, tokenizer, vae, None, device="cpu")
        model = model.to(get_dtype(model.config.dtype))  # as from_local: buffers rounded like the reference's
        model.audio_vae = model.audio_vae.to(torch.float32)
        model.eval()
        want = set(model.state_dict().keys())
        missing, unexpected = sorted(want - set(self.files)), sorted(set(self.files) - want)
        if missing or unexpected:
            raise CheckpointError(
                f"{path}: weights do not match the model: {len(missing)} missing (e.g. {missing[:1]}), "
                f"{len(unexpected)} unexpected (e.g. {unexpected[:1]})"
            )
        params = {n for n, _ in model.named_parameters()}
        load_tensors(model, sorted(want - params), self.files, path)  # persistent buffers, once
        to_float32(model)
        self.model = model
        # A startup LoRA adapter (export/voxcpm2/lora.py): validated whole against the module tree
        # now, merged into each targeted weight whenever a stage loads it.
        self.adapter = None
        self.merged: set[str] = set()
        if lora is not None:
            from .lora import LoraAdapter

            self.adapter = LoraAdapter(lora, model)

    def parameter_names(self, prefixes: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[str]:
        return [n for n, _ in self.model.named_parameters()
                if n.startswith(prefixes) and not (exclude and n.startswith(exclude))]

    @contextlib.contextmanager
    def loaded(self, prefixes: tuple[str, ...], exclude: tuple[str, ...] = ()) -> Iterator[Any]:
        """The model with the parameters under `prefixes` (but not `exclude`) loaded for the block."""
        from export.weights import load_tensors, unload_tensors

        names = self.parameter_names(prefixes, exclude)
        if not names:
            raise ValueError(f"no parameters under {prefixes}")
        try:
            load_tensors(self.model, names, self.files, self.checkpoint)
            if self.adapter is not None:
                self.merged.update(self.adapter.merge(self.model, names))
            yield self.model
        finally:
            unload_tensors(self.model, names)


def checkpoint_files(path: Path) -> dict[str, tuple[Path, str]]:
    """State-dict name -> (file, key) of `model` + `audiovae` (under `audio_vae.`), each stored as
    one file or sharded (export.weights.tensor_files)."""
    from export.weights import tensor_files

    return {**tensor_files(path, "model"), **tensor_files(path, "audiovae", "audio_vae.")}


def checkpoint_key_diff(model: Any, path: Path) -> tuple[list[str], list[str]]:
    """(missing, unexpected) tensor names of the checkpoint's `model` + `audiovae` weights vs the model."""
    have = set(checkpoint_files(path))
    want = set(model.state_dict().keys())
    return sorted(want - have), sorted(have - want)


def to_float32(model: Any) -> None:
    """Everything in float32, the static KV caches included (they are plain attributes, not buffers)."""
    import torch

    model.to(torch.float32)
    model.config.dtype = "float32"
    for lm in (model.base_lm, model.residual_lm):
        lm.setup_cache(1, model.config.max_length, "cpu", torch.float32)
    model.eval()


@contextlib.contextmanager
def fed_noise(noises: Iterator[Any]) -> Iterator[None]:
    """The reference's diffusion noise taken from `noises` (numpy arrays, one per `torch.randn` call
    of `UnifiedCFM.forward`, shaped as that call asks) instead of torch's global RNG, so a parity
    test feeds both implementations the same noise. Scoped: the module's `torch` is restored after."""
    import numpy as np
    import torch

    cfm = reference_classes()["cfm_module"]
    real = cfm.torch

    class _Torch:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def randn(*size: Any, device: Any = None, dtype: Any = None, **_: Any) -> Any:
            shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list) else tuple(size)
            arr = np.asarray(next(noises), dtype=np.float32)
            if arr.shape != shape:
                raise AssertionError(f"fed noise has shape {arr.shape}, the reference asks for {shape}")
            return torch.from_numpy(arr.copy()).to(device=device or "cpu", dtype=dtype or torch.float32)

    cfm.torch = _Torch()
    try:
        yield
    finally:
        cfm.torch = real
