"""A Gepard-1.0 checkpoint the project did not create (tests/gepard_foreign.py: transformers 5.14.1's
own config class and init, other dimensions, sidecar values and tokenizer class, float32, a [1]-shaped
audio_embed_scale, ignored cloning/MTP tensors) with a NanoCodec of another shape (torch's default
init, written in NeMo's archive layout here) exports, and our runtime makes exactly the reference's
frames with its noise fed; the streamed audio equals the whole decode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gepard_fixtures import reference
from test_gepard_parity import run_frames

pytestmark = [pytest.mark.parity, pytest.mark.slow]

FOREIGN = Path(__file__).resolve().parents[1] / "gepard_foreign.py"
CODEC = {"sample_rate": 22050, "samples_per_frame": 1024,
         "vector_quantizer": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.GroupFiniteScalarQuantizer",
                              "num_groups": 8, "num_levels_per_group": [8, 7, 6, 6]},
         "audio_decoder": {"_target_": "nemo.collections.tts.modules.audio_codec_modules.CausalHiFiGANDecoder",
                           "input_dim": 32, "up_sample_rates": [4, 4, 4, 4, 4], "base_channels": 64,
                           "in_kernel_size": 5, "out_kernel_size": 5, "resblock_kernel_sizes": [3, 5],
                           "resblock_dilation_sizes": [1, 2], "activation": "half_snake",
                           "output_activation": "clamp", "n_groups_equal_to_out_channels": True}}
CASES = (("Hello there, this is another voice.", 4, 14), ("Sunny", 9, 10))


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import refenv
    import torch

    from export.gepard.codec import NanoCodec, write_nemo

    out = tmp_path_factory.mktemp("gepard-foreign") / "ckpt"
    refenv.run(refenv.env_for("gepard"), FOREIGN, {}, [str(out)])
    torch.manual_seed(5)
    state = {f"audio_decoder.{k}": v for k, v in NanoCodec(CODEC).audio_decoder.state_dict().items()}
    (out / "nanocodec").mkdir()
    write_nemo(out / "nanocodec" / "codec.nemo", CODEC, state)
    return out


@pytest.fixture(scope="module")
def model(foreign: Path) -> Any:
    from export.exporter import export_checkpoint
    from ttscore.runtime.families import load_model

    export_checkpoint(foreign, foreign.parent / "x")
    return load_model(foreign.parent / "x")


def test_foreign_checkpoint_matches_the_reference(foreign: Path, model: Any) -> None:
    from ttscore.runtime.families.gepard.request import GepardRequest

    assert model.info.backbone.hidden_size == 48 and model.info.num_speaker_slots == 4
    assert model.info.temperature == 0.5 and model.info.stop_threshold == 0.4
    want = reference(foreign, "generate", {}, json.dumps([{"text": t, "seed": s, "max_new_tokens": n}
                                                           for t, s, n in CASES]))
    seqs = []
    for i, (text, seed, n) in enumerate(CASES):
        seq = model.admit(GepardRequest(text=text, seed=seed, max_new_tokens=n))
        np.testing.assert_array_equal(seq.ids, want[f"prompt_ids_{i}"])
        it = iter(zip(want[f"noise_heads_{i}"], want[f"noise0_{i}"], strict=True))
        seq.noise = lambda it=it: next(it)
        seqs.append(seq)
    for i, got in enumerate(run_frames(model, seqs)):
        assert got.shape[0] > 1
        np.testing.assert_array_equal(got, want[f"codes_{i}"])
    # "Sunny" is short: its text block is repeated (target 10, below 7, at most 4 copies)
    assert list(want["prompt_ids_1"]).count(model.info.start_of_text) > 1


def test_foreign_codec_streams_exactly(foreign: Path, model: Any) -> None:
    import torch

    from export.gepard.codec import load_codec

    codes = np.random.default_rng(3).integers(0, np.array([8, 7, 6, 6] * 8), size=(7, 32)).astype(np.int64)
    stream = model.vocoder.new_stream()
    pcm = np.concatenate([model.vocoder.decode([(stream, codes[a:b])])[0] for a, b in ((0, 2), (2, 3), (3, 7))])
    with torch.inference_mode():
        want = load_codec(foreign / "nanocodec" / "codec.nemo")(torch.from_numpy(codes.T[None].copy()))[0].numpy()
    assert pcm.shape == want.shape == (7 * 1024,) and np.abs(want).max() > 1e-3
    np.testing.assert_allclose(pcm, want, atol=1e-4)
