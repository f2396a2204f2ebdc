"""The Voxtral TTS reference, run in the "main" environment (transformers 4.57.3) through refenv:
vLLM-Omni 0.30.0's own plain-torch modules from the release wheel, imported without vLLM, around
transformers' `MistralModel`.

- `FlowMatchingAudioTransformer` (voxtral_tts_audio_generation.py): semantic argmax, the Euler loop with
  CFG, quantisation. Its only randomness, `torch.randn` for x0 (torch's global RNG in vLLM-Omni), is
  replaced by the rows of `noise` given as input (the module's `torch` name is swapped for a proxy whose
  `randn` returns them), so a caller feeds the same noise to the exported graphs.
- `VoxtralTTSAudioTokenizer` (voxtral_tts_audio_tokenizer.py): the summed codebook embeddings that are
  the next input (`encode_tokens`) and the codec (`decode` of the whole utterance; vLLM-Omni's serving
  path cuts at 375 frames, which the parity target deliberately does not).
- The language model: transformers' `MistralModel` (eager attention) from Mistral's tensor names, wq/wk
  permuted from Mistral's interleaved rotary layout to rotate-half (transformers' conversion script's
  `permute`), the whole sequence recomputed every frame (no cache). The [AUDIO] positions of the prompt
  take the rows of `voice_embedding/<voice>.pt` in order (vLLM-Omni's `tts_preprocess`).
- The prompt: mistral-common's `encode_speech_request` when mistral-common is importable, else the same
  layout written out here (`[BOS] [BEGIN_AUDIO] [AUDIO]xN [NEXT_AUDIO_TEXT] text [REPEAT_AUDIO_TEXT]
  [BEGIN_AUDIO]`, text by the byte-level tekken: byte + number of special tokens); `prompt_source` says
  which.

vLLM stand-ins: every `vllm.*` name the two files import becomes an inert placeholder (only used as a base
class or, for `MULTIMODAL_REGISTRY.register_processor`, an identity decorator at import; nothing on
the generation path calls one) except `init_logger` (logging.getLogger) and `default_weight_loader` (a copy into the
parameter, which is what vLLM's does on CPU); `vllm_omni.platforms.current_omni_platform` likewise.
`mistral_common` is stood in the same way when it is not installed (the module only names its classes).

`python voxtral_tts_reference.py IN.npz OUT.npz <vllm-omni wheel> <checkpoint> <json requests>`, a request
{"text", "voice", "max_new_tokens", "cfg_alpha"}; inputs noise_i [max_new_tokens, n_acoustic] ->
prompt_ids_i, codes_i [frames, 1 + n_acoustic] (vLLM-Omni's codes, +2 offset), stopped_i, audio_i,
hidden_i (the language model's last hidden state per frame), prompt_source, state (`name [shape]`
of every tensor the two modules hold, under the checkpoint's names, the codec's encoder aside).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import types
from pathlib import Path

import numpy as np
from vllm_omni_stubs import extract, stub

PACKAGE = "vllm_omni/model_executor/models/voxtral_tts"
MODULES = ("voxtral_tts_audio_generation", "voxtral_tts_audio_tokenizer")


def _default_weight_loader(param, loaded) -> None:
    param.data.copy_(loaded)


def load(wheel: str, where: str) -> dict[str, types.ModuleType]:
    import transformers  # before any stand-in: it probes for mistral_common at import

    transformers.BatchFeature  # noqa: B018  (resolve the lazy module now)
    extract(wheel, where, PACKAGE + "/")
    for pkg in ("vllm", "vllm.config", "vllm.inputs", "vllm.model_executor", "vllm.model_executor.model_loader",
                "vllm.model_executor.models", "vllm.model_executor.models.interfaces",
                "vllm.model_executor.models.utils", "vllm.multimodal", "vllm.multimodal.inputs",
                "vllm.multimodal.parse", "vllm.multimodal.processing", "vllm.multimodal.processing.processor",
                "vllm.sequence", "vllm.tokenizers", "vllm.tokenizers.mistral", "vllm_omni",
                "vllm_omni.model_executor", "vllm_omni.model_executor.models", "vllm_omni.quantization",
                "vllm_omni.quantization.component_config"):
        stub(pkg)
    stub("vllm.logger", init_logger=logging.getLogger)
    stub("vllm.model_executor.model_loader.weight_utils", default_weight_loader=_default_weight_loader)
    stub("vllm_omni.platforms", current_omni_platform=types.SimpleNamespace(device_type="cpu"))
    try:
        import mistral_common.protocol.instruct.chunk
        import mistral_common.tokens.tokenizers.audio  # noqa: F401
    except ImportError:
        for pkg in ("mistral_common", "mistral_common.protocol", "mistral_common.protocol.instruct",
                    "mistral_common.protocol.instruct.chunk", "mistral_common.tokens",
                    "mistral_common.tokens.tokenizers", "mistral_common.tokens.tokenizers.audio"):
            stub(pkg)
    stub("vllm_omni.model_executor.models.voxtral_tts").__path__ = [os.path.join(where, PACKAGE)]
    return {n: importlib.import_module(f"vllm_omni.model_executor.models.voxtral_tts.{n}") for n in MODULES}


class _NoiseTorch:
    """The `torch` a module sees, with `randn` answering from a queue of given rows."""

    def __init__(self, torch_module: types.ModuleType) -> None:
        self._torch = torch_module
        self.rows: list = []

    def randn(self, *shape, dtype=None, device=None):
        row = self.rows.pop(0)
        return self._torch.as_tensor(row, dtype=dtype).reshape(*shape)

    def __getattr__(self, name: str) -> object:
        return getattr(self._torch, name)


def permute_rotary(w, n_heads: int):
    """Mistral's interleaved rotary layout of wq/wk -> rotate-half (transformers' conversion `permute`)."""
    dim1, dim2 = w.shape
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def build(root: Path, mods: dict) -> dict:
    import torch
    from safetensors.torch import load_file
    from transformers import MistralConfig, MistralModel

    params = json.loads((root / "params.json").read_text())
    mm = params["multimodal"]
    audio_model_args = json.loads(json.dumps(mm["audio_model_args"]))
    at = audio_model_args["acoustic_transformer_args"]
    if at.get("n_decoding_steps") is None:  # vLLM-Omni's parser (_remap_voxtral_tts_audio_args)
        at["n_decoding_steps"] = 7
    state = load_file(str(root / "consolidated.safetensors"))
    gen = mods["voxtral_tts_audio_generation"]
    tok = mods["voxtral_tts_audio_tokenizer"]
    fm = gen.FlowMatchingAudioTransformer(json.loads(json.dumps(audio_model_args))).float()
    hf_config = types.SimpleNamespace(
        audio_config={"codec_args": mm["audio_tokenizer_args"], "audio_model_args": audio_model_args},
        text_config=types.SimpleNamespace(hidden_size=params["dim"]))
    codec = tok.VoxtralTTSAudioTokenizer(
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=hf_config))).float()
    cfg = MistralConfig(
        hidden_size=params["dim"], intermediate_size=params["hidden_dim"], num_hidden_layers=params["n_layers"],
        num_attention_heads=params["n_heads"], num_key_value_heads=params["n_kv_heads"],
        head_dim=params.get("head_dim"), rms_norm_eps=params["norm_eps"], rope_theta=params.get("rope_theta", 1e4),
        vocab_size=params["vocab_size"], max_position_embeddings=params.get("max_seq_len", 4096),
        tie_word_embeddings=True, sliding_window=None, attn_implementation="eager")
    lm = MistralModel(cfg).float()
    lm_state = {}
    rest = {}
    for name, w in state.items():
        w = w.float()
        if name.startswith("acoustic_transformer."):
            fm.load_weight((name[len("acoustic_transformer."):], w))
        elif name.startswith("audio_tokenizer."):
            codec.load_weight((name[len("audio_tokenizer."):], w))
        elif name == "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight":
            codec.load_weight(("audio_token_embedding.embeddings.weight", w))
        elif name == "mm_audio_embeddings.tok_embeddings.weight":
            lm_state["embed_tokens.weight"] = w
        else:
            rest[name] = w
    for i in range(params["n_layers"]):
        p = f"layers.{i}."
        lm_state[p + "self_attn.q_proj.weight"] = permute_rotary(rest.pop(p + "attention.wq.weight"), params["n_heads"])
        lm_state[p + "self_attn.k_proj.weight"] = permute_rotary(rest.pop(p + "attention.wk.weight"),
                                                                 params["n_kv_heads"])
        lm_state[p + "self_attn.v_proj.weight"] = rest.pop(p + "attention.wv.weight")
        lm_state[p + "self_attn.o_proj.weight"] = rest.pop(p + "attention.wo.weight")
        lm_state[p + "mlp.gate_proj.weight"] = rest.pop(p + "feed_forward.w1.weight")
        lm_state[p + "mlp.down_proj.weight"] = rest.pop(p + "feed_forward.w2.weight")
        lm_state[p + "mlp.up_proj.weight"] = rest.pop(p + "feed_forward.w3.weight")
        lm_state[p + "input_layernorm.weight"] = rest.pop(p + "attention_norm.weight")
        lm_state[p + "post_attention_layernorm.weight"] = rest.pop(p + "ffn_norm.weight")
    lm_state["norm.weight"] = rest.pop("norm.weight")
    if rest:
        raise KeyError(f"tensors the reference does not place: {sorted(rest)[:8]}")
    lm.load_state_dict(lm_state, strict=True)
    noise = _NoiseTorch(torch)
    gen.torch = noise
    return {"params": params, "fm": fm.eval(), "codec": codec.eval(), "lm": lm.eval(), "noise": noise}


def prompt_ids(root: Path, text: str, voice: str) -> tuple[list[int], str]:
    try:
        from mistral_common.protocol.speech.request import SpeechRequest
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    except ImportError:
        return _prompt_by_hand(root, text, voice), "by hand"
    tok = MistralTokenizer.from_file(str(root / "tekken.json"))
    return list(tok.encode_speech_request(SpeechRequest(input=text, voice=voice)).tokens), "mistral-common"


def _prompt_by_hand(root: Path, text: str, voice: str) -> list[int]:
    tek = json.loads((root / "tekken.json").read_text())
    if tek["config"]["num_vocab_tokens"] != 256:
        raise RuntimeError("the hand-written prompt handles only a byte-level tekken.json: install mistral-common")
    n_special = tek["config"]["default_num_special_tokens"]
    ranks = {s["token_str"]: s["rank"] for s in tek["special_tokens"]}
    n = tek["audio"]["voice_num_audio_tokens"][voice]
    return [ranks["<s>"], ranks["[BEGIN_AUDIO]"], *[ranks["[AUDIO]"]] * n, ranks["[NEXT_AUDIO_TEXT]"],
            *[b + n_special for b in text.encode("utf-8")], ranks["[REPEAT_AUDIO_TEXT]"], ranks["[BEGIN_AUDIO]"]]


def state_entries(ref: dict) -> list[str]:
    """`name shape` of every tensor the vLLM-Omni modules hold (codec encoder aside), under the
    checkpoint's names."""
    entries = [f"acoustic_transformer.{k} {list(v.shape)}" for k, v in ref["fm"].state_dict().items()]
    for k, v in ref["codec"].state_dict().items():
        if k.startswith(("input_proj.", "encoder_blocks.")):
            continue
        if k == "audio_token_embedding.embeddings.weight":
            k = "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight"
        else:
            k = f"audio_tokenizer.{k}"
        entries.append(f"{k} {list(v.shape)}")
    return entries


def main(inputs: dict, wheel: str, checkpoint: str, requests: str) -> dict:
    import torch

    torch.manual_seed(0)
    root = Path(checkpoint)
    mods = load(wheel, os.getcwd())  # refenv's temporary working directory
    ref = build(root, mods)
    params, fm, codec, lm = ref["params"], ref["fm"], ref["codec"], ref["lm"]
    audio_id = params["multimodal"]["audio_model_args"].get("audio_token_id", 24)
    out: dict = {"state": np.array(state_entries(ref))}
    with torch.inference_mode():
        for i, req in enumerate(json.loads(requests)):
            ids, source = prompt_ids(root, req["text"], req["voice"])
            out["prompt_source"] = np.array(source)
            ids_t = torch.tensor(ids)
            embeds = lm.embed_tokens(ids_t).clone()
            voice = torch.load(root / "voice_embedding" / f"{req['voice']}.pt", map_location="cpu").float()
            embeds[ids_t == audio_id] = voice
            seq = embeds[None]
            ref["noise"].rows = [row[None] for row in inputs[f"noise_{i}"]]
            alpha = torch.tensor([float(req.get("cfg_alpha", 1.2))])
            frames, hiddens, stopped = [], [], False
            for _ in range(int(req["max_new_tokens"])):
                hidden = lm(inputs_embeds=seq, use_cache=False).last_hidden_state[:, -1]
                codes = fm(hidden, alpha)  # [1, 1 + n_acoustic], +2 offset
                if int(codes[0, 0]) == 1:  # [END_AUDIO]
                    stopped = True
                    break
                frames.append(codes[0].numpy())
                hiddens.append(hidden[0].numpy())
                nxt = codec.encode_tokens([codes[:, :, None]])[0]  # [1, dim]
                seq = torch.cat([seq, nxt[None]], dim=1)
            codes_np = np.array(frames, np.int64).reshape(len(frames), -1)
            out[f"prompt_ids_{i}"] = np.array(ids, np.int64)
            out[f"codes_{i}"] = codes_np
            out[f"hidden_{i}"] = np.array(hiddens, np.float32).reshape(len(frames), -1)
            out[f"stopped_{i}"] = np.array(stopped)
            if frames:
                audio = codec.decode(torch.from_numpy(codes_np - 2).T[None], dtype=torch.float32)
                out[f"audio_{i}"] = audio.reshape(-1).numpy()
            else:
                out[f"audio_{i}"] = np.zeros(0, np.float32)
    return out


if __name__ == "__main__":
    from refenv import serve

    serve(main)
