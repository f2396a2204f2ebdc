"""tests/gepard_reference.py (the reference the parity tests use) against vLLM-Omni 0.30.0's own Gepard
code run without vLLM (tests/gepard_vllm_omni.py: the real GepardConfig, build_gepard_prompt_ids,
_build_gather_mask, _sample_frame with the request's seeded torch generator, _audio_frame_embed):
the same prompt ids, frames and stop for the parity cases and the foreign-like short text.

Needs the vllm-omni 0.30.0 wheel (not installed: `pip download --no-deps vllm-omni==0.30.0`): its path
in GEPARD_VLLM_OMNI_WHEEL, or `wheels/` beside the ref5 environment; skipped, saying so, without it."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from gepard_fixtures import *  # noqa: F403  (gepard_tiny)
from gepard_fixtures import reference
from test_gepard_parity import CASES

SCRIPT = Path(__file__).resolve().parents[1] / "gepard_vllm_omni.py"
WHEEL = "vllm_omni-0.30.0-py3-none-any.whl"


def vllm_omni_wheel() -> Path | None:
    import refenv

    given = os.environ.get("GEPARD_VLLM_OMNI_WHEEL")
    places = [Path(given)] if given else []
    with contextlib.suppress(refenv.RefEnvError):
        places.append(refenv.python("ref5").parents[1] / "wheels" / WHEEL)
    return next((p for p in places if p.is_file()), None)


VLLM_OMNI_WHEEL = vllm_omni_wheel()
pytestmark = [pytest.mark.parity, pytest.mark.export]


@pytest.fixture(autouse=True)
def _wheel_given() -> None:
    if VLLM_OMNI_WHEEL is None:
        import refenv

        refenv.missing(f"vLLM-Omni check not run: no {WHEEL} (set "
                       "GEPARD_VLLM_OMNI_WHEEL; `pip download --no-deps vllm-omni==0.30.0`)")


def test_the_reference_samples_as_vllm_omni_does(gepard_tiny: Path) -> None:
    import refenv

    reqs = json.dumps([{"text": t, "seed": s, "max_new_tokens": n} for t, s, n in CASES])
    got = refenv.run("ref5", SCRIPT, {}, [str(VLLM_OMNI_WHEEL), str(gepard_tiny), reqs])
    want = reference(gepard_tiny, "generate", {}, reqs)
    for i in range(len(CASES)):
        for key in ("prompt_ids", "codes", "stopped"):
            np.testing.assert_array_equal(got[f"{key}_{i}"], want[f"{key}_{i}"], err_msg=f"case {i} {key}")
    assert any(bool(got[f"stopped_{i}"]) for i in range(len(CASES)))
