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
    from export.qwen3_tts.encoders import validation_audio
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
        assert len({tuple(f) for f in got[i]}) > 1, mode  # not one frame repeated
