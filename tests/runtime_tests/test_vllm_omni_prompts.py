"""What each family feeds its model for a Speech API request, against vLLM-Omni 0.30.0's own request-to-prompt
code run from its release wheel (tests/vllm_omni_source.py) on the same tokenizer: the same requests in
every family (plain, instructions, reference, two sentences, Chinese, odd whitespace; the fields a family
takes). Equal ids, or, where the project follows the family's upstream package instead (issue 36, rule 2),
exactly the difference its export README lists under "Differences from vLLM-Omni 0.30.0".

Breeze-TTS-2 has its own (tests/export_tests/test_breeze_tts_2_parity.py: ids, codes and audio)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import vllm_omni_source
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny)
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny)
from gepard_fixtures import *  # noqa: F403  (gepard_tiny)
from omnivoice_fixtures import *  # noqa: F403  (omnivoice_tiny)
from vllm_omni_source import definitions
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny)

pytestmark = pytest.mark.parity

PLAIN = "Hello, how are you?"
TWO = "It is late. Let us go home!"
CHINESE = "你好，今天天气很好。"
ODD = "  Hello,\tworld \n\n  again  "
TEXTS = {"plain": PLAIN, "two sentences": TWO, "chinese": CHINESE, "odd whitespace": ODD}
INSTRUCTIONS = ("Speak slowly and warmly.", "  calm, low voice \n", "用温柔的语气说")
REF_TEXTS = ("Hello there", "This is the reference.", "  参考 文本  ")


@pytest.fixture(scope="module")
def qwen3_voice_design() -> Path:
    from artifacts import STORE

    from export.qwen3_tts.tiny import make_tiny

    return STORE.checkpoint("ckpt-voice_design", lambda out: make_tiny("voice_design", out, seed=0, greedy=False))


# --- Qwen3-TTS: the chat templates (prompt_embeds_builder.build_*_text) on the checkpoint's tokenizer ---------

def test_qwen3_tts_prompt_ids(qwen3_voice_design: Path) -> None:
    from transformers import AutoTokenizer

    from ttscore.runtime.families.qwen3_tts.checkpoint import read_checkpoint
    from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest, resolve
    from ttscore.runtime.families.qwen3_tts.tokenizer import (
        TextTokenizer,
        assistant_text,
        instruct_text,
        ref_text,
    )

    vo = definitions("vllm_omni/model_executor/models/qwen3_tts/prompt_embeds_builder.py",
                     ("build_assistant_text", "build_ref_text", "build_instruct_text"))
    hf = AutoTokenizer.from_pretrained(str(qwen3_voice_design))
    info = read_checkpoint(qwen3_voice_design, check_weights=False)
    ours = TextTokenizer(qwen3_voice_design)

    def vo_ids(text: str) -> list[int]:
        return list(hf(text, padding=False)["input_ids"])

    for text in TEXTS.values():
        for instructions in (None, *INSTRUCTIONS):
            r = resolve(Qwen3TTSRequest(text=text, instructions=instructions), info)
            assert ours.encode(assistant_text(r.text)) == vo_ids(vo.build_assistant_text(text)), text
            # vLLM-Omni builds the instruct prefix whenever `instruct.strip()` is non-empty, from the raw string
            want = vo_ids(vo.build_instruct_text(instructions)) if instructions and instructions.strip() else None
            got = ours.encode(instruct_text(r.instructions)) if r.instructions else None
            assert got == want, (text, instructions)
    for ref in REF_TEXTS:  # Base in-context cloning: the reference transcript's template
        assert ours.encode(ref_text(ref)) == vo_ids(vo.build_ref_text(ref)), ref


# --- VoxCPM2: build_voxcpm2_prompt's text ids; continuation tokenized as voxcpm 2.0.3 does ---------------------

def test_voxcpm2_prompt_ids(voxcpm2_tiny: Path) -> None:
    from transformers import AutoTokenizer

    from ttscore.runtime.families.voxcpm2.tokenizer import TextTokenizer

    vo = definitions("vllm_omni/model_executor/models/voxcpm2/voxcpm2_talker.py",
                     ("is_cjk_char", "build_cjk_split_map", "split_multichar_chinese", "build_voxcpm2_prompt"),
                     tokens_input=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids})
    hf = AutoTokenizer.from_pretrained(str(voxcpm2_tiny))
    split_map = vo.build_cjk_split_map(hf)
    ours = TextTokenizer(voxcpm2_tiny)

    def vo_text_ids(text: str) -> list[int]:
        prompt = vo.build_voxcpm2_prompt(None, hf, split_map, text)
        return prompt["additional_information"]["text_token_ids"][0]

    for text in (*TEXTS.values(), "我们一起去北京吧", "Mixed 中文 and English."):
        assert ours(text) == vo_text_ids(text), text
    # Continuation (ref_audio + ref_text): the talker prepends the transcript's own ids to the text's
    # (voxcpm2_talker.py, _build_prefill_inputs: `prompt_ids + token_ids`); the project, as voxcpm 2.0.3's
    # generate does, tokenizes `ref_text + input` as one string (model.py). Each piece has the same ids; the
    # two differ where the joined string tokenizes otherwise at the seam.
    differs = []
    for ref in REF_TEXTS:
        for text in (PLAIN, "how are you", CHINESE):
            assert vo_text_ids(ref) + vo_text_ids(text) == ours(ref) + ours(text), (ref, text)
            differs.append(ours(ref + text) != ours(ref) + ours(text))
    assert any(differs)  # e.g. "Hello there" + "how are you": one "▁" id more in vLLM-Omni's


# --- OmniVoice: pipeline_omnivoice's style + text ids; the project follows omnivoice 0.2.1 ---------------------

def test_omnivoice_prompt_ids(omnivoice_tiny: Path) -> None:
    from tokenizers import Tokenizer

    from ttscore.contract.omnivoice import text as rules
    from ttscore.runtime.families.omnivoice.tokenizer import OmniVoiceTokenizer

    vo = definitions("vllm_omni/diffusion/models/omnivoice/pipeline_omnivoice.py",
                     ("_combine_text", "_NONVERBAL_PATTERN", "_tokenize_with_nonverbal_tags"))
    tok = Tokenizer.from_file(str(omnivoice_tiny / "tokenizer.json"))
    ours = OmniVoiceTokenizer(omnivoice_tiny)
    names = json.loads((omnivoice_tiny / "config.json").read_text()).get("language_ids") or {"english": "en"}

    def vo_ids(text: str, ref_text: str | None, lang: str | None, instruct: str | None) -> list[int]:
        # OmniVoicePipeline.forward, verbatim in what it does with the request's fields
        lang, instruct = lang or "None", instruct or "None"
        style = f"<|denoise|><|lang_start|>{lang}<|lang_end|><|instruct_start|>{instruct}<|instruct_end|>"
        wrapped = f"<|text_start|>{vo._combine_text(ref_text=ref_text, text=text)}<|text_end|>"
        return list(tok.encode(style).ids) + vo._tokenize_with_nonverbal_tags(wrapped, tok)

    # The same builder with vLLM-Omni's choices gives vLLM-Omni's ids: the text rules are the same.
    for text in (*TEXTS.values(), "I am [laughter] so happy [sigh] really"):
        for ref in (None, *REF_TEXTS):
            for lang, instruct in ((None, None), ("English", "female, low pitch"), ("Auto", "a warm narrator")):
                assert ours.prompt(text, ref_text=ref, language=lang, instructions=instruct, denoise=True) == \
                    vo_ids(text, ref, lang, instruct), (text, ref, lang, instruct)
    # What the project feeds instead (omnivoice 0.2.1's generate, rule 2): <|denoise|> only when cloning;
    # `language` as the reference's language id ("Auto": none); instructions normalised (lower case, translated
    # to Chinese for a Chinese text); a cloning transcript ended with punctuation.
    denoise = tok.token_to_id("<|denoise|>")
    plain = ours.prompt(PLAIN, ref_text=None, language=None, instructions=None, denoise=False)
    assert vo_ids(PLAIN, None, None, None) == [denoise, *plain]
    lang = rules.resolve_language("English", names)
    assert lang != "English"
    assert ours.prompt(PLAIN, ref_text=None, language=lang, instructions=None, denoise=False) != \
        vo_ids(PLAIN, None, "English", None)[1:]
    assert rules.resolve_instructions("Female, Low Pitch", chinese_text=True) == "女，低音调"
    assert rules.clone_ref_text("Hello there") == "Hello there."
    cloned = ours.prompt(PLAIN, ref_text=rules.clone_ref_text("Hello there"), language=None, instructions=None,
                         denoise=True)
    assert len(cloned) == len(vo_ids(PLAIN, "Hello there", None, None)) + 1


# --- Fish Speech S2 Pro: prompt_utils.build_fish_* on the checkpoint's tokenizer --------------------------------

def test_fish_speech_prompt_ids(fish_tiny: Path) -> None:
    from transformers import AutoTokenizer

    from ttscore.runtime.families.fish_speech.prompt import FishPrompt

    vo = definitions("vllm_omni/model_executor/models/fish_speech/prompt_utils.py",
                     ("_LEGACY_SPEAKER_TAG_PATTERN", "_CANONICAL_SPEAKER_TAG_PATTERN", "_PHONEME_TAG_PATTERN",
                      "_CONTROL_TOKEN_PATTERN", "normalize_fish_speech_text", "_encode_plain_text",
                      "_encode_control_token", "_build_message_prefix", "_build_text_only_prompt_ids_from_normalized",
                      "build_fish_text_only_prompt_ids", "_build_voice_clone_prompt_ids_from_normalized",
                      "normalize_fish_voice_clone_texts", "build_fish_voice_clone_prompt_ids",
                      "FISH_TEXT_ONLY_SYSTEM_PROMPT", "FISH_CLONE_SYSTEM_PROMPT_PREFIX",
                      "FISH_CLONE_SYSTEM_PROMPT_SUFFIX"))
    hf = AutoTokenizer.from_pretrained(str(fish_tiny))
    ours = FishPrompt(fish_tiny / "tokenizer.json")
    semantic = list(range(hf.convert_tokens_to_ids("<|semantic:0|>"), hf.convert_tokens_to_ids("<|semantic:0|>") + 5))
    for text in (*TEXTS.values(), "<|speaker:1|>Two speakers <|speaker:2|>here.", "[speaker:0]legacy tag"):
        assert ours.text_only(text) == vo.build_fish_text_only_prompt_ids(hf, text)[0], text
        for ref in REF_TEXTS:
            ids, _ = ours.clone(text, ref, semantic)
            assert ids == vo.build_fish_voice_clone_prompt_ids(hf, text, ref, semantic)[0], (text, ref)


# --- Voxtral TTS: the adapter's mistral-common encode_speech_request ------------------------------------------

def test_voxtral_tts_prompt_ids(voxtral_tiny: Path) -> None:
    import importlib.util

    import refenv

    from ttscore.runtime.families.voxtral_tts.tokenizer import TekkenTokenizer

    if importlib.util.find_spec("mistral_common") is None:
        refenv.missing("mistral-common (requirements-nodeps.txt) is not installed in this environment")
    from mistral_common.protocol.speech.request import SpeechRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    source = vllm_omni_source.source("vllm_omni/entrypoints/openai/tts_adapters/voxtral.py")
    assert "encode_speech_request(\n                SpeechRequest(input=request.input, voice=request.voice)" in source
    tok = MistralTokenizer.from_file(str(voxtral_tiny / "tekken.json"))
    ours = TekkenTokenizer(voxtral_tiny / "tekken.json")
    for text in (*TEXTS.values(), "Numbers 1 2 3, symbols & <tags>."):
        for voice in ("casual_male", "neutral_female"):
            want = tok.encode_speech_request(SpeechRequest(input=text, voice=voice)).tokens
            assert ours.prompt(text, voice)[0] == want, (text, voice)


# --- Gepard-1.0: the adapter's tokenization + build_gepard_prompt_ids -----------------------------------------

def test_gepard_prompt_ids(gepard_tiny: Path) -> None:
    from transformers import AutoTokenizer
    from transformers.configuration_utils import PretrainedConfig

    from ttscore.runtime.families.gepard.checkpoint import read_checkpoint
    from ttscore.runtime.families.gepard.tokenizer import GepardTokenizer, prompt_ids

    cfg = definitions("vllm_omni/model_executor/models/gepard/configuration_gepard.py", ("_BACKBONE_MODEL_TYPE", "_MROPE_KEYS", "GepardConfig"), PretrainedConfig=PretrainedConfig,
                      logger=logging.getLogger("gepard"))
    prompt = definitions("vllm_omni/model_executor/models/gepard/prompt.py", ("build_gepard_prompt_ids",))
    config = cfg.GepardConfig(**json.loads((gepard_tiny / "gepard_config.json").read_text()))
    hf = AutoTokenizer.from_pretrained(str(gepard_tiny))
    info = read_checkpoint(gepard_tiny)
    ours = GepardTokenizer(gepard_tiny)
    for text in (*TEXTS.values(), "Hi", "A much longer sentence that is well past the repetition threshold."):
        want = prompt.build_gepard_prompt_ids(hf(text, add_special_tokens=False)["input_ids"], config=config)
        assert prompt_ids(ours.text_ids(text), info) == want, text


# --- CosyVoice3: the adapter's prompt-text rule, then the tokenizer (tests/runtime_tests/test_cosyvoice3_tokenizer)

def test_cosyvoice3_prompt_text(cosyvoice3_tiny: Path) -> None:
    from ttscore.contract.cosyvoice3 import prompt_text

    vo = definitions("vllm_omni/entrypoints/openai/tts_adapters/cosyvoice3.py", ("_PROMPT_DELIMITER", "_PROMPT_PREFIX"))
    adapter = vllm_omni_source.source("vllm_omni/entrypoints/openai/tts_adapters/cosyvoice3.py")
    assert "if _PROMPT_DELIMITER not in ref_text:\n            ref_text = f\"{_PROMPT_PREFIX}{ref_text}\"" in adapter

    def vo_prompt(ref_text: str) -> str:
        return ref_text if vo._PROMPT_DELIMITER in ref_text else f"{vo._PROMPT_PREFIX}{ref_text}"

    for ref in (*REF_TEXTS, "Custom system.<|endofprompt|>Hello there", ODD):
        assert prompt_text(ref) == vo_prompt(ref), ref



def test_qwen3_tts_dialect_voice_with_chinese_follows_qwen_tts() -> None:
    """`voice` dylan/eric with `language` "Chinese": qwen-tts (and the project, rule 2) switch to the voice's
    dialect id; vLLM-Omni's builder looks the language up first, so "Chinese" keeps the Chinese id and only
    "Auto" reaches its dialect override (export/qwen3_tts/README.md)."""
    from artifacts import STORE

    from export.qwen3_tts.tiny import make_tiny
    from ttscore.runtime.families.qwen3_tts.checkpoint import read_checkpoint
    from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest, resolve

    builder = vllm_omni_source.source("vllm_omni/model_executor/models/qwen3_tts/prompt_embeds_builder.py")
    lookup = builder.index("language_id = talker_config.codec_language_id.get(language.lower())")
    override = builder.index('if language_id is None and isinstance(language, str) and language.lower() in ("chinese", "auto"):')
    assert lookup < override  # "Chinese" is found first: no dialect for it in vLLM-Omni
    ckpt = STORE.checkpoint("ckpt-custom_voice", lambda out: make_tiny("custom_voice", out, seed=0, greedy=False))
    info = read_checkpoint(ckpt, check_weights=False)
    for voice, dialect in (("dylan", "beijing_dialect"), ("eric", "sichuan_dialect")):
        for language in ("Chinese", "Auto"):
            r = resolve(Qwen3TTSRequest(text=CHINESE, speaker=voice, language=language), info)
            assert r.language_id == info.languages[dialect], (voice, language)
        assert resolve(Qwen3TTSRequest(text=CHINESE, speaker="vivian", language="Chinese"), info).language_id == \
            info.languages["chinese"]
