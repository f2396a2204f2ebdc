"""VoxCPM2's AudioVAE models: the streaming decoder (audiovae_decoder, the family's vocoder; batching
in ttscore.backend.vocoder) and the encoder of reference audio (audiovae_encoder, voice features)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ttscore.backend.settings import ModelSettingsError, OrtModelSettings, open_graph
from ttscore.backend.vocoder import VocoderItem, check_state
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.families.voxcpm2.checkpoint import VoxCPM2Info, parse_config


@dataclass(frozen=True)
class DecoderFacts:
    state_size: int
    feat_dim: int


def voxcpm2_info(model: str, manifest: Manifest) -> VoxCPM2Info:
    if manifest.family != "voxcpm2" or "config.json" not in manifest.configs:
        raise ModelSettingsError(f"{model}: {manifest.path} is not a VoxCPM2 export (family {manifest.family!r})")
    return parse_config(dict(manifest.configs["config.json"]))


def decoder_facts(model: str, manifest: Manifest) -> DecoderFacts:
    from ttscore.runtime.families.voxcpm2.model import decoder_state_size

    info = voxcpm2_info(model, manifest)
    try:
        return DecoderFacts(decoder_state_size(manifest), info.feat_dim)
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None


def decoder_item(tensors: Mapping[str, np.ndarray], facts: DecoderFacts) -> VocoderItem:
    """Validate one request's tensors (with Triton's batch dim): latents [b, D, frames], state [b, S].
    Raises InvalidRequest naming the tensor."""
    latents = np.asarray(tensors["latents"]) if "latents" in tensors else None
    if latents is None:
        raise InvalidRequest("input 'latents' is required", "latents")
    if latents.ndim != 3 or latents.shape[1] != facts.feat_dim:
        raise InvalidRequest(f"input 'latents' must have shape [batch, {facts.feat_dim}, frames]", "latents")
    if not np.all(np.isfinite(latents)):
        raise InvalidRequest("input 'latents' must be finite", "latents")
    state = check_state(np.asarray(tensors["state"]) if "state" in tensors else None, latents.shape[0], facts.state_size)
    return VocoderItem({"latents": latents.astype(np.float32, copy=False), "state": state}, frames=int(latents.shape[2]))


def load_encoder(model: str, settings: OrtModelSettings) -> tuple[object, VoxCPM2Info]:
    """audiovae_encoder: the export's vae_encoder graph and the checkpoint's facts."""
    info = voxcpm2_info(model, settings.manifest)  # refuses another family's export first
    return open_graph(model, settings, "vae_encoder"), info


def encode_request(tensors: Mapping[str, np.ndarray], loaded: tuple[object, VoxCPM2Info]) -> dict[str, np.ndarray]:
    """audiovae_encoder: (audio, sample_rate, prompt?) -> {"ref_patches": [T, P, D]}; InvalidRequest naming the
    tensor."""
    from ttscore.runtime.families.voxcpm2.model import encode_reference

    encoder, info = loaded

    for name in ("audio", "sample_rate"):
        if name not in tensors:
            raise InvalidRequest(f"input '{name}' is required", name)
    prompt = bool(np.asarray(tensors["prompt"]).reshape(-1)[0]) if "prompt" in tensors else False
    rate = int(np.asarray(tensors["sample_rate"]).reshape(-1)[0])
    return {"ref_patches": encode_reference(
        encoder, info, np.asarray(tensors["audio"], np.float32).reshape(-1), rate,  # type: ignore[arg-type]
        pad="left" if prompt else "right", param="audio", rate_param="sample_rate",
    )}
