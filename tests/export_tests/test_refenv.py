"""The reference environments that `make setup` builds (tests/refenv.py, docs/families.md, "Reference environments").

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


def test_runs_are_isolated_and_start_as_a_fresh_interpreter(tmp_path, monkeypatch):
    """The worker forks each run from the same freshly imported state: what one script puts in
    sys.modules or draws from torch's global generator is gone for the next (a fresh interpreter seeds
    that generator at random, so a reference that needs a seed sets one either way). The slow path
    (TTS_REFENV_WORKER=0, a fresh interpreter per run) gives the same answers."""
    script = tmp_path / "state.py"
    script.write_text(
        "import sys, types\nimport numpy as np\nimport torch\nfrom refenv import serve\n"
        "seen = 'refenv_test_stub' in sys.modules\n"
        "sys.modules['refenv_test_stub'] = types.ModuleType('refenv_test_stub')\n"
        "serve(lambda inputs: {'seen': np.array(seen), 'draw': torch.rand(4).numpy(), 'pid': np.array(__import__('os').getpid())})\n")
    first = refenv.run("main", script)
    second = refenv.run("main", script)
    assert not first["seen"] and not second["seen"]
    assert first["pid"] != second["pid"]
    np.testing.assert_array_equal(first["draw"], second["draw"])
    monkeypatch.setenv(refenv.WORKER_ENV, "0")
    fresh = refenv.run("main", script)
    assert not fresh["seen"] and fresh["draw"].shape == (4,)


def test_a_run_past_its_timeout_is_killed_and_the_worker_serves_the_next(tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text("import time\nprint('still going', flush=True)\ntime.sleep(60)\n")
    with pytest.raises(refenv.RefEnvError, match=r"(?s)ran past 2 s.*still going"):
        refenv.run("ref5", slow, timeout_s=2)
    quick = tmp_path / "quick.py"
    quick.write_text("import numpy as np\nfrom refenv import serve\nserve(lambda inputs, x: {'x': np.array(int(x))})\n")
    assert int(refenv.run("ref5", quick, args=["7"])["x"]) == 7


def test_an_exception_reports_its_traceback(tmp_path):
    script = tmp_path / "raises.py"
    script.write_text("raise ValueError('no such layer')\n")
    with pytest.raises(refenv.RefEnvError, match=r"(?s)exited with 1.*ValueError: no such layer"):
        refenv.run("main", script)


def test_a_script_can_ask_for_a_fresh_interpreter(tmp_path):
    """A script that stubs a module before transformers is imported (omnivoice_codec_ref5.py) runs in a
    fresh interpreter: transformers is not imported yet when it starts."""
    script = tmp_path / "fresh.py"
    script.write_text("import sys\nimport numpy as np\nfrom refenv import serve\n"
                      f"{refenv.FRESH_MARK}\n"
                      "serve(lambda inputs: {'imported': np.array('transformers' in sys.modules)})\n")
    assert not refenv.run("ref5", script)["imported"]
    script.write_text(script.read_text().replace(refenv.FRESH_MARK, ""))
    assert refenv.run("ref5", script)["imported"]  # the worker's imports
