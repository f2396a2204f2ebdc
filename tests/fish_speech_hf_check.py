"""The reference's Slow AR backbone (vLLM-Omni's own Qwen3-structured layers, tests/fish_speech_reference.build) against
transformers' stock `Qwen3Model` on the same checkpoint, run in "ref5": Fish's wqkv split into q/k/v, q/k rows and the
q/k-norm weights permuted per head from the interleaved (GPT-J) rotary layout to rotate-half, and transformers'
cos/sin rounded to bf16 as vLLM-Omni rounds its table. Outputs both final-normed hidden states for random inputs.

`python fish_speech_hf_check.py IN.npz OUT.npz <vllm-omni wheel> <checkpoint>` -> ours [T, D], hf [T, D].
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def main(inputs: dict, wheel: str, checkpoint: str) -> dict:
    import torch
    from fish_speech_reference import _Torch, build, load
    from safetensors.torch import load_file
    from transformers import Qwen3Config, Qwen3Model
    from transformers.models.qwen3 import modeling_qwen3

    mods = load(wheel, os.getcwd())
    mods["fish_speech_fast_ar"].torch = _Torch(mods["fish_speech_fast_ar"].torch)
    mods["fish_speech_slow_ar"].torch = _Torch(mods["fish_speech_slow_ar"].torch)
    root = Path(checkpoint)
    _, hidden_of, _ = build(mods, root)
    t = json.loads((root / "config.json").read_text())["text_config"]
    h, kv, hd, d = t["n_head"], t["n_local_heads"], t["head_dim"], t["dim"]
    cfg = Qwen3Config(vocab_size=t["vocab_size"], hidden_size=d, intermediate_size=t["intermediate_size"],
                      num_hidden_layers=t["n_layer"], num_attention_heads=h, num_key_value_heads=kv, head_dim=hd,
                      rms_norm_eps=t.get("rms_norm_eps", 1e-6), max_position_embeddings=t["max_seq_len"],
                      rope_theta=t["rope_base"], tie_word_embeddings=True, attn_implementation="eager")
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": t["rope_base"]}
    model = Qwen3Model(cfg).float().eval()
    perm = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])

    def heads(w, n):
        return w.view(n, hd, -1)[:, perm].reshape(n * hd, -1)

    src = {k: v.float() for k, v in load_file(str(root / "model.safetensors")).items()}
    state = {"embed_tokens.weight": src["text_model.model.embeddings.weight"],
             "norm.weight": src["text_model.model.norm.weight"]}
    for i in range(t["n_layer"]):
        p, q = f"text_model.model.layers.{i}.", f"layers.{i}."
        wq, wk, wv = src[p + "attention.wqkv.weight"].split([h * hd, kv * hd, kv * hd])
        state.update({q + "self_attn.q_proj.weight": heads(wq, h), q + "self_attn.k_proj.weight": heads(wk, kv),
                      q + "self_attn.v_proj.weight": wv, q + "self_attn.o_proj.weight": src[p + "attention.wo.weight"],
                      q + "self_attn.q_norm.weight": src[p + "attention.q_norm.weight"][perm],
                      q + "self_attn.k_norm.weight": src[p + "attention.k_norm.weight"][perm],
                      q + "mlp.gate_proj.weight": src[p + "feed_forward.w1.weight"],
                      q + "mlp.up_proj.weight": src[p + "feed_forward.w3.weight"],
                      q + "mlp.down_proj.weight": src[p + "feed_forward.w2.weight"],
                      q + "input_layernorm.weight": src[p + "attention_norm.weight"],
                      q + "post_attention_layernorm.weight": src[p + "ffn_norm.weight"]})
    model.load_state_dict(state, strict=True)
    rotary = modeling_qwen3.Qwen3RotaryEmbedding.forward

    def bf16_rotary(self, x, position_ids):
        cos, sin = rotary(self, x, position_ids)
        return cos.to(torch.bfloat16).to(cos.dtype), sin.to(torch.bfloat16).to(sin.dtype)

    modeling_qwen3.Qwen3RotaryEmbedding.forward = bf16_rotary
    x = torch.as_tensor(inputs["embeds"])
    with torch.inference_mode():
        ours = hidden_of(x)
        hf = model(inputs_embeds=x[None], position_ids=torch.arange(x.shape[0])[None]).last_hidden_state[0]
    return {"ours": ours.numpy(), "hf": hf.numpy()}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
