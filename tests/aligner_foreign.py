"""A Qwen3-ForcedAligner checkpoint the project did not make: qwen-asr 0.0.6's own classes write it
(`Qwen3ASRConfig` and `Qwen3ASRForConditionalGeneration.save_pretrained`, a `WhisperFeatureExtractor` and a
`Qwen2TokenizerFast` saved by transformers), with dimensions unlike make-tiny's (audio d_model 48 over 4 heads, 2
layers, 24 downsampling channels, output 40; text hidden 40, 2 layers, 4 heads over 2 KV heads, head_dim 16;
classify_num 37; 60 ms a class) and a tokenizer trained here on other text. The weights are random, drawn wider
than transformers' 0.02, and the `<timestamp>` embedding made small, so that the classes vary from slot to slot.

`save_pretrained` writes the thinker's class model_type (`qwen3_asr_thinker`) where the release has
`qwen3_forced_aligner`, which is what makes qwen-asr build the classifier head; the file is given the release's
value, as the real config.json has it.
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = ("The quick brown fox jumps over the lazy dog. 今天天气很好，我们去公园散步吧。 今日はいい天気ですね。"
          " Numbers like 3 and 42 appear, o'clock too.") * 2
SPECIAL = ("<|audio_start|>", "<|audio_end|>", "<|audio_pad|>", "<timestamp>")


def make(out: Path) -> None:
    import torch
    from qwen_asr.core.transformers_backend import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast, WhisperFeatureExtractor

    out = Path(out)
    out.mkdir(parents=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([CORPUS], trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok = Qwen2TokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                             unk_token=None, bos_token=None, extra_special_tokens={
                                 "audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                                 "audio_eos_token": "<|audio_end|>"})
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL)})
    tok.save_pretrained(str(out))
    ids = {t: int(tok.convert_tokens_to_ids(t)) for t in SPECIAL}
    cfg = Qwen3ASRConfig(
        thinker_config={
            "model_type": "qwen3_forced_aligner", "classify_num": 37, "audio_token_id": ids["<|audio_pad|>"],
            "audio_start_token_id": ids["<|audio_start|>"], "audio_end_token_id": ids["<|audio_end|>"],
            "audio_config": {"num_mel_bins": 128, "d_model": 48, "encoder_layers": 2, "encoder_attention_heads": 4,
                             "encoder_ffn_dim": 96, "output_dim": 40, "n_window": 50, "n_window_infer": 200,
                             "downsample_hidden_size": 24, "max_source_positions": 1500},
            "text_config": {"vocab_size": len(tok) + 12, "hidden_size": 40, "intermediate_size": 72,
                            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "head_dim": 16, "rope_theta": 1000000, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                            "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2],
                                             "interleaved": True, "mrope_interleaved": True}}},
        timestamp_token_id=ids["<timestamp>"], timestamp_segment_time=60,
        support_languages=["Chinese", "English", "Japanese", "Korean"])
    torch.manual_seed(40)
    model = Qwen3ASRForConditionalGeneration(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                p.normal_(3.0, 0.3)  # sharp attention: each slot looks at a few tokens of its own
            elif p.dim() == 1:
                p.normal_(1.0, 0.1)  # layer and RMS norms
            elif "embed_tokens" in name:
                p.normal_(0.0, 1.0)
            else:
                fan_in = p[0].numel()
                p.normal_(0.0, (4.0 if "lm_head" in name else 1.0) / fan_in ** 0.5)
        # a quiet <timestamp> embedding: each slot's class then comes from what it attends to, so the slots of one
        # text differ (and disagree with their order, which the repair has to fix)
        model.thinker.model.embed_tokens.weight[ids["<timestamp>"]] *= 0.02
    model.save_pretrained(str(out))
    WhisperFeatureExtractor(feature_size=128).save_pretrained(str(out))
    config = json.loads((out / "config.json").read_text())
    config["thinker_config"]["model_type"] = "qwen3_forced_aligner"
    (out / "config.json").write_text(json.dumps(config, indent=2))
