"""A Gepard-1.0 checkpoint the project did not make, built in ref5 (transformers 5.14.1) from the
reference's own config class and init: `Qwen3_5TextConfig` written by its `save_pretrained` (its
`rope_parameters`, with the mRoPE keys vLLM-Omni strips), `Qwen3_5TextModel`'s own initialisation
(std 0.02, zero-centred norms at 0), the talker's modules with torch's default init (the stop head's
bias set low so that it does not sit at the 0.5 threshold), float32 weights, `audio_embed_scale`
stored as [1], ignored `ref_compressor.*` and `mtp.*` tensors, dimensions unlike make-tiny's (3 layers,
3 heads over 1 KV head, hidden 48, audio_embed_dim 16, 4 speaker slots), a sidecar unlike make-tiny's
(other special ids, text_repetition target 10 / below 7 / max 4, temperature 0.5, stop_threshold 0.4)
and a tokenizer unlike make-tiny's (`PreTrainedTokenizerFast.save_pretrained`, whitespace BPE).
The NanoCodec archive is added by the test (main env).

`python gepard_foreign.py IN.npz OUT.npz <out_dir>` (refenv.serve).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CORPUS = ("Another voice speaks here. The weather today is sunny with a light breeze; numbers one, two and "
          "three. Hello there, this is a different tokenizer with other ids. ") * 3
LEVELS = [8, 7, 6, 6] * 8


def tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([CORPUS], trainers.BpeTrainer(vocab_size=180, special_tokens=["[UNK]", "[PAD]"],
                                                          show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
    fast.save_pretrained(str(out))
    return int(tok.get_vocab_size())


def main(inputs: dict, out_dir: str) -> dict:
    import torch
    from safetensors.torch import save_file
    from torch import nn
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

    out = Path(out_dir)
    out.mkdir(parents=True)
    v = tokenizer(out)
    special = {"start_of_speech": v + 11, "end_of_speech": v + 12, "start_of_text": v + 2, "end_of_text": v + 5,
               "tts_pad": v + 9, "tokeniser_length": v + 20}
    slots, h, embed_dim = 4, 48, 16
    cfg = Qwen3_5TextConfig(
        vocab_size=v + 32, hidden_size=h, intermediate_size=80, num_hidden_layers=3, num_attention_heads=3,
        num_key_value_heads=1, head_dim=16, layer_types=["full_attention"] * 3, max_position_embeddings=512,
        rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 1.0,
                         "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    cfg.save_pretrained(str(out))
    torch.manual_seed(1234)
    backbone = Qwen3_5TextModel(cfg)
    state = {f"model.{k}": t for k, t in backbone.state_dict().items()}
    for i, n in enumerate(LEVELS):
        head = nn.Linear(h, n)
        state[f"codebook_heads.{i}.weight"], state[f"codebook_heads.{i}.bias"] = head.weight, head.bias
        state[f"audio_embeddings.{i}.weight"] = nn.Embedding(n, embed_dim).weight
    stop = nn.Linear(h, 1)
    state["stop_head.weight"], state["stop_head.bias"] = stop.weight, torch.full((1,), -2.0)
    proj = nn.Sequential(nn.Linear(len(LEVELS) * embed_dim, h), nn.GELU(), nn.Linear(h, h))
    for k, t in proj.state_dict().items():
        state[f"audio_embed_proj.{k}"] = t
    state["audio_embed_scale"] = torch.tensor([1.3])
    state["null_prefix"] = torch.randn(slots, h)
    state["ref_compressor.queries"] = torch.randn(slots, h)
    state["mtp.fc.weight"] = torch.randn(h, 2 * h)
    save_file({k: t.detach().to(torch.float32).contiguous() for k, t in state.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    sidecar = {
        "backbone_config": json.loads((out / "config.json").read_text()),
        "audio_heads": {f"level_audio_{i}": n for i, n in enumerate(LEVELS)},
        "audio_embed_dim": embed_dim,
        "special_tokens": special,
        "text_repetition": {"enabled": True, "target_text_tokens": 10, "apply_below": 7, "max_repeats": 4},
        "codec": {"sample_rate": 22050, "fsq_levels": [8, 7, 6, 6], "num_layers": 8},
        "voice_cloning": {"enabled": False, "compressor": {"num_queries": slots}},
        "stop_threshold": 0.4,
        "temperature": 0.5,
    }
    (out / "gepard_config.json").write_text(json.dumps(sidecar, indent=2))
    return {"vocab": np.array(v)}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
