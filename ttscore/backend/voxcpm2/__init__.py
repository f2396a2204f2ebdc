"""VoxCPM2 on Triton: the AudioVAE decoder (the streaming vocoder, one per served checkpoint) and
the AudioVAE encoder (voice features: reference audio -> latent patches)."""

from __future__ import annotations

from ttscore.backend.family import BackendFamily, TritonModel
from ttscore.contract import voxcpm2 as spec

FAMILY = BackendFamily(
    name=spec.FAMILY,
    models=(
        TritonModel(
            "audiovae_decoder",
            spec.vae_decoder_spec("feat_dim", "state_size"),  # type: ignore[arg-type]
            state_key="vae_decoder_state_size",
        ),
        TritonModel(spec.AUDIOVAE_ENCODER),
    ),
    vocoder="audiovae_decoder",
    voice_features=spec.AUDIOVAE_ENCODER,
)
