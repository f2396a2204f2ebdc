"""export/qwen3_tts/tiny.py: layout, schema, determinism, and that the reference loads and speaks from it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from export.qwen3_tts import tiny
from ttscore.runtime.families.qwen3_tts.checkpoint import REQUIRED_FILES, WEIGHT_STEMS, read_checkpoint

PROMPT = "<|im_start|>assistant\nHello world.<|im_end|>\n<|im_start|>assistant\n"
# <|im_start|> assistant \n | Hello Ġworld . | <|im_end|> \n <|im_start|> assistant \n
_V = tiny._vocab()
PROMPT_IDS = [151644, 77091, 198, _V["Hello"], _V["Ġworld"], _V["."], 151645, 198, 151644, 77091, 198]


def _digests(path: Path) -> dict[str, str]:
    return {str(rel): hashlib.sha256((path / rel).read_bytes()).hexdigest() for rel in tiny.iter_files(path)}


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {
        "custom_voice": tiny.make_tiny("custom_voice", root / "custom_voice"),
        # greedy=True: the parity test below relies on generation_config.json alone for greedy decoding
        "voice_design": tiny.make_tiny("voice_design", root / "voice_design", greedy=True),
        "base": tiny.make_tiny("base", root / "base"),
    }


# ---- configs (pure) -------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("size", tiny.SIZES)
@pytest.mark.parametrize("variant", tiny.VARIANTS)
def test_model_config_schema(variant: str, size: str) -> None:
    cfg = tiny.model_config(variant, size)
    assert cfg["model_type"] == "qwen3_tts"
    assert cfg["architectures"] == ["Qwen3TTSForConditionalGeneration"]
    assert cfg["tokenizer_type"] == "qwen3_tts_tokenizer_12hz"
    assert cfg["tts_model_type"] == variant
    assert cfg["tts_model_size"] == {"tiny": "tiny", "0.6b": "0b6", "1.7b": "1b7"}[size]
    assert cfg["torch_dtype"] == ("float32" if size == "tiny" else "bfloat16")
    assert (cfg["im_start_token_id"], cfg["im_end_token_id"]) == (151644, 151645)
    assert (cfg["tts_pad_token_id"], cfg["tts_bos_token_id"], cfg["tts_eos_token_id"]) == (
        151671,
        151672,
        151673,
    )
    assert cfg["assistant_token_id"] == 77091

    talker = cfg["talker_config"]
    cp = talker["code_predictor_config"]
    assert (talker["vocab_size"], talker["text_vocab_size"], talker["num_code_groups"]) == (3072, 151936, 16)
    assert (cp["vocab_size"], cp["num_code_groups"]) == (2048, 16)
    assert {k: talker[k] for k in tiny.CODEC_IDS} == {
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_think_id": 2154,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
    }
    rope = talker["rope_scaling"]
    assert rope["interleaved"] is True and rope["rope_type"] == rope["type"] == "default"
    assert sum(rope["mrope_section"]) * 2 == talker["head_dim"]

    langs = talker["codec_language_id"]
    assert langs["english"] == 2050 and langs["chinese"] == 2055 and len(langs) >= 10
    if variant == "custom_voice":
        assert langs["beijing_dialect"] == 2074 and langs["sichuan_dialect"] == 2062
        spk, dialect = talker["spk_id"], talker["spk_is_dialect"]
        assert {"vivian": 3065, "ryan": 3061, "eric": 2875, "dylan": 2878}.items() <= spk.items()
        assert set(dialect) == set(spk)  # every speaker listed, False or the dialect name
        assert dialect["eric"] == "sichuan_dialect" and dialect["dylan"] == "beijing_dialect"
        assert dialect["vivian"] is False
        assert all(d is False or d in langs for d in dialect.values())
    else:
        assert "beijing_dialect" not in langs
        assert talker["spk_id"] == {} and talker["spk_is_dialect"] == {}

    if variant == "base":
        se = cfg["speaker_encoder_config"]
        assert se["enc_dim"] == talker["hidden_size"] and se["mel_dim"] == 128 and se["sample_rate"] == 24000
    else:
        assert "speaker_encoder_config" not in cfg

    if size == "tiny":
        assert (talker["hidden_size"], talker["num_hidden_layers"], talker["head_dim"]) == (64, 2, 16)
        assert cp["hidden_size"] == (32 if variant == "voice_design" else 64)
    else:
        assert talker["hidden_size"] == {"0.6b": 1024, "1.7b": 2048}[size]
        assert talker["intermediate_size"] == {"0.6b": 3072, "1.7b": 6144}[size]
        assert (
            talker["num_hidden_layers"],
            talker["num_attention_heads"],
            talker["num_key_value_heads"],
        ) == (28, 16, 8)
        assert rope["mrope_section"] == [24, 20, 20]
        assert (cp["hidden_size"], cp["num_hidden_layers"], cp["intermediate_size"]) == (1024, 5, 3072)
        if variant == "base":
            assert cfg["speaker_encoder_config"]["enc_channels"] == [512, 512, 512, 512, 1536]


@pytest.mark.unit
@pytest.mark.parametrize("size", tiny.SIZES)
def test_speech_tokenizer_config(size: str) -> None:
    from transformers import MimiConfig

    cfg = tiny.speech_tokenizer_config(size)
    assert cfg["model_type"] == "qwen3_tts_tokenizer_12hz"
    assert cfg["architectures"] == ["Qwen3TTSTokenizerV2Model"]
    assert cfg["encoder_valid_num_quantizers"] == 16
    assert cfg["input_sample_rate"] == cfg["output_sample_rate"] == 24000
    assert cfg["decode_upsample_rate"] == cfg["encode_downsample_rate"] == 1920
    dec, enc = cfg["decoder_config"], cfg["encoder_config"]
    assert (dec["sliding_window"], dec["num_quantizers"], dec["codebook_size"]) == (72, 16, 2048)
    assert dec["upsample_rates"] == [8, 5, 4, 3] and dec["upsampling_ratios"] == [2, 2]
    mimi = MimiConfig(**{k: v for k, v in enc.items() if k != "model_type"})
    assert mimi.frame_rate == 12.5 and mimi.sampling_rate == 24000
    assert int(np.prod(mimi.upsampling_ratios)) * mimi.compress == 1920
    assert mimi.codebook_size == 2048 and mimi.num_quantizers >= 16
    if size != "tiny":
        assert (dec["latent_dim"], dec["decoder_dim"], dec["hidden_size"], dec["head_dim"]) == (
            1024,
            1536,
            512,
            64,
        )
        assert (enc["hidden_size"], enc["num_quantizers"], enc["codebook_dim"]) == (512, 32, 256)


@pytest.mark.unit
def test_generation_config() -> None:
    real = tiny.generation_config()
    assert real == {
        "do_sample": True,
        "repetition_penalty": 1.05,
        "temperature": 0.9,
        "top_p": 1.0,
        "top_k": 50,
        "subtalker_dosample": True,
        "subtalker_temperature": 0.9,
        "subtalker_top_p": 1.0,
        "subtalker_top_k": 50,
        "max_new_tokens": 8192,
    }
    greedy = tiny.generation_config(greedy=True)
    assert greedy["do_sample"] is False and greedy["subtalker_dosample"] is False
    assert {k: v for k, v in greedy.items() if "dosample" not in k and k != "do_sample"} == {
        k: v for k, v in real.items() if "dosample" not in k and k != "do_sample"
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    ("variant", "size", "expected_m"),
    [
        # MODEL_FACTS.md "Real sizes": talker / text / code predictor / code2wav, in millions
        ("custom_voice", "0.6b", {"talker": 447, "text": 318, "code_predictor": 142, "code2wav": 114}),
        ("voice_design", "1.7b", {"talker": 1422, "text": 320, "code_predictor": 175, "code2wav": 114}),
    ],
)
def test_real_sizes_match_the_released_parameter_counts(
    variant: str, size: str, expected_m: dict[str, int]
) -> None:
    counts = tiny.parameter_counts(variant, size)
    for k, m in expected_m.items():
        assert abs(counts[k] / 1e6 - m) < 1, (k, counts[k])
    assert "speaker_encoder" not in counts


# ---- text tokenizer (pure) ------------------------------------------------------------------------
@pytest.mark.unit
def test_bpe_vocab_layout() -> None:
    vocab = tiny._vocab()
    assert sorted(vocab.values()) == list(range(151643))
    byte_chars = list(tiny._bytes_to_unicode().values())
    assert [vocab[c] for c in byte_chars] == list(range(256))  # Qwen2/GPT-2 byte order
    assert (vocab["Ġ"], vocab["Ċ"], vocab["!"]) == (220, 198, 0)
    assert (vocab["assistant"], vocab["user"]) == (77091, 872)
    merges = tiny._learn_merges()
    assert 200 <= len(merges) <= 1000
    for a, b in merges:
        assert a in vocab and b in vocab and a + b in vocab
    for word in ("Hello", "Ġworld", "Ġthe", "Ġvoice", "ĊĊ", "HelloWorld"):
        assert word in vocab
    added = {int(i): v["content"] for i, v in tiny.tokenizer_config()["added_tokens_decoder"].items()}
    assert (
        added[151643] == "<|endoftext|>" and added[151644] == "<|im_start|>" and added[151645] == "<|im_end|>"
    )
    assert [added[i] for i in range(151669, 151676)] == [
        "<|audio_start|>",
        "<|audio_end|>",
        "<tts_pad>",
        "<tts_text_bos>",
        "<tts_text_eod>",
        "<tts_text_bos_single>",
        "<|audio_pad|>",
    ]
    assert sorted(added) == list(range(151643, 151676))


@pytest.mark.unit
def test_tokenizer_files_give_real_ids_outside_transformers(tiny_dirs: dict[str, Path]) -> None:
    """A plain `tokenizers` pipeline built from vocab.json + merges.txt puts added tokens on their real ids."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    d = tiny_dirs["custom_voice"]
    tok = Tokenizer(models.BPE.from_file(str(d / "vocab.json"), str(d / "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(tiny.CHAT_LM_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    tok.add_special_tokens(
        [
            AddedToken(v["content"], special=True, normalized=False)
            for _, v in sorted(cfg["added_tokens_decoder"].items())
        ]
    )
    assert tok.encode(PROMPT).ids == PROMPT_IDS
    assert tok.encode("<tts_pad><tts_text_bos><tts_text_eod>").ids == [151671, 151672, 151673]
    assert tok.encode("<|im_start|>user\n").ids == [151644, 872, 198]
    assert tok.decode(tok.encode("Hello world.").ids) == "Hello world."


# ---- files on disk --------------------------------------------------------------------------------
@pytest.mark.unit
def test_layout_is_complete(tiny_dirs: dict[str, Path]) -> None:
    for variant, d in tiny_dirs.items():
        assert sorted(str(p) for p in tiny.iter_files(d)) == sorted(REQUIRED_FILES + tuple(f"{s}.safetensors" for s in WEIGHT_STEMS))
        info = read_checkpoint(d)
        assert info.variant == variant
        assert info.samples_per_frame == 1920 and info.sample_rate == 24000
        assert not list(d.parent.glob(".*tmp-*")) and not list(d.parent.glob(".*old-*"))
        pre = json.loads((d / "speech_tokenizer" / "preprocessor_config.json").read_text())
        assert pre["feature_extractor_type"] == "EncodecFeatureExtractor" and pre["sampling_rate"] == 24000
        assert (
            json.loads((d / "speech_tokenizer" / "configuration.json").read_text())["framework"] == "pytorch"
        )


@pytest.mark.unit
def test_weights_are_named_and_typed_as_released(tiny_dirs: dict[str, Path]) -> None:
    from safetensors import safe_open

    for variant, d in tiny_dirs.items():
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            keys = set(f.keys())
            assert {f.get_slice(k).get_dtype() for k in keys} == {"F32"}
            assert f.get_slice("talker.model.text_embedding.weight").get_shape() == [151936, 32]
            assert f.get_slice("talker.model.codec_embedding.weight").get_shape() == [3072, 64]
        assert any(k.startswith("speaker_encoder.") for k in keys) == (variant == "base")
        assert any("small_to_mtp_projection" in k for k in keys) == (variant == "voice_design")
        with safe_open(str(d / "speech_tokenizer" / "model.safetensors"), "pt") as f:
            st_keys = set(f.keys())
            usage = f.get_tensor("decoder.quantizer.rvq_first.vq.layers.0._codebook.cluster_usage")
            emb = f.get_tensor("decoder.quantizer.rvq_first.vq.layers.0._codebook.embedding_sum")
        assert {k.split(".")[0] for k in st_keys} == {"encoder", "decoder"}
        assert float(emb.abs().mean()) > 0.1 and float(usage.min()) > 0  # codebooks filled, not silent


@pytest.mark.unit
def test_deterministic(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    first = _digests(tiny_dirs["base"])
    again = tiny.make_tiny("base", tmp_path / "again")
    assert _digests(again) == first
    tiny.make_tiny("base", again)  # replacing an existing checkpoint in place
    assert _digests(again) == first
    other = _digests(tiny.make_tiny("base", tmp_path / "seed1", seed=1))
    assert other["model.safetensors"] != first["model.safetensors"]
    assert other["config.json"] == first["config.json"] and other["vocab.json"] == first["vocab.json"]
    # one speech tokenizer for every variant, as released
    assert (
        _digests(tiny_dirs["custom_voice"])["speech_tokenizer/model.safetensors"]
        == first["speech_tokenizer/model.safetensors"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "seed1"]


@pytest.mark.unit
def test_refuses_to_replace_a_foreign_directory(tmp_path: Path) -> None:
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        tiny.make_tiny("custom_voice", foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError):
        tiny.make_tiny("chatbot", tmp_path / "x")
    with pytest.raises(ValueError):
        tiny.make_tiny("base", tmp_path / "x", size="7b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]


@pytest.mark.unit
def test_failure_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(tensors: dict[str, Any], path: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(tiny, "save_weights", boom)
    with pytest.raises(OSError, match="disk full"):
        tiny.make_tiny("voice_design", tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


# ---- the reference loads and speaks -----------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tiny_dirs: dict[str, Path]) -> Any:
    from export.qwen3_tts.reference import load_reference

    cache: dict[str, Any] = {}

    def get(variant: str) -> Any:
        if variant not in cache:
            cache[variant] = load_reference(tiny_dirs[variant])
        return cache[variant]

    return get


def _check_audio(result: tuple[list[np.ndarray], int], max_frames: int) -> np.ndarray:
    wavs, sr = result
    assert sr == 24000 and len(wavs) == 1
    wav = np.asarray(wavs[0])
    frames, rest = divmod(wav.shape[0], 1920)
    assert rest == 0 and 1 <= frames <= max_frames
    rms = float(np.sqrt(np.mean(wav.astype(np.float64) ** 2)))
    assert 0.02 < rms < 0.7, rms
    assert float(np.mean(np.abs(wav) >= 0.999)) < 0.01  # not clipped flat against the clamp
    return wav


@pytest.mark.parity
@pytest.mark.parametrize("variant", tiny.VARIANTS)
def test_reference_loads_every_tensor(tiny_dirs: dict[str, Path], variant: str) -> None:
    import torch
    from transformers import PreTrainedModel

    from export.qwen3_tts.reference import reference_imports

    with reference_imports():
        from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    d = tiny_dirs[variant]
    # The wrapper's own from_pretrained forwards output_loading_info to the speech tokenizer too,
    # so call the plain PreTrainedModel loader to get the report.
    _, info = PreTrainedModel.from_pretrained.__func__(
        Qwen3TTSForConditionalGeneration, str(d), output_loading_info=True, dtype=torch.float32
    )
    _, st_info = Qwen3TTSTokenizerV2Model.from_pretrained(
        str(d / "speech_tokenizer"), output_loading_info=True
    )
    for report in (info, st_info):
        assert {k: v for k, v in report.items() if v} == {}


@pytest.mark.parity
def test_reference_tokenizer(reference: Any) -> None:
    tok = reference("custom_voice").processor.tokenizer
    assert tok(PROMPT)["input_ids"] == PROMPT_IDS
    # The reference loads the tokenizer with fix_mistral_regex=True, which swaps Qwen2's split regex
    # for Mistral's (camel case splits). A runtime tokenizer has to do the same to match it.
    assert tok.convert_ids_to_tokens(tok("HelloWorld")["input_ids"]) == ["Hello", "W", "orld"]


@pytest.mark.parity
def test_custom_voice_speaks(reference: Any) -> None:
    import torch

    m = reference("custom_voice")
    assert {"vivian", "ryan", "eric"} <= set(m.get_supported_speakers())
    assert {"auto", "english", "chinese", "german"} <= set(m.get_supported_languages())
    assert "sichuan_dialect" not in m.get_supported_languages()
    greedy = dict(max_new_tokens=4, do_sample=False, subtalker_dosample=False)
    _check_audio(
        m.generate_custom_voice(text="Hello world.", speaker="vivian", language="English", **greedy), 4
    )
    # dialect speaker: Chinese is overridden by the speaker's dialect tag
    _check_audio(
        m.generate_custom_voice(text="Hello world.", speaker="eric", language="Chinese", **greedy), 4
    )
    # code2wav: exactly 1920 samples per frame
    codes = torch.randint(0, 2048, (5, 16), generator=torch.Generator().manual_seed(0))
    audio, sr = m.model.speech_tokenizer.decode([{"audio_codes": codes}])
    assert sr == 24000 and audio[0].shape == (5 * 1920,)


@pytest.mark.parity
def test_voice_design_speaks_greedy_from_generation_config(reference: Any) -> None:
    m = reference("voice_design")
    assert m.generate_defaults["do_sample"] is False and m.generate_defaults["subtalker_dosample"] is False
    kwargs = dict(
        text="Hello world.", instruct="Speak with a calm female voice.", language="English", max_new_tokens=4
    )
    first = _check_audio(m.generate_voice_design(**kwargs), 4)
    second, _ = m.generate_voice_design(**kwargs)
    np.testing.assert_array_equal(first, second[0])


@pytest.mark.parity
def test_base_clones(reference: Any) -> None:
    m = reference("base")
    sr = 24000
    t = np.arange(int(1.3 * sr)) / sr
    ref = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.5 * t)).astype(np.float32)
    greedy = dict(max_new_tokens=4, do_sample=False, subtalker_dosample=False)
    items = m.create_voice_clone_prompt(ref_audio=(ref, sr), ref_text="The quick brown fox.")
    codes = items[0].ref_code
    assert tuple(codes.shape) == (-(-ref.shape[0] // 1920), 16)
    assert len(set(codes[:, 0].tolist())) > 1  # the Mimi codebooks are filled: codes vary
    assert tuple(items[0].ref_spk_embedding.shape) == (64,)
    _check_audio(
        m.generate_voice_clone(
            text="Hello world.",
            language="English",
            ref_audio=(ref, sr),
            ref_text="The quick brown fox.",
            **greedy,
        ),
        4,
    )
    _check_audio(
        m.generate_voice_clone(
            text="Hello world.", language="English", ref_audio=(ref, sr), x_vector_only_mode=True, **greedy
        ),
        4,
    )
