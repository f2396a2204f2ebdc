"""A Voxtral TTS checkpoint the project did not create: vLLM-Omni 0.30.0's own FlowMatchingAudioTransformer
and VoxtralTTSAudioTokenizer (from the wheel, as tests/voxtral_tts_reference.py loads them) and
transformers' MistralModel, each with its own init (seeded), written in Mistral's layout: the LM's q/k
permuted back from rotate-half to Mistral's interleaved layout, the codec's encoder included (the public
checkpoint lacks it; readers must tolerate it). Unlike make-tiny: other dimensions (15 acoustic levels,
6 acoustic dimensions, window 32), `n_decoding_steps` given (4), an odd number of codec heads (ALiBi's non-power-of-two slopes),
50 special tokens, other voices. The codec's semantic `embedding_sum` buffer is zeros at init (a trained
one is not): it gets N(0, 1) so semantic codes reach the audio.

`python voxtral_tts_foreign.py IN.npz OUT.npz <vllm-omni wheel> <out dir>`.
"""

from __future__ import annotations

import base64
import json
import os
import types
from pathlib import Path

import numpy as np

VOICES = {"fr_female": 2, "ar_male": 4}
N_SPECIAL = 50
SPECIAL = {0: "<unk>", 1: "<s>", 2: "</s>", 3: "[INST]", 4: "[/INST]", 5: "[AVAILABLE_TOOLS]", 6: "[/AVAILABLE_TOOLS]",
           7: "[TOOL_RESULTS]", 8: "[/TOOL_RESULTS]", 9: "[TOOL_CALLS]", 10: "[IMG]", 11: "<pad>", 12: "[IMG_BREAK]",
           13: "[IMG_END]", 14: "[PREFIX]", 15: "[MIDDLE]", 16: "[SUFFIX]", 17: "[SYSTEM_PROMPT]",
           18: "[/SYSTEM_PROMPT]", 19: "[TOOL_CONTENT]", 20: "[ARGS]", 21: "[CALL_ID]", 22: "[TRANSCRIBE]",
           23: "[THINK]", 24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 26: "[/THINK]", 27: "[STREAMING_PAD]",
           28: "[STREAMING_WORD]", 29: "[MODEL_SETTINGS]", 30: "[/MODEL_SETTINGS]", 35: "[NEXT_AUDIO_TEXT]",
           36: "[REPEAT_AUDIO_TEXT]"}


def unpermute(w, n_heads: int):
    """rotate-half (transformers) -> Mistral's interleaved rotary layout: the inverse of `permute_rotary`."""
    d1, d2 = w.shape
    return w.view(n_heads, 2, d1 // n_heads // 2, d2).transpose(1, 2).reshape(d1, d2)


def main(inputs: dict, wheel: str, out: str) -> dict:
    import torch
    from safetensors.torch import save_file
    from transformers import MistralConfig, MistralModel
    from voxtral_tts_reference import load

    torch.manual_seed(1234)
    mods = load(wheel, os.getcwd())
    dim = 48
    params = {
        "dim": dim, "n_layers": 3, "head_dim": 8, "hidden_dim": 96, "n_heads": 6, "n_kv_heads": 3,
        "rope_theta": 500000.0, "norm_eps": 1e-6, "vocab_size": N_SPECIAL + 256 + 10, "tied_embeddings": True,
        "max_seq_len": 8192, "architectures": ["VoxtralTTSForConditionalGeneration"],
        "multimodal": {
            "audio_model_args": {
                "semantic_codebook_size": 48, "acoustic_codebook_size": 15, "n_acoustic_codebook": 6,
                "audio_token_id": 24, "begin_audio_token_id": 25,
                "audio_encoding_args": {"sampling_rate": 24000, "frame_rate": 12.5},
                "acoustic_transformer_args": {"input_dim": dim, "dim": dim, "n_layers": 2, "head_dim": 12,
                                              "hidden_dim": 80, "n_heads": 4, "n_kv_heads": 1,
                                              "use_biases": False, "norm_eps": 1e-5, "n_decoding_steps": 4}},
            "audio_tokenizer_args": {
                "semantic_codebook_size": 48, "semantic_dim": 12, "acoustic_codebook_size": 15, "acoustic_dim": 6,
                "dim": 24, "hidden_dim": 40, "head_dim": 4, "n_heads": 6, "n_kv_heads": 3,
                "attn_sliding_window_size": 32, "encoder_transformer_lengths_str": "1,1,1,1",
                "decoder_transformer_lengths_str": "1,2,1,1", "voice": {v: i for i, v in enumerate(VOICES)}}}}
    mm = params["multimodal"]
    fm = mods["voxtral_tts_audio_generation"].FlowMatchingAudioTransformer(json.loads(json.dumps(mm["audio_model_args"])))
    hf = types.SimpleNamespace(audio_config={"codec_args": mm["audio_tokenizer_args"],
                                             "audio_model_args": json.loads(json.dumps(mm["audio_model_args"]))},
                               text_config=types.SimpleNamespace(hidden_size=dim))
    codec = mods["voxtral_tts_audio_tokenizer"].VoxtralTTSAudioTokenizer(
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=hf)))
    sc = codec.quantizer.semantic_codebook
    sc.embedding_sum = torch.randn_like(sc.embedding_sum)
    lm = MistralModel(MistralConfig(hidden_size=dim, intermediate_size=96, num_hidden_layers=3, num_attention_heads=6,
                                    num_key_value_heads=3, head_dim=8, vocab_size=params["vocab_size"],
                                    rms_norm_eps=1e-6, rope_theta=500000.0, tie_word_embeddings=True))
    state: dict = {}
    for k, v in fm.state_dict().items():
        state[f"acoustic_transformer.{k}"] = v
    for k, v in codec.state_dict().items():
        if k == "audio_token_embedding.embeddings.weight":
            state["mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight"] = v
        else:
            state[f"audio_tokenizer.{k}"] = v
    names = {"self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1",
             "mlp.down_proj": "feed_forward.w2", "mlp.up_proj": "feed_forward.w3",
             "input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm"}
    for k, v in lm.state_dict().items():
        if k == "embed_tokens.weight":
            state["mm_audio_embeddings.tok_embeddings.weight"] = v
        elif k == "norm.weight":
            state[k] = v
        else:
            _, i, rest = k.split(".", 2)
            mod, leaf = rest.rsplit(".", 1)
            if mod == "self_attn.q_proj":
                state[f"layers.{i}.attention.wq.weight"] = unpermute(v, 6)
            elif mod == "self_attn.k_proj":
                state[f"layers.{i}.attention.wk.weight"] = unpermute(v, 3)
            else:
                state[f"layers.{i}.{names[mod]}.{leaf}"] = v
    root = Path(out)
    (root / "voice_embedding").mkdir(parents=True)
    save_file({k: v.detach().contiguous().float() for k, v in state.items()}, str(root / "consolidated.safetensors"))
    (root / "params.json").write_text(json.dumps(params, indent=1))
    vocab = [{"rank": b, "token_bytes": base64.b64encode(bytes([b])).decode(), "token_str": None} for b in range(256)]
    tek = {"config": {"pattern": r"\s+|\S+", "num_vocab_tokens": 256, "default_vocab_size": N_SPECIAL + 256,
                      "default_num_special_tokens": N_SPECIAL, "version": "v13"},
           "vocab": vocab, "version": 1, "type": "Tekken",
           "special_tokens": [{"rank": r, "token_str": SPECIAL.get(r, f"<SPECIAL_{r}>"), "is_control": True}
                              for r in range(N_SPECIAL)],
           "audio": {"sampling_rate": 24000, "frame_rate": 12.5, "voice_num_audio_tokens": VOICES,
                     "audio_encoding_config": {"num_mel_bins": 80, "hop_length": 160, "window_size": 400}}}
    (root / "tekken.json").write_text(json.dumps(tek))
    for v, n in VOICES.items():
        torch.save(torch.randn(n, dim).to(torch.bfloat16), root / "voice_embedding" / f"{v}.pt")
    return {"tensors": np.array(len(state))}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
