"""A Fish Speech S2 Pro checkpoint the project did not create, built in "ref5" from vLLM-Omni 0.30.0's own classes
(tests/fish_speech_reference.load: the release wheel without vLLM) with dimensions unlike make-tiny's.

- config.json: `FishSpeechConfig` (vLLM-Omni's configuration class) built from Fish-named sub-configs, written
  back in Fish field names from the config object's attributes (its `to_dict()` writes Qwen names): Slow AR
  width 48, 6 heads / 2 KV heads, 3 layers, RoPE base 1e4; Fast AR width 40 (so `fast_project_in` exists),
  5 heads, 3 layers, q/k norm on, RoPE base 5e5.
- model.safetensors (float32): the weights of vLLM-Omni's own modules as their constructors initialise them
  (`FishSpeechFastARModel` with the Slow AR config for the Slow AR's Qwen3 layers, `FishSpeechFastAR`, the
  embeddings), the norms then scaled by U(0.5, 1.5) so they are not all ones; names mapped to the checkpoint's
  (`qkv_proj` -> `wqkv`, `gate_up_proj` -> `w1`/`w3`, ...: the inverse of `_remap_fish_speech_weights`).
- codec.pth: vLLM-Omni's `dac_modules.DAC` (its own init) with encoder width 8, rates 4 4 4 8, codebook_dim 4,
  quantizer pre/post transformers of 2/1 layers, decoder width 48, rates 8 4 4 4 - its state dict as saved by
  torch (the RoPE `freqs_cis` buffers included, the `causal_mask` buffers left out, as upstream 2.0 has them).
- tokenizer.json: another byte-level BPE (other corpus, 300 merges-worth), the required special ids where the
  model needs them (<|im_end|> 151645, the semantic range, <|audio_pad|> 151677) and Fish's own tokens at other
  ids than make-tiny's.

`python fish_speech_foreign.py IN.npz OUT.npz <vllm-omni wheel> <out dir>`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TEXT = dict(vocab_size=155776, dim=48, n_head=6, n_local_heads=2, head_dim=8, n_layer=3, intermediate_size=80,
            attention_qk_norm=True, rope_base=10000.0, max_seq_len=4096, tie_word_embeddings=True, codebook_size=4096,
            num_codebooks=10)
AUDIO = dict(vocab_size=4096, num_codebooks=10, dim=40, n_head=5, n_local_heads=5, head_dim=8, n_layer=3,
             intermediate_size=72, max_seq_len=11, text_dim=48, attention_qk_norm=True, rope_base=500000.0)
CORPUS = "Foreign speech checkpoint: numbers 0 1 2 3, letters abc xyz, some words spoken slowly and clearly!"


def _fish_names(cfg, which: str) -> dict:
    """A vLLM-Omni sub-config back in Fish field names."""
    out = dict(vocab_size=cfg.vocab_size, dim=cfg.hidden_size, n_head=cfg.num_attention_heads,
               n_local_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, n_layer=cfg.num_hidden_layers,
               intermediate_size=cfg.intermediate_size, attention_qk_norm=cfg.attention_qk_norm,
               rope_base=cfg.rope_theta, max_seq_len=cfg.max_position_embeddings, rms_norm_eps=cfg.rms_norm_eps)
    if which == "text":
        out.update(tie_word_embeddings=cfg.tie_word_embeddings, codebook_size=cfg.codebook_size,
                   num_codebooks=cfg.num_codebooks)
    else:
        out.update(num_codebooks=cfg.num_codebooks, text_dim=cfg.text_dim)
    return out


def _layers(module, prefix: str, out: dict) -> None:
    for name, p in module.state_dict().items():
        if "rotary_emb" in name or not name.startswith("layers."):
            continue
        i, rest = name.split(".", 2)[1], name.split(".", 2)[2]
        base = f"{prefix}.layers.{i}"
        if rest == "self_attn.qkv_proj.weight":
            out[f"{base}.attention.wqkv.weight"] = p
        elif rest == "self_attn.o_proj.weight":
            out[f"{base}.attention.wo.weight"] = p
        elif rest == "mlp.gate_up_proj.weight":
            gate, up = p.chunk(2, dim=0)
            out[f"{base}.feed_forward.w1.weight"], out[f"{base}.feed_forward.w3.weight"] = gate, up
        elif rest == "mlp.down_proj.weight":
            out[f"{base}.feed_forward.w2.weight"] = p
        else:
            rest = (rest.replace("self_attn.q_norm", "attention.q_norm").replace("self_attn.k_norm", "attention.k_norm")
                    .replace("input_layernorm", "attention_norm").replace("post_attention_layernorm", "ffn_norm"))
            out[f"{base}.{rest}"] = p


def tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([CORPUS], trainer=trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for i in range(len(vocab), 151643):
        vocab[f"<foreign_{i}>"] = i
    special = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
    fish = ["<|audio_end|>", "<|audio_start|>", "<|voice|>", "<|text|>", "<|interleave|>", "<|phoneme_end|>",
            "<|phoneme_start|>", "<|pad|>"]
    special.update({t: 151660 + i for i, t in enumerate(fish)})
    special["<|audio_pad|>"] = 151677
    special.update({f"<|semantic:{i}|>": 151678 + i for i in range(4096)})
    data["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for t, i in sorted(special.items(), key=lambda x: x[1])]
    return json.dumps(data)


def main(inputs: dict, wheel: str, out: str) -> dict:
    import torch
    from fish_speech_reference import load
    from safetensors.torch import save_file
    from torch import nn

    torch.manual_seed(1234)
    mods = load(wheel, os.getcwd())
    cfg_mod, fast_mod, dac = mods["configuration_fish_speech"], mods["fish_speech_fast_ar"], mods["dac_modules"]
    config = cfg_mod.FishSpeechConfig(text_config=dict(TEXT), audio_decoder_config=dict(AUDIO))
    text, audio = config.text_config, config.audio_decoder_config
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    raw = {"architectures": ["FishQwen3OmniForCausalLM"], "model_type": config.model_type,
           "text_config": _fish_names(text, "text"), "audio_decoder_config": _fish_names(audio, "audio"),
           "semantic_start_token_id": config.semantic_start_token_id,
           "semantic_end_token_id": config.semantic_end_token_id, "audio_pad_token_id": config.audio_pad_token_id}
    (root / "config.json").write_text(json.dumps(raw, indent=2))
    backbone = fast_mod.FishSpeechFastARModel(cfg_mod.FishSpeechFastARConfig(
        vocab_size=text.vocab_size, dim=text.hidden_size, n_head=text.num_attention_heads,
        n_local_heads=text.num_key_value_heads, head_dim=text.head_dim, n_layer=text.num_hidden_layers,
        intermediate_size=text.intermediate_size, max_seq_len=text.max_position_embeddings,
        attention_qk_norm=text.attention_qk_norm, rope_base=text.rope_theta))
    fast = fast_mod.FishSpeechFastAR(vllm_config=None, config=audio, slow_ar_config=text)
    embeddings = nn.Embedding(text.vocab_size, text.hidden_size)
    codebooks = nn.Embedding(text.codebook_size * text.num_codebooks, text.hidden_size)
    with torch.no_grad():
        for m in [*backbone.modules(), *fast.modules()]:
            if type(m).__name__ == "RMSNorm":
                m.weight.mul_(torch.empty_like(m.weight).uniform_(0.5, 1.5))
    state: dict = {"text_model.model.embeddings.weight": embeddings.weight,
                   "text_model.model.norm.weight": torch.empty(text.hidden_size).uniform_(0.5, 1.5),
                   "audio_decoder.codebook_embeddings.weight": codebooks.weight,
                   "audio_decoder.embeddings.weight": fast.fast_embeddings.weight,
                   "audio_decoder.output.weight": fast.fast_output.weight,
                   "audio_decoder.norm.weight": fast.fast_norm.weight,
                   "audio_decoder.fast_project_in.weight": fast.fast_project_in.weight,
                   "audio_decoder.fast_project_in.bias": fast.fast_project_in.bias}
    _layers(backbone, "text_model.model", state)
    _layers(fast.model, "audio_decoder", state)
    save_file({k: v.detach().float().contiguous() for k, v in state.items()}, str(root / "model.safetensors"))

    def general(**kw):
        return dac.ModelArgs(**{**dict(block_size=16384, n_local_heads=-1, head_dim=64, rope_base=10000,
                                       norm_eps=1e-5, dropout_rate=0.0, attn_dropout_rate=0.0, channels_first=True), **kw})

    def window(n_layer):
        return dac.WindowLimitedTransformer(causal=True, window_size=128, input_dim=128, config=dac.ModelArgs(
            block_size=4096, n_layer=n_layer, n_head=2, dim=128, intermediate_size=256, n_local_heads=-1, head_dim=64,
            rope_base=10000, norm_eps=1e-5, dropout_rate=0.0, attn_dropout_rate=0.0, channels_first=True))

    quantizer = dac.DownsampleResidualVectorQuantize(
        input_dim=128, n_codebooks=9, codebook_size=1024, codebook_dim=4, quantizer_dropout=0.0,
        downsample_factor=[2, 2], post_module=window(1), pre_module=window(2), semantic_codebook_size=4096)
    codec = dac.DAC(encoder_dim=8, encoder_rates=[4, 4, 4, 8], decoder_dim=48, decoder_rates=[8, 4, 4, 4],
                    quantizer=quantizer, sample_rate=44100, causal=True, encoder_transformer_layers=[0, 0, 0, 2],
                    decoder_transformer_layers=[0, 0, 0, 0], transformer_general_config=general)
    with torch.no_grad():  # the DAC's own init leaves Snake alpha at 1 and layer scales tiny: vary them a little
        for name, p in codec.named_parameters():
            if name.endswith(("alpha", "gamma")):
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5) * (0.2 if name.endswith("gamma") else 1.0))
    torch.save({k: v for k, v in codec.state_dict().items() if not k.endswith("causal_mask")}, root / "codec.pth")
    (root / "tokenizer.json").write_text(tokenizer_json())
    (root / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    return {}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
