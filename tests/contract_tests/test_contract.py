"""ttscore.contract: request rules, the typed manifest and usage, as both sides of the wire use them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import DEFAULT_FAMILY, read_manifest
from ttscore.contract.qwen3_tts import MAX_NEW_TOKENS_LIMIT, RULES
from ttscore.contract.usage import Usage

pytestmark = pytest.mark.unit


def test_field_rule_ranges_types_and_defaults():
    rule = RULES.field("max_new_tokens")
    assert rule.resolve(None) == rule.default and rule.check(None) is None
    assert rule.check(np.int32(7)) == 7  # numpy integers come from the tensor side
    for bad in (0, MAX_NEW_TOKENS_LIMIT + 1, True, 3.0, "5"):
        with pytest.raises(InvalidRequest) as exc:
            rule.check(bad)
        assert exc.value.param == "max_new_tokens"
    with pytest.raises(InvalidRequest, match="between 0 and"):
        RULES.field("seed").check(-1)
    with pytest.raises(KeyError):
        RULES.field("no_such_field")


def test_task_rules_exclusive_and_required_fields():
    RULES.check_task_fields("Base", {"ref_audio": "data:...", "ref_text": "hi"})
    with pytest.raises(InvalidRequest) as exc:
        RULES.check_task_fields("CustomVoice", {"ref_text": "hi"})
    assert exc.value.param == "ref_text" and "Base" in exc.value.message
    with pytest.raises(InvalidRequest) as exc:
        RULES.check_task_fields("VoiceDesign", {"instructions": "  "})
    assert exc.value.param == "instructions"
    RULES.check_task_fields("VoiceDesign", {"instructions": "a calm voice"})


def _write(tmp_path, **raw):
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    return tmp_path


def test_manifest_is_typed_and_checked(tmp_path):
    art = _write(tmp_path, format_version=1, variant="custom_voice", sample_rate=24000, samples_per_frame=1920,
                 speakers={"Vivian": 3000}, languages=["English"], code2wav={"state_size": 12},
                 source={"fingerprint": "abc", "files": {"speech_tokenizer/model.safetensors": {"sha256": "f00"}}})
    m = read_manifest(art)
    assert m.family == DEFAULT_FAMILY and m.variant == "custom_voice" and m.fingerprint == "abc"
    assert m.speakers == {"vivian": 3000} and m.languages == ("english",) and m.code2wav_state_size == 12
    assert m.source_sha256("speech_tokenizer/model.safetensors") == "f00" and m.source_sha256("x") is None
    with pytest.raises(ArtifactError, match="format_version"):
        read_manifest(_write(tmp_path, format_version=2))
    with pytest.raises(ArtifactError, match="mistypes"):
        read_manifest(_write(tmp_path, format_version=1, speakers={"vivian": "loud"}))
    with pytest.raises(ArtifactError, match="triton-tts export"):
        read_manifest(tmp_path / "missing")


def test_unknown_family_is_a_clear_artifact_error(tmp_path):
    from ttscore.runtime.families import load_model

    art = _write(tmp_path, format_version=1, family="no_such_family", variant="x", sample_rate=1, samples_per_frame=1)
    with pytest.raises(ArtifactError, match="unknown model family 'no_such_family'"):
        load_model(art)


def test_usage_wire_layout_round_trips():
    u = Usage(text_tokens=18, audio_tokens=101, output_tokens=77)
    t = u.to_tensor()
    assert t.dtype == np.int32 and t.tolist() == [18, 101, 77]
    assert Usage.from_tensor(t) == u


def test_every_family_taking_a_seed_declares_how_it_samples() -> None:
    # FamilyRules.sampling defaults to UNSEEDED (never replayed); a family with a `seed` field that
    # forgot to declare SEEDED or GREEDY would silently lose mid-stream failover (gateway.replay).
    from ttscore.contract import families
    from ttscore.contract.rules import UNSEEDED

    forgot = [f for f, rules in families.RULES.items() if rules.has_field("seed") and rules.sampling == UNSEEDED]
    assert not forgot, f"families with a seed field but sampling=UNSEEDED: {forgot}"
