"""The NanoCodec port (export/gepard/codec.py) against NeMo's own `CausalHiFiGANDecoder` (nemo-toolkit
3.0.0's source, run in ref5 by tests/gepard_nemo_reference.py with stand-ins for the imports the
decoder never calls): NeMo loads the tiny archive's `audio_decoder.*` strictly (so the port's tensor
names are NeMo's), the port's whole decode equals NeMo's, and the exported codec_stream, streamed,
equals it within the export tolerance.

Needs the nemo-toolkit 3.0.0 wheel (not installed anywhere: `pip download --no-deps
nemo-toolkit==3.0.0`): its path in GEPARD_NEMO_WHEEL, or `wheels/` beside the ref5 environment. Without
it the test is skipped and says so."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest
from gepard_fixtures import *  # noqa: F403  (gepard_tiny, gepard_artifacts)

from ttscore.contract import gepard as spec

SCRIPT = Path(__file__).resolve().parents[1] / "gepard_nemo_reference.py"
WHEEL = "nemo_toolkit-3.0.0-py3-none-any.whl"
ARCHIVE = "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo"


def nemo_wheel() -> Path | None:
    import refenv

    given = os.environ.get("GEPARD_NEMO_WHEEL")
    places = [Path(given)] if given else []
    with contextlib.suppress(refenv.RefEnvError):
        places.append(refenv.python("ref5").parents[1] / "wheels" / WHEEL)
    return next((p for p in places if p.is_file()), None)


NEMO_WHEEL = nemo_wheel()
pytestmark = [pytest.mark.parity, pytest.mark.export]


@pytest.fixture(autouse=True)
def _wheel_given() -> None:
    if NEMO_WHEEL is None:
        import refenv

        refenv.missing(f"NeMo reference not run: no {WHEEL} (set GEPARD_NEMO_WHEEL; "
                       "`pip download --no-deps nemo-toolkit==3.0.0`)")


def test_port_equals_nemo_causal_hifigan_decoder(gepard_tiny: Path, gepard_artifacts: Path) -> None:
    import refenv
    import torch

    from export.gepard.codec import load_codec
    from export.tracing import ort_run, ort_session
    from ttscore.contract.manifest import read_manifest

    wheel = NEMO_WHEEL
    assert wheel is not None
    codes = np.random.default_rng(7).integers(0, np.array(spec.head_levels()), size=(2, 8, 32)).astype(np.int64)
    got = refenv.run("ref5", SCRIPT, {"codes": codes.transpose(0, 2, 1).copy()}, [str(wheel), str(gepard_tiny / ARCHIVE)])
    want = got["audio"]
    codec = load_codec(gepard_tiny / ARCHIVE)
    assert sorted(str(n) for n in got["names"]) == sorted(codec.audio_decoder.state_dict())
    with torch.inference_mode():
        port = codec(torch.from_numpy(codes).transpose(1, 2)).numpy()
    assert want.shape == port.shape == (2, 8 * 1024) and np.abs(want).max() > 0.05
    np.testing.assert_allclose(port, want, atol=1e-6)
    m = read_manifest(gepard_artifacts)
    assert m.code2wav_state_size is not None
    sess = ort_session(gepard_artifacts / "codec_stream.onnx")
    state = np.zeros((2, m.code2wav_state_size), np.float32)
    pieces = []
    for a, b in ((0, 3), (3, 4), (4, 8)):
        pcm, state = ort_run(sess, {"codes": codes[:, a:b], "state": state})
        pieces.append(pcm)
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), want, atol=1e-4)
