"""A random-weight MOSS-TTS-Nano checkpoint in OpenMOSS-Team/MOSS-TTS-Nano's layout (`make-tiny --family
moss_tts_nano`), with its codec in `audio_tokenizer/` (export/moss_tts_nano/tiny_codec.py).

- `config.json` with every key written out (the remote code's config class defaults differ from the published
  values: n_vq 8, Qwen token ids, 4 local layers), `gpt2_config` included;
- `tokenizer.model`: a SentencePiece BPE model (byte fallback; identity normalizer, so newlines reach the byte
  pieces) whose merges are learned here from the prompt template and a few sentences (export.tiny_weights
  `learn_bpe_merges`), written as SentencePiece's ModelProto through the protobuf module transformers bundles
  (sentencepiece's own, else the copy transformers bundles): unk 0, <s> 1, </s> 2, <pad> 3, and the prompt's six
  specials as user-defined symbols at 4..9;
- the weights in the original names (`model.safetensors`, or `pytorch_model.bin` with `weights="bin"`), the tied
  head copies `text_lm_head` and `audio_lm_heads.<k>` written equal to `transformer.wte` and
  `audio_embeddings.<k>`, no `local_transformer.wte`;
- a stop row: `wte` row 9 (the assistant slot, also the generated rows' column 0 and the "continue" logit) is
  re-drawn until greedy decoding of two probe prompts ends by itself after 2..8 frames (at repetition penalty 1.0
  and 1.2), so the stop branch runs in every test (tiny size only; `--size real` keeps its random row).

`--size real` has the published dimensions (117.3 M parameters: GPT-2 12 x 768, 12 heads, 3072 inner, vocab
16384, one local layer, 16 codebooks of 1024).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from export.tiny_weights import (
    TensorInit,
    checkpoint_writer,
    json_bytes,
    learn_bpe_merges,
    save_weights,
    tensor_rng,
    tiny_size,
    write_files,
)
from ttscore.contract.moss_tts_nano import graphs as spec
from ttscore.runtime.checkpoint_kit import config_model_type
from ttscore.runtime.families.moss_tts_nano.checkpoint import (
    CODEC_DIR,
    CONFIG,
    TOKENIZER,
    TORCH_WEIGHTS,
    parse_config,
    tensor_shapes,
    tied_heads,
)

WEIGHT_FORMATS = ("safetensors", "bin")
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_user_slot|>",
            "<|audio_assistant_slot|>")  # ids 4..9 (the contract's IM_START_ID .. AUDIO_ASSISTANT_SLOT_ID)
WHITESPACE = "\u2581"  # SentencePiece's escaped space
_CORPUS = ("user assistant <user_inst> </user_inst> - Reference(s): - Instruction: None - Tokens: None - Quality: "
           "None - Sound Event: None - Ambient Sound: None - Language: None - Text: Hello, this is MOSS TTS Nano. "
           "The quick brown fox jumps over the lazy dog. Good morning, how are you today? One two three four five.")
MERGES = 120
STOP_FRAMES = (2, 8)  # greedy decoding of the probes must end within this many frames
STOP_TRIES = 400


def config(size: str = "tiny", codebook_size: int | None = None) -> dict[str, Any]:
    tiny = tiny_size(size)
    c = codebook_size or (16 if tiny else spec.CODEBOOK_SIZE)
    dim, layers, heads, inner, vocab = (32, 2, 4, 64, 512) if tiny else (768, 12, 12, 3072, 16384)
    gpt2 = {"model_type": "gpt2", "vocab_size": vocab, "n_positions": 32768, "n_ctx": 32768, "n_embd": dim,
            "n_layer": layers, "n_head": heads, "n_inner": inner, "activation_function": "gelu_new",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5,
            "initializer_range": 0.02, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "position_embedding_type": "rope", "rope_base": 10000.0,
            "pad_token_id": spec.PAD_ID, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True,
            "use_cache": True}
    return {
        "architectures": [spec.ARCHITECTURE],
        "auto_map": {"AutoConfig": "configuration_moss_tts_nano.MossTTSNanoConfig",
                     "AutoModelForCausalLM": "modeling_moss_tts_nano.MossTTSNanoForCausalLM"},
        "model_type": spec.MODEL_TYPE,
        "model_architecture": "global_local_transformer",
        "gpt2_config": gpt2,
        "n_vq": spec.N_VQ,
        "audio_vocab_size": c,
        "audio_codebook_sizes": [c] * spec.N_VQ,
        "audio_pad_token_id": c,
        "pad_token_id": spec.PAD_ID,
        "im_start_token_id": spec.IM_START_ID,
        "im_end_token_id": spec.IM_END_ID,
        "audio_start_token_id": spec.AUDIO_START_ID,
        "audio_end_token_id": spec.AUDIO_END_ID,
        "audio_user_slot_token_id": spec.AUDIO_USER_SLOT_ID,
        "audio_assistant_slot_token_id": spec.AUDIO_ASSISTANT_SLOT_ID,
        "audio_tokenizer_type": "moss-audio-tokenizer-nano",
        "audio_tokenizer_pretrained_name_or_path": "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano",
        "audio_tokenizer_sample_rate": spec.SAMPLE_RATE,
        "tokenizer_use_fast": False,
        "attn_implementation": "sdpa",
        "local_transformer_layers": 1,
        "local_transformer_attn_implementation": "sdpa",
        "initializer_range": 0.02,
        "max_position_embeddings": 32768,
        "hidden_size": dim,
        "vocab_size": vocab,
        "torch_dtype": "float32",
        "transformers_version": "4.57.1",
    }


# --- tokenizer ---------------------------------------------------------------------------------------------------


def tokenizer_model(corpus: str = _CORPUS, merges: int = MERGES, vocab: int = 512) -> bytes:
    """The SentencePiece ModelProto bytes (see the module docstring); every id below `vocab` (the LM's)."""
    try:  # sentencepiece's own ModelProto, else the copy transformers bundles (protobuf only)
        from sentencepiece import sentencepiece_model_pb2 as pb
    except Exception:  # not installed, or built for another protobuf runtime (a VersionError)
        from transformers.utils import sentencepiece_model_pb2_new as pb
    words = Counter(tuple(WHITESPACE + w) for w in corpus.split())
    learned = learn_bpe_merges(words, merges)
    m = pb.ModelProto()
    kind = pb.ModelProto.SentencePiece.Type

    def add(piece: str, score: float, t: int) -> None:
        p = m.pieces.add()
        p.piece, p.score, p.type = piece, score, t

    add("<unk>", 0.0, kind.UNKNOWN)
    add("<s>", 0.0, kind.CONTROL)
    add("</s>", 0.0, kind.CONTROL)
    add("<pad>", 0.0, kind.CONTROL)
    for s in SPECIALS:
        add(s, 0.0, kind.USER_DEFINED)
    for byte in range(256):
        add(f"<0x{byte:02X}>", 0.0, kind.BYTE)
    seen = {p.piece for p in m.pieces}
    score = 0.0
    for left, right in learned:  # merges first, best first (SentencePiece BPE merges by piece score)
        if left + right not in seen:
            add(left + right, score, kind.NORMAL)
            seen.add(left + right)
            score -= 1.0
    for ch in sorted({ch for w in words for ch in w}):
        if ch not in seen:
            add(ch, score, kind.NORMAL)
            seen.add(ch)
            score -= 1.0
    if len(m.pieces) > vocab:
        raise ValueError(f"the tokenizer's {len(m.pieces)} pieces do not fit the LM's vocabulary of {vocab}")
    t = m.trainer_spec
    t.model_type = 2  # BPE
    t.vocab_size = len(m.pieces)
    t.byte_fallback = True
    t.unk_id, t.bos_id, t.eos_id, t.pad_id = 0, 1, 2, spec.PAD_ID
    t.unk_piece, t.bos_piece, t.eos_piece, t.pad_piece = "<unk>", "<s>", "</s>", "<pad>"
    t.user_defined_symbols.extend(SPECIALS)
    t.split_by_whitespace = True
    n = m.normalizer_spec
    n.name = "identity"
    n.add_dummy_prefix = True
    n.remove_extra_whitespaces = False
    n.escape_whitespaces = True
    data: bytes = m.SerializeToString()
    return data


# --- weights -----------------------------------------------------------------------------------------------------


def model_weights(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    import torch

    c = parse_config(cfg)
    init = TensorInit(seed, spec.MODEL_TYPE, torch.float32)
    ties = tied_heads(c)
    for name, shape in tensor_shapes(c, heads=False).items():
        if ".ln_" in name and name.endswith("weight"):
            init.normal(name, shape, 0.1, mean=1.0)
        elif name.endswith("bias"):
            init.normal(name, shape, 0.02)
        elif name == "transformer.wte.weight" or name.startswith("audio_embeddings."):
            init.normal(name, shape, 0.5)
        else:
            init.normal(name, shape, 1.0 / math.sqrt(shape[1]))
    for head, tied in ties.items():
        init.tensors[head] = init.tensors[tied].clone()
    return init.tensors


def probe_prompts(c: Any) -> list[np.ndarray]:
    """Two voice-clone-shaped prompts ([T, 17] rows: text rows, reference code rows with the user slot, the
    assistant prefix ending in audio_start) of different lengths, from fixed ids."""
    rng = np.random.default_rng(1234)
    prompts = []
    for text_len, ref_frames in ((12, 3), (25, 6)):
        text = lambda n: rng.integers(10, min(c.vocab_size, 300), n)  # noqa: E731
        ids = [spec.IM_START_ID, *text(6), spec.AUDIO_START_ID]
        rows = [[i] + [c.audio_pad_id] * c.n_vq for i in ids]
        rows += [[spec.AUDIO_USER_SLOT_ID, *rng.integers(0, c.codebook_size, c.n_vq)] for _ in range(ref_frames)]
        tail = [spec.AUDIO_END_ID, *text(text_len), spec.IM_END_ID, spec.IM_START_ID, *text(2), spec.AUDIO_START_ID]
        rows += [[i] + [c.audio_pad_id] * c.n_vq for i in tail]
        prompts.append(np.array(rows, np.int64))
    return prompts


def place_stop_row(cfg: dict[str, Any], weights: dict[str, Any], seed: int) -> int:
    """Re-draw wte row 9 (and its tied copy) until greedy decoding of every probe prompt stops by itself within
    STOP_FRAMES at repetition penalty 1.0 and 1.2; returns the try that did. RuntimeError if none did."""
    import torch

    from export.moss_tts_nano import lm

    c = parse_config(cfg)
    prompts = probe_prompts(c)
    slot = spec.AUDIO_ASSISTANT_SLOT_ID
    lo, hi = STOP_FRAMES

    class Mem:
        def get(self, name: str) -> Any:
            return weights[name]

    for attempt in range(STOP_TRIES):
        row = tensor_rng(seed, "moss_tts_nano-stop-row", str(attempt)).standard_normal(c.dim).astype(np.float32)
        weights["transformer.wte.weight"][slot] = torch.from_numpy(row * np.float32(0.5 + 0.05 * (attempt % 20)))
        weights["text_lm_head.weight"][slot] = weights["transformer.wte.weight"][slot]
        g, local = lm.global_step(c, Mem()), lm.local_step(c, Mem())  # type: ignore[arg-type]
        tabs = lm.tables(c, Mem())  # type: ignore[arg-type]
        ok = all(lo <= len(lm.greedy_frames(g, local, tabs, p, hi + 1, penalty)) <= hi
                 for p in prompts for penalty in (1.0, 1.2))
        if ok:
            return attempt
    raise RuntimeError(f"no stop row in {STOP_TRIES} tries (seed {seed})")


def make_tiny_moss(out: Path, seed: int = 0, size: str = "tiny", weights: str = "safetensors") -> Path:
    """Write the checkpoint (and its codec) into `out`; returns it."""
    import torch

    from export.moss_tts_nano.tiny_codec import write_codec

    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)}, got {weights!r}")
    cfg = config(size)
    tensors = model_weights(cfg, seed)
    if tiny_size(size):
        place_stop_row(cfg, tensors, seed)
    with checkpoint_writer(Path(out), "a MOSS-TTS-Nano checkpoint", config_model_type(spec.MODEL_TYPE)) as tmp:
        write_files(tmp, {CONFIG: json_bytes(cfg), TOKENIZER: tokenizer_model(vocab=cfg["vocab_size"])})
        if weights == "bin":
            torch.save({k: v.contiguous() for k, v in tensors.items()}, tmp / TORCH_WEIGHTS)
        else:
            save_weights({k: v.contiguous() for k, v in tensors.items()}, tmp / "model.safetensors")
        write_codec(tmp / CODEC_DIR, size, seed=seed, codebook_size=cfg["audio_vocab_size"])
    return Path(out)
