"""A Breeze-TTS-2 checkpoint the project did not create (tests/breeze_tts_2_foreign.py: transformers
5.14.1's own config classes and init, other dimensions, another tokenizer class, float32, the tied
audio table under the talker's name, an ignored codec tensor, no embed_text_tokens) exports, and our
runtime makes exactly the reference's codes in the four modes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from breeze_tts_2_fixtures import reference, run_codes
from test_breeze_tts_2_parity import CASES, FRAMES

pytestmark = [pytest.mark.parity, pytest.mark.slow]


def test_foreign_checkpoint_matches_the_reference(breeze_foreign: Path, breeze_foreign_export: Path) -> None:
    from export.tracing import validation_audio
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

    model: Any = load_model(breeze_foreign_export)
    assert model.info.text.stack.hidden_size == 40 and model.info.backbone_rope_theta == 50000.0
    codes = model.encode_reference(validation_audio(0.7, 5), 24000)
    got = run_codes(model, [BreezeRequest(text=c["text"], voice=c.get("voice"), instructions=c.get("instructions"),
                                          ref_text=c.get("ref_text"), ref_codes=codes if "ref_text" in c else None,
                                          max_new_tokens=FRAMES) for c in CASES.values()])
    want = reference(breeze_foreign, "generate", {"ref_codes": codes},
                     json.dumps([{**c, "max_new_tokens": FRAMES} for c in CASES.values()]))
    for i, mode in enumerate(CASES):
        seq = model.admit(BreezeRequest(text=CASES[mode]["text"], voice=CASES[mode].get("voice"),
                                        instructions=CASES[mode].get("instructions"),
                                        ref_text=CASES[mode].get("ref_text"),
                                        ref_codes=codes if "ref_text" in CASES[mode] else None))
        np.testing.assert_array_equal(seq.ids, want[f"prompt_ids_{i}"], err_msg=mode)
        assert got[i].shape[0] > 0, mode
        np.testing.assert_array_equal(got[i], want[f"codes_{i}"], err_msg=mode)
        # Not one frame repeated, unless the stop row ended it (this checkpoint's stops early now and then).
        assert len({tuple(f) for f in got[i]}) > 1 or got[i].shape[0] < FRAMES, mode


def test_foreign_checkpoint_stops_where_the_reference_stops(breeze_foreign: Path, breeze_foreign_export: Path) -> None:
    """The foreign checkpoint's stop row wins now and then (tests/breeze_tts_2_foreign.py): requests that the
    reference ends by itself before their budget end at the same frame here, with the same codes."""
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

    model: Any = load_model(breeze_foreign_export)
    cases = [{"text": "Good morning, how are you today?"}, {"text": "Hello world, good morning.", "voice": "S3"},
             {"text": "Hello from Breeze.", "voice": "S0", "instructions": "A calm warm voice, slowly."}]
    budget = 60
    want = reference(breeze_foreign, "generate", {}, json.dumps([{**c, "max_new_tokens": budget} for c in cases]))
    got = run_codes(model, [BreezeRequest(text=c["text"], voice=c.get("voice"), instructions=c.get("instructions"),
                                          max_new_tokens=budget) for c in cases])
    stopped = [want[f"codes_{i}"].shape[0] for i in range(len(cases))]
    assert all(1 <= n < budget for n in stopped), stopped  # every one ended by its stop row
    for i, c in enumerate(cases):
        np.testing.assert_array_equal(got[i], want[f"codes_{i}"], err_msg=str(c))
