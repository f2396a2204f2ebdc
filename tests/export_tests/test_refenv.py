"""The reference environments that `make setup` builds (tests/refenv.py, README "Reference environments").

- ref5 (.venv-ref5) has the pinned transformers 5.x, the same torch build as the main environment, and
  the model classes the next families' references need.
- A tiny random-weight Qwen3Model (a class both transformers lines have) gives the same forward in the
  main environment and in ref5: weights through a safetensors file, inputs and outputs through the
  .npz exchange of refenv.run, both ways.
- The helper's failures say what to do: an environment not built, a script that fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import refenv

pytestmark = [pytest.mark.parity]

PROBE = Path(__file__).resolve().parents[1] / "refenv_probe.py"
# The classes the next families' references are built on, and the release that brought each.
REF5_CLASSES = (
    "transformers.models.t5gemma2.modeling_t5gemma2:T5Gemma2TextEncoder",  # Breeze-TTS-2 (5.0)
    "transformers:Qwen3_5TextModel",  # Gepard-1.0 (5.2)
    "transformers:HiggsAudioV2TokenizerModel",  # OmniVoice's codec encoder (5.3)
)
TINY = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False}


def _str(value: np.ndarray) -> str:
    return str(value.item())


def test_ref5_has_the_pinned_transformers_and_the_next_families_classes():
    import torch

    got = refenv.run("ref5", PROBE, args=["versions", *REF5_CLASSES])
    pin = refenv.ENVS["ref5"].transformers_pin()
    assert pin.startswith("5."), pin
    assert _str(got["transformers"]) == pin
    assert _str(got["torch"]) == torch.__version__  # the same local build in both: no other torch was pulled
    assert ".venv-ref5" in _str(got["python"])


def test_main_has_the_4_57_transformers_the_qwen_tts_reference_pins():
    import transformers  # pytest runs in main

    assert transformers.__version__ == refenv.ENVS["main"].transformers_pin() == "4.57.3"
    assert not hasattr(transformers, "Qwen3_5TextModel")  # why ref5 exists


def test_tiny_qwen3_forward_agrees_across_environments(tmp_path):
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = transformers.Qwen3Model(transformers.Qwen3Config(**TINY)).eval()
    with torch.no_grad():  # random norms too, so every weight shapes the output
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    weights = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": "Qwen3Model", "config": "Qwen3Config", "kwargs": TINY}))

    rng = np.random.default_rng(7)
    inputs = {"input_ids": rng.integers(0, TINY["vocab_size"], size=(2, 11), dtype=np.int64),
              "attention_mask": np.ones((2, 11), dtype=np.int64)}
    inputs["attention_mask"][1, :3] = 0  # left padding: the mask must travel and be applied alike

    args = ["forward", str(config), str(weights)]
    main = refenv.run("main", PROBE, inputs, args)["last_hidden_state"]
    ref5 = refenv.run("ref5", PROBE, inputs, args)["last_hidden_state"]

    assert main.shape == ref5.shape == (2, 11, TINY["hidden_size"]) and main.dtype == ref5.dtype == np.float32
    assert np.isfinite(main).all() and main.std() > 0.1
    diff = float(np.abs(main - ref5)[inputs["attention_mask"].astype(bool)].max())
    print(f"\nmain (transformers 4.57.3) vs ref5: max |diff| {diff:.2e} over the unpadded positions")
    assert diff < 1e-5, diff
    # The comparison can fail: another seed's weights give another output.
    assert np.abs(main - main[::-1]).max() > 1e-2


def test_a_missing_environment_says_to_run_make_setup(tmp_path):
    missing = refenv.RefEnv("nowhere", ".venv-nowhere", "requirements-ref5.txt")
    with pytest.raises(refenv.RefEnvError, match=r"'nowhere' is not built .*run `make setup`"):
        refenv.python(missing)
    with pytest.raises(refenv.RefEnvError, match="no reference environment for family 'no_such_family'"):
        refenv.env_for("no_such_family")


def test_a_failing_script_reports_its_stderr(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("import sys\nprint('the reference broke', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(refenv.RefEnvError, match=r"(?s)exited with 3.*the reference broke"):
        refenv.run("ref5", script)
    silent = tmp_path / "silent.py"
    silent.write_text("pass\n")
    with pytest.raises(refenv.RefEnvError, match="wrote no outputs"):
        refenv.run("main", silent)


def test_every_family_has_a_built_environment():
    for family in refenv.FAMILY_ENV:
        assert refenv.python(refenv.env_for(family)).is_file()
