"""A random-weight CosyVoice3 checkpoint in FunAudioLLM's released layout (`make-tiny --family cosyvoice3`).

Writes `cosyvoice3.yaml` (hyperpyyaml, the released file's structure: `!new:` module tags, `!name:`
sampling, `!ref` values including `static_chunk_size: !ref <chunk_size> * <token_mel_ratio>`), `llm.pt`,
`flow.pt`, `hift.pt` (plain state dicts of tensors, loadable with `weights_only=True`; hift's weight norm
as `parametrizations.weight.original0/1`), tiny `campplus.onnx` (kaldi fbank [B, T, 80] -> [B, 192]) and
`speech_tokenizer_v3.onnx` ((Whisper mel [1, 128, T], length [1] int32) -> tokens [1, ceil(T / 4)] int32,
ids below speech_token_size) with the released models' input/output ranks and dtypes, an empty
`config.json` (vLLM-Omni patches it), and `CosyVoice-BlankEN/` (Qwen2 config.json, generation_config.json,
a small byte-level BPE as vocab.json + merges.txt + tokenizer_config.json). The text embedding covers the tokenizer plus the CosyVoice3 special
tokens vLLM-Omni's tokenizer adds at load. `--size real` has the published dimensions.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    TensorInit,
    byte_level_bpe,
    checkpoint_writer,
    json_bytes,
    tiny_size,
    write_files,
)
from ttscore.runtime.checkpoint_kit import read_hyperpyyaml
from ttscore.runtime.families.cosyvoice3.checkpoint import (
    CAMPPLUS,
    FLOW,
    HIFT,
    LLM,
    QWEN_DIR,
    SPEECH_TOKENIZER,
    YAML,
    CosyVoice3Info,
    flow_shapes,
    hift_shapes,
    llm_shapes,
    parse,
)

# CosyVoice3Tokenizer's added special tokens are ~300 (its additional_special_tokens); the text embedding
# of a tiny checkpoint leaves room for them after the BPE.
ADDED_TOKEN_ROOM = 320
_CORPUS = ("The quick brown fox jumps over the lazy dog. Hello world, this is a tiny text to speech model. "
           "She sells sea shells by the sea shore. You are a helpful assistant. How are you today? "
           "CosyVoice three speaks in many voices; numbers 0 1 2 3 4 5 6 7 8 9 and punctuation!") * 4


def dims(size: str) -> dict[str, Any]:
    if tiny_size(size):
        return {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "inter": 128, "speech_tokens": 6561,
                "lookahead": 64, "dit_dim": 64, "depth": 2, "dit_heads": 4, "dim_head": 16, "hift_base": 32,
                "f0_cond": 32}
    return {"hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2, "inter": 4864, "speech_tokens": 6561,
            "lookahead": 1024, "dit_dim": 1024, "depth": 22, "dit_heads": 16, "dim_head": 64, "hift_base": 512,
            "f0_cond": 512}


def yaml_text(size: str = "tiny") -> str:
    d = dims(size)
    return f"""# set random seed, so that you may reproduce your result.
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]
__set_seed4: !apply:torch.cuda.manual_seed_all [1986]

# fixed params
sample_rate: 24000
llm_input_size: {d['hidden']}
llm_output_size: {d['hidden']}
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2

# stream related params
chunk_size: 25 # streaming inference chunk size, in token
num_decoding_left_chunks: -1 # streaming inference flow decoder left chunk size, <0 means use all left chunks

# model params
llm: !new:cosyvoice.llm.llm.CosyVoice3LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: {d['speech_tokens']}
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: {d['speech_tokens']}
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3
    pre_lookahead_layer: !new:cosyvoice.transformer.upsample_encoder.PreLookaheadLayer
        in_channels: 80
        channels: {d['lookahead']}
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
            dim: {d['dit_dim']}
            depth: {d['depth']}
            heads: {d['dit_heads']}
            dim_head: {d['dim_head']}
            ff_mult: 2
            mel_dim: 80
            mu_dim: 80
            spk_dim: 80
            out_channels: 80
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: !ref <num_decoding_left_chunks>

hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    base_channels: {d['hift_base']}
    nb_harmonics: 8
    sampling_rate: !ref <sample_rate>
    nsf_alpha: 0.1
    nsf_sigma: 0.003
    nsf_voiced_threshold: 10
    upsample_rates: [8, 5, 3]
    upsample_kernel_sizes: [16, 11, 7]
    istft_params:
        n_fft: 16
        hop_len: 4
    resblock_kernel_sizes: [3, 7, 11]
    resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    source_resblock_kernel_sizes: [7, 7, 11]
    source_resblock_dilation_sizes: [[1, 3, 5], [1, 3, 5], [1, 3, 5]]
    lrelu_slope: 0.1
    audio_limit: 0.99
    conv_pre_look_right: 4
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.CausalConvRNNF0Predictor
        num_class: 1
        in_channels: 80
        cond_channels: {d['f0_cond']}

# processor functions (training only; kept for the layout)
tokenize: !name:cosyvoice.dataset.processor.tokenize
    get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
        token_path: !ref <qwen_pretrain_path>
        skip_special_tokens: True
        version: cosyvoice3
    allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: null
    center: False
"""


@lru_cache(maxsize=1)
def _bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A small byte-level BPE (Qwen's pre-tokenizer family): its vocab and merges."""
    import json

    model = json.loads(byte_level_bpe([_CORPUS]).to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), [(a, b) for a, b in merges]


def tokenizer_files() -> dict[str, bytes]:
    """Qwen2's slow-tokenizer files, as CosyVoice-BlankEN ships them: vocab.json, merges.txt and
    tokenizer_config.json whose added_tokens_decoder puts <|endoftext|> right after the BPE ids."""
    vocab, merges = _bpe()
    eot = len(vocab)
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "add_prefix_space": False, "bos_token": None,
           "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
           "model_max_length": 32768, "clean_up_tokenization_spaces": False,
           "added_tokens_decoder": {str(eot): {"content": "<|endoftext|>", "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}}}
    merges_txt = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    return {"vocab.json": json_bytes(vocab), "merges.txt": merges_txt.encode("utf-8"), "tokenizer_config.json": json_bytes(cfg)}


def text_vocab(size: str) -> int:
    if size == "real":
        return 151936
    return 64 * math.ceil((len(_bpe()[0]) + 1 + ADDED_TOKEN_ROOM) / 64)


def qwen_config(size: str) -> dict[str, Any]:
    d = dims(size)
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": d["hidden"],
        "initializer_range": 0.02, "intermediate_size": d["inter"], "max_position_embeddings": 32768,
        "max_window_layers": d["layers"], "num_attention_heads": d["heads"], "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["kv_heads"], "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.57.3", "use_cache": True, "use_sliding_window": False,
        "vocab_size": text_vocab(size)}


def info_of(size: str) -> CosyVoice3Info:
    import yaml  # noqa: F401  (read_hyperpyyaml needs PyYAML)

    tmp = Path(tempfile.mkdtemp(prefix=".cosyvoice3-yaml-"))
    try:
        (tmp / YAML).write_text(yaml_text(size))
        return parse(read_hyperpyyaml(tmp / YAML), qwen_config(size))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _init(init: TensorInit, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    import numpy as np

    for name, shape in shapes.items():
        if name.endswith("rotary_embed.inv_freq"):  # x-transformers' RotaryEmbedding buffer
            dim = 2 * shape[0]
            init._put(name, (1.0 / (10000 ** (np.arange(0, dim, 2, dtype=np.float32) / dim))).astype(np.float32))
        elif name.endswith(("norm.weight", "layernorm.weight")):
            init.normal(name, shape, 0.1, mean=1.0)
        elif name.endswith(".alpha"):  # Snake
            init.uniform(name, shape, 0.5, 1.5)
        elif name == "conv_post.parametrizations.weight.original0":  # small log-magnitudes: audio RMS ~0.03, no clipping
            init.uniform(name, shape, 0.02, 0.04)
        elif name.endswith("original0"):  # weight-norm g
            init.uniform(name, shape, 0.5, 1.5)
        elif name.endswith(".bias"):
            init.normal(name, shape, 0.02)
        elif "embedding" in name or "embed_tokens" in name:
            init.normal(name, shape, 0.5)
        elif name.endswith("attn_norm.linear.weight") or name.endswith("norm_out.linear.weight"):
            init.normal(name, shape, 0.3 / math.sqrt(shape[1]))
        elif name.endswith("llm_decoder.weight"):
            init.normal(name, shape, 2.0 / math.sqrt(shape[1]))
        else:
            init.fan_in(name, shape)
    return init.tensors


def weights(info: CosyVoice3Info, seed: int, dtype: Any) -> dict[str, dict[str, Any]]:
    out = {LLM: _init(TensorInit(seed, "cosyvoice3.llm", dtype), llm_shapes(info)),
           FLOW: _init(TensorInit(seed, "cosyvoice3.flow", dtype), flow_shapes(info)),
           HIFT: _init(TensorInit(seed, "cosyvoice3.hift", dtype), hift_shapes(info))}
    llm = out[LLM]
    llm["llm.model.lm_head.weight"] = llm["llm.model.model.embed_tokens.weight"]  # tied, as Qwen2-0.5B
    # Stop ids rarer than speech ids: the tiny LM otherwise ends after a few tokens.
    llm["llm_decoder.weight"][info.lm.speech_token_size:] *= 0.25
    return out


def campplus_model(seed: int) -> Any:
    """fbank [B, T, 80] -> embedding [B, 192]: mean over time of a random projection (real I/O ranks)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng([seed, 192])
    w = numpy_helper.from_array((rng.standard_normal((80, 192)) / math.sqrt(80)).astype(np.float32), "proj")
    nodes = [helper.make_node("ReduceMean", ["input"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["pooled", "proj"], ["output"])]
    graph = helper.make_graph(nodes, "campplus", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", "T", 80])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", 192])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def speech_tokenizer_model(seed: int, speech_tokens: int) -> Any:
    """(feats [1, 128, T], feats_length [1] int32) -> indices [1, ceil(T / 4)] int32: 4-frame means of the
    Whisper mel, projected and argmaxed over speech_tokens ids (the real model's 25 Hz from 100 Hz)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng([seed, 3])
    w = numpy_helper.from_array(rng.standard_normal((128, speech_tokens)).astype(np.float32), "proj")
    pool = numpy_helper.from_array(np.full((128, 1, 4), 0.25, np.float32), "pool")
    nodes = [
        helper.make_node("Conv", ["feats", "pool"], ["pooled"], group=128, strides=[4], pads=[0, 3]),
        helper.make_node("Transpose", ["pooled"], ["frames"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["frames", "proj"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["ids"], axis=2, keepdims=0),
        helper.make_node("Cast", ["ids"], ["indices"], to=TensorProto.INT32),
        helper.make_node("Identity", ["feats_length"], ["unused_length"]),
    ]
    graph = helper.make_graph(
        nodes, "speech_tokenizer_v3",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
         helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("indices", TensorProto.INT32, [1, "T4"]),
         helper.make_tensor_value_info("unused_length", TensorProto.INT32, [1])], [w, pool])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def make_tiny_cosyvoice3(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    import onnx
    import torch

    info = info_of(size)
    dtype = torch.float32
    with checkpoint_writer(out, "a CosyVoice3 checkpoint", None) as tmp:
        write_files(tmp, {YAML: yaml_text(size), "config.json": json_bytes({})})
        for name, state in weights(info, seed, dtype).items():
            torch.save(state, tmp / name)
        onnx.save(campplus_model(seed), str(tmp / CAMPPLUS))
        onnx.save(speech_tokenizer_model(seed, info.lm.speech_token_size), str(tmp / SPEECH_TOKENIZER))
        write_files(tmp / QWEN_DIR, {
            "config.json": json_bytes(qwen_config(size)),
            "generation_config.json": json_bytes({"bos_token_id": 151643, "eos_token_id": 151643, "max_new_tokens": 2048}),
            **tokenizer_files()})
    return Path(out)
