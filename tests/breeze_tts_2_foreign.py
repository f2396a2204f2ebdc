"""A Breeze-TTS-2 checkpoint the project did not make, built in ref5 (transformers 5.14.1) from the
reference's own config classes and init: `T5Gemma2TextConfig`, `Qwen3Config`, `LlamaConfig` written
by their `to_dict()` (5.x `rope_parameters`, no `rope_theta`), the modules' own initialisation
(PreTrainedModel init, std 0.02), float32 weights, the tied audio table stored under the talker's
name (`backbone_model.embed_tokens.embed_audio_tokens.weight`), no `embed_text_tokens`, an ignored
`codec_model.*` tensor, the eoi row on `<ins_eos>` (so instruction prompts use it), dimensions unlike make-tiny's (3 text layers with default RoPE everywhere,
window 4; 3 backbone layers with 1 KV head; llama3 factor 8) and a tokenizer unlike make-tiny's
(`PreTrainedTokenizerFast`, Metaspace pre-tokenizer, WordPiece-free BPE without byte fallback,
specials at other ids, no `<|AUDIO|>`/`<|audio_eos|>` tokens: the config's audio ids lie past the text
vocabulary, as the released checkpoint's do). `audio_tokenizer/` is copied from the directory given.

`python breeze_tts_2_foreign.py IN.npz OUT.npz <out_dir> <audio_tokenizer_dir>` (refenv.serve).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

VOICES = [f"[S{i}]" for i in range(10)]
EOS_ROW_SCALE = 4.3  # the stop row's weights scaled: greedy requests end by themselves after 1 to 22 frames
CORPUS = ("Breeze speaks. Hello there, this is another voice test with numbers and letters. "
          "Quiet, loud, slow, fast: the weather today is sunny with a light breeze. ") * 3


def tokenizer(out: Path) -> dict[str, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    # No audio tokens, as the released Gemma tokenizer (its audio_token_id 262144 lies past its vocabulary):
    # the reference frames' rows are placed by id, never tokenized.
    specials = ["<unk>", "<bos>", "<eos>", "<pad>", *VOICES, "<ins_bos>", "<ins_eos>"]
    tok.train_from_iterator([CORPUS], trainers.BpeTrainer(vocab_size=260, special_tokens=specials,
                                                          show_progress=False))
    tok.add_special_tokens(specials)
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "clean_up_tokenization_spaces": False}))
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    return {t: int(tok.token_to_id(t)) for t in specials} | {"vocab": tok.get_vocab_size()}


def main(inputs: dict, out_dir: str, audio_tokenizer: str) -> dict:
    import torch
    from breeze_tts_2_reference import compose
    from safetensors.torch import save_file
    from transformers import LlamaConfig, Qwen3Config
    from transformers.models.t5gemma2.configuration_t5gemma2 import T5Gemma2TextConfig

    out = Path(out_dir)
    out.mkdir(parents=True)
    ids = tokenizer(out)
    shutil.copytree(audio_tokenizer, out / "audio_tokenizer")
    text = T5Gemma2TextConfig(vocab_size=ids["vocab"], hidden_size=40, intermediate_size=72, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=10, query_pre_attn_scalar=10,
                              sliding_window=4, layer_types=["sliding_attention", "full_attention",
                                                             "sliding_attention"], dropout_rate=0.0)
    backbone = Qwen3Config(hidden_size=56, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=28, vocab_size=16, max_position_embeddings=256,
                           rope_theta=50000.0)
    depth = LlamaConfig(hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=3,
                        num_key_value_heads=1, head_dim=8, max_position_embeddings=33, rope_theta=10000.0,
                        rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                      "original_max_position_embeddings": 8, "rope_type": "llama3"})
    cfg = {
        "architectures": ["BreezeForConditionalGeneration"], "model_type": "breeze",
        "text_encoder_config": {**text.to_dict(), "eoi_token_index": ids["<ins_eos>"]},
        "backbone_config": backbone.to_dict(),
        "depth_decoder_config": {**depth.to_dict(), "model_type": "breeze_depth_decoder_model",
                                 "backbone_hidden_size": 56, "audio_embed_size": 56, "num_codebooks": 16,
                                 "vocab_size": 2051},
        "codec_config": {"codebook_size": 2048},
        "num_codebooks": 16, "vocab_size": 2051, "audio_vocab_size": 2051, "audio_num_codebooks": 16,
        "audio_token_id": ids["vocab"], "audio_eos_token_id": ids["vocab"] + 1,
        "codebook_eos_token_id": 0, "text_vocab_size": ids["vocab"], "backbone_model_type": "qwen3",
        "text_encoder_proj_type": "linear", "tie_codebooks_embeddings": True,
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    torch.manual_seed(11)
    model = compose(json.loads((out / "config.json").read_text()))
    with torch.no_grad():  # modules outside PreTrainedModel keep torch's init; the heads need one
        torch.nn.init.normal_(model.depth_decoder.codebooks_head.weight, std=0.2)
        torch.nn.init.normal_(model.lm_head.weight, std=0.2)
        # A stop row that wins now and then: greedy decoding ends by itself after some frames (the EOS cases).
        model.lm_head.weight[cfg["vocab_size"]] *= EOS_ROW_SCALE
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "embed_text_tokens.weight"}
    state["backbone_model.embed_tokens.embed_audio_tokens.weight"] = state.pop("depth_decoder.model.embed_tokens.weight")
    state["codec_model.quantizer.dummy"] = torch.zeros(3)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return {"tensors": np.array(len(state))}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
