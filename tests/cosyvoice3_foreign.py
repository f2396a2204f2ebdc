"""A CosyVoice3 checkpoint the project did not create: vLLM-Omni 0.30.0's own DiT / PreLookaheadLayer /
CausalConditionalCFM / CausalMaskedDiffWithDiT and CausalHiFTGenerator / CausalConvRNNF0Predictor (from
the wheel, as tests/cosyvoice3_reference.py loads them) and transformers' Qwen2Config / Qwen2ForCausalLM,
each with its own init (seeded), their state dicts saved as FunAudioLLM's files. Unlike make-tiny: other
dimensions (LM hidden 96 over 3 layers with 6 heads / 3 K/V heads, 1000 speech tokens, DiT 96 x 3 layers
with 6 heads of 16, look-ahead channels 48, HiFT base 48 with upsampling 6 x 5 x 4, kernels 12/11/8, other
resblock kernels and dilations, f0 channels 24), a word-level text tokenizer with its own vocabulary
(CosyVoice-BlankEN saved by transformers' PreTrainedTokenizerFast), hift.pt under a `generator.` prefix,
the yaml written in another order without the processor entries. transformers' Qwen2 init (std 0.02)
makes the LM's logits nearly flat; the HiFT init (N(0, 0.01) upsampling convs) makes it quiet: both as
they come.

`python cosyvoice3_foreign.py IN.npz OUT.npz <vllm-omni wheel> <out dir>`.
"""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import numpy as np

YAML = """# a foreign CosyVoice3 layout (values differ from make-tiny's)
sample_rate: 24000
token_frame_rate: 25
token_mel_ratio: 2
chunk_size: 25
num_decoding_left_chunks: -1
spk_embed_dim: 192
llm_input_size: 96
llm_output_size: 96

hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    base_channels: 48
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [6, 5, 4]
    upsample_kernel_sizes: [12, 11, 8]
    istft_params: {n_fft: 16, hop_len: 4}
    resblock_kernel_sizes: [3, 5]
    resblock_dilation_sizes: [[1, 2], [1, 3]]
    source_resblock_kernel_sizes: [5, 7, 3]
    source_resblock_dilation_sizes: [[1, 2], [1, 2], [1, 3]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: 24

flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: 1000
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: 48
        pre_lookahead_len: 3
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: 0.7
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.DiT.dit.DiT
            dim: 96
            depth: 3
            heads: 6
            dim_head: 16
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

llm: !new:cosyvoice.llm.llm.CosyVoice3LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 1000
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: ''
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1
"""
WORDS = ["hello", "world", "this", "is", "a", "foreign", "checkpoint", "speaking", "some", "words", "you", "are", "helpful", "assistant", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "one", "two", "three", "four", "five"]


def tokenizer(path: Path) -> int:
    """A word-level tokenizer (whitespace pre-tokenizer), saved by transformers; its size."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(dict.fromkeys(WORDS))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]")
    fast.save_pretrained(str(path))
    return len(vocab)


def main(inputs: dict, wheel: str, out: str) -> dict:
    import torch
    from cosyvoice3_reference import load
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from export.cosyvoice3.tiny import campplus_model, speech_tokenizer_model
    from ttscore.runtime.checkpoint_kit import read_hyperpyyaml

    torch.manual_seed(4321)
    mods = load(wheel, os.getcwd())
    root = Path(out)
    tmp = root.parent / (root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "CosyVoice-BlankEN").mkdir(parents=True)
    (tmp / "cosyvoice3.yaml").write_text(YAML)
    cfg = read_hyperpyyaml(tmp / "cosyvoice3.yaml")
    n_words = tokenizer(tmp / "CosyVoice-BlankEN")
    qcfg = Qwen2Config(hidden_size=96, intermediate_size=160, num_hidden_layers=3, num_attention_heads=6,
                       num_key_value_heads=3, vocab_size=n_words + 320, rope_theta=10000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, max_position_embeddings=4096)
    qcfg.save_pretrained(str(tmp / "CosyVoice-BlankEN"))
    lm = Qwen2ForCausalLM(qcfg)
    size = cfg["llm"]["speech_token_size"]
    state = {f"llm.model.{k}": v for k, v in lm.state_dict().items()}
    state["speech_embedding.weight"] = torch.nn.Embedding(size + 200, 96).weight.detach().clone()
    state["llm_decoder.weight"] = torch.nn.Linear(96, size + 200, bias=False).weight.detach().clone()
    torch.save(state, tmp / "llm.pt")

    f, h = cfg["flow"], cfg["hift"]
    d, e = f["decoder"], f["decoder"]["estimator"]
    estimator = mods["dit"].DiT(**{k: e[k] for k in ("dim", "depth", "heads", "dim_head", "ff_mult", "mel_dim",
                                                     "mu_dim", "spk_dim", "out_channels", "static_chunk_size",
                                                     "num_decoding_left_chunks")})
    decoder = mods["cfm"].CausalConditionalCFM(d["in_channels"], types.SimpleNamespace(**d["cfm_params"]["content"]),
                                               n_spks=1, spk_emb_dim=80, estimator=estimator)
    pl = f["pre_lookahead_layer"]
    flow = mods["cfm"].CausalMaskedDiffWithDiT(
        input_size=80, output_size=80, spk_embed_dim=192, vocab_size=f["vocab_size"], token_mel_ratio=2,
        pre_lookahead_len=3, pre_lookahead_layer=mods["layers"].PreLookaheadLayer(80, pl["channels"], 3), decoder=decoder)
    torch.save(flow.state_dict(), tmp / "flow.pt")
    hg = mods["hifigan"]
    f0 = hg.CausalConvRNNF0Predictor(1, 80, h["f0_predictor"]["cond_channels"])
    hift = hg.CausalHiFTGenerator(**{k: v for k, v in h.items() if k != "f0_predictor"}, f0_predictor=f0)
    torch.save({f"generator.{k}": v for k, v in hift.state_dict().items()}, tmp / "hift.pt")

    import onnx

    onnx.save(campplus_model(11), str(tmp / "campplus.onnx"))
    onnx.save(speech_tokenizer_model(11, size), str(tmp / "speech_tokenizer_v3.onnx"))
    (tmp / "config.json").write_text(json.dumps({}))
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return {"written": np.array(str(root))}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
