"""OmniVoice's text rules (ttscore.contract.omnivoice.text, written for this project) against the
reference package's: the duration estimator's weights for every code point, its estimate, the
prompt text, and the voice-design vocabulary and its normalisation."""

from __future__ import annotations

import sys

import pytest

from ttscore.contract import omnivoice as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.omnivoice import text as rules

pytestmark = [pytest.mark.parity]


@pytest.fixture(scope="module")
def ref() -> object:
    from export.omnivoice.reference import omnivoice_module

    return omnivoice_module()


def test_every_code_point_weighs_as_in_the_reference(ref: object) -> None:
    from omnivoice.utils.duration import RuleDurationEstimator

    est = RuleDurationEstimator()
    codes = [*range(0, 0x30000, 1), sys.maxunicode]
    diff = [hex(c) for c in codes if not (0xD800 <= c <= 0xDFFF) and est._get_char_weight(chr(c)) != rules.char_weight(chr(c))]
    assert not diff, diff[:20]


@pytest.mark.parametrize("text, ref_text, ref_frames", [
    ("Hello world.", None, None), ("x", None, None), ("A long sentence " * 20, "Nice to meet you.", 25),
    ("数字 123 and ÄÖÜ", "short", 7), ("", None, None), ("!!!", "...", 0),
])
def test_the_estimate_is_the_reference_s(ref: object, text: str, ref_text: str | None, ref_frames: int | None) -> None:
    from omnivoice.utils.duration import RuleDurationEstimator

    anchor_text, anchor = (ref_text, ref_frames) if ref_frames is not None and ref_text else (spec.ANCHOR_TEXT,
                                                                                                spec.ANCHOR_FRAMES)
    want = max(1, int(RuleDurationEstimator().estimate_duration(text, anchor_text, anchor)))
    assert rules.estimate_frames(text, ref_text, ref_frames, spec.ANCHOR_TEXT, spec.ANCHOR_FRAMES) == want


@pytest.mark.parametrize("text, ref_text", [
    ("hello  world\n", None), ("你好 world （test）", "ref  text"), ("a\tb", "  x  "), ("[laughter] hi [sigh]", None),
])
def test_prompt_text(ref: object, text: str, ref_text: str | None) -> None:
    assert rules.prompt_text(text, ref_text) == ref._combine_text(text, ref_text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("instructions, zh", [
    ("Female, Low Pitch", False), ("female，british accent", True), ("男，四川话", False), ("child, whisper", True),
    ("  , male ,", False), ("", False), ("very high pitch", False),
])
def test_instructions_normalise_as_the_reference(ref: object, instructions: str, zh: bool) -> None:
    assert rules.resolve_instructions(instructions, zh) == ref._resolve_instruct(instructions, use_zh=zh)  # type: ignore[attr-defined]


@pytest.mark.parametrize("instructions", ["robot voice", "male, female", "british accent, 四川话", "low pitch, high pitch"])
def test_instructions_the_reference_refuses_are_a_400_naming_the_field(ref: object, instructions: str) -> None:
    with pytest.raises(ValueError):
        ref._resolve_instruct(instructions)  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequest) as info:
        rules.resolve_instructions(instructions, False)
    assert info.value.param == "instructions"


def test_the_vocabulary_is_the_reference_s(ref: object) -> None:
    from omnivoice.utils import voice_design

    assert rules.VALID_ITEMS == voice_design._INSTRUCT_ALL_VALID
    assert sorted(map(sorted, rules.EXCLUSIVE)) == sorted(map(sorted, voice_design._INSTRUCT_MUTUALLY_EXCLUSIVE))


@pytest.mark.parametrize("text, chunk_chars", [
    ("Hello there. Mr. Smith went to Washington, D.C. on Jan. 5th! Did he? Yes.", 20),
    ("a. b. c. d. e. f.", 4), ("No punctuation at all in this one", 10), ("你好，世界。我很好！谢谢。", 4),
    ("“Quoted.” (Paren.) And... dots?! ok", 6), ("x. yy. zzz. wwww.", 1), (". , ; leading marks", 3),
])
def test_long_text_chunks_are_the_reference_s(ref: object, text: str, chunk_chars: int) -> None:
    from omnivoice.utils.text import chunk_text_punctuation

    assert rules.chunk_text(text, chunk_chars) == chunk_text_punctuation(text, chunk_chars, min_chunk_len=3)


@pytest.mark.parametrize("text", ["nice to meet you", "  done. ", "你好", "你好 world", "why?", "“quoted”", "", "  ",
                                  "a…", "end)", "x、", "tab\t"])
def test_the_cloning_transcript_is_punctuated_as_in_the_reference(ref: object, text: str) -> None:
    from omnivoice.utils.text import add_punctuation

    assert rules.clone_ref_text(text) == add_punctuation(text)
