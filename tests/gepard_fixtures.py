"""Gepard-1.0's tiny checkpoint, the foreign checkpoint (one the project did not create: built in ref5 by
tests/gepard_foreign.py, with a NanoCodec of another shape) and their exports, made once per test
session (the tests that use them import these fixtures; the directory under the session's base temp is
the cache), and `reference`, which runs tests/gepard_reference.py in the family's reference environment
(ref5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

__all__ = ["gepard_artifacts", "gepard_foreign", "gepard_foreign_artifacts", "gepard_tiny", "reference",
           "reference_with_our_noise"]

REFERENCE = Path(__file__).resolve().parent / "gepard_reference.py"
FOREIGN = Path(__file__).resolve().parent / "gepard_foreign.py"
# The foreign checkpoint's NanoCodec: another shape than the real one (8 groups of [8, 7, 6, 6], 1024
# samples per frame), torch's default init, written in NeMo's archive layout.
FOREIGN_CODEC = {
    "sample_rate": 22050, "samples_per_frame": 1024,
    "vector_quantizer": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.GroupFiniteScalarQuantizer",
                         "num_groups": 8, "num_levels_per_group": [8, 7, 6, 6]},
    "audio_decoder": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.CausalHiFiGANDecoder",
                      "input_dim": 32, "up_sample_rates": [4, 4, 4, 4, 4], "base_channels": 64,
                      "in_kernel_size": 5, "out_kernel_size": 5, "resblock_kernel_sizes": [3, 5],
                      "resblock_dilation_sizes": [1, 2], "activation": "half_snake",
                      "output_activation": "clamp", "n_groups_equal_to_out_channels": True}}
FOREIGN_CODEC_FILE = Path("nanocodec") / "codec.nemo"


@pytest.fixture(scope="session")
def gepard_tiny() -> Path:
    from artifacts import STORE

    from export.gepard.tiny import make_tiny_gepard

    return STORE.checkpoint("gepard-tiny", lambda out: make_tiny_gepard(out, seed=0))


@pytest.fixture(scope="session")
def gepard_artifacts(gepard_tiny: Path) -> Path:
    from artifacts import STORE

    return STORE.export(gepard_tiny)


@pytest.fixture(scope="session")
def gepard_foreign() -> Path:
    import refenv
    from artifacts import STORE

    def make(out: Path) -> None:
        import torch

        from export.gepard.codec import NanoCodec, write_nemo

        refenv.run(refenv.env_for("gepard"), FOREIGN, {}, [str(out)])
        torch.manual_seed(5)
        state = {f"audio_decoder.{k}": v for k, v in NanoCodec(FOREIGN_CODEC).audio_decoder.state_dict().items()}
        (out / FOREIGN_CODEC_FILE).parent.mkdir()
        write_nemo(out / FOREIGN_CODEC_FILE, FOREIGN_CODEC, state)

    return STORE.checkpoint("gepard-foreign", make, sources=[FOREIGN, Path(__file__)])


@pytest.fixture(scope="session")
def gepard_foreign_artifacts(gepard_foreign: Path) -> Path:
    from artifacts import STORE

    return STORE.export(gepard_foreign)


def reference(checkpoint: Path, command: str, inputs: dict | None = None, arg: str = "{}") -> dict:
    """tests/gepard_reference.py in ref5."""
    import refenv

    return refenv.run(refenv.env_for("gepard"), REFERENCE, inputs or {}, [str(checkpoint), command, arg])


def reference_with_our_noise(checkpoint: Path, model: Any, requests: list[dict]) -> dict:
    """The reference's `generate` for `requests` ({"text", "seed", "max_new_tokens"}), each fed the Gumbel
    noise our runtime draws for it (the request admitted by `model`, an exported checkpoint's runtime
    model, and its own noise source drawn once per step, as many steps as it may take): the frames and
    prompt ids a served request with that seed must make."""
    from ttscore.runtime.families.gepard.request import GepardRequest

    noise: dict[str, np.ndarray] = {}
    for i, req in enumerate(requests):
        seq = model.admit(GepardRequest(text=req["text"], seed=req["seed"], max_new_tokens=req["max_new_tokens"]))
        draws = [seq.noise() for _ in range(seq.max_frames)]
        noise[f"noise_heads_{i}"] = np.stack([d[0] for d in draws])
        noise[f"noise0_{i}"] = np.stack([d[1] for d in draws])
    return reference(checkpoint, "generate", noise, json.dumps(requests))
