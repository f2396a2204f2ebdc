"""A MOSS-TTS-Nano checkpoint (OpenMOSS-Team/MOSS-TTS-Nano's layout) read into typed facts, and the tensors its
weights must hold.

The directory: `config.json` (model_type `moss_tts_nano`; every key written out, as the published file does: the
remote code's config class defaults differ from the real values, so a missing key is refused, not defaulted),
`tokenizer.model` (SentencePiece; pad 3 and the prompt's specials at 4..9) and the weights, `model.safetensors`
(or its index and shards) or `pytorch_model.bin` (read with weights_only: no code runs). Tensors, in the original
names: `transformer.wte`, `transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.fc_in, mlp.fc_out}`
(plain Linear layers with biases, [out, in]), `transformer.ln_f`, the same for `local_transformer` (no `wte`:
its inputs are embeddings; a stored `local_transformer.wte.weight` is tolerated, as the remote code ignores it),
`audio_embeddings.<k>.weight` [codebook size, D], and the tied heads `text_lm_head.weight` (= transformer.wte) and
`audio_lm_heads.<k>.weight` (= audio_embeddings.<k>), which a file may also leave out. Missing, unexpected or
misshapen tensors are refused with their names.

The codec is a checkpoint of its own (OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano), found by `codec_dir` (the one
finder; the export uses it too): `<checkpoint>/audio_tokenizer/`, else `audio_tokenizer_pretrained_name_or_path` as
a folder (absolute or relative to the checkpoint), a `models--Org--Name` cache folder or snapshot, or a repo id
`Org/Name[@revision]` in the Hugging Face cache (the revision's snapshot, else refs/main's, else its only one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError
from ttscore.contract.moss_tts_nano import codec
from ttscore.contract.moss_tts_nano import graphs as spec
from ttscore.runtime.checkpoint_kit import (
    Shapes,
    compare_tensors,
    config_model_type,
    linear_shapes,
    load_torch_state,
    peek_json,
    positive_int,
    read_json,
    require_files,
)
from ttscore.runtime.hub import HUB_PREFIX, REPO_ID, hub_cache
from ttscore.runtime.weights import read_weights, weight_files

CONFIG = "config.json"
TOKENIZER = "tokenizer.model"
WEIGHTS = "model"  # model.safetensors (or its index and shards)
TORCH_WEIGHTS = "pytorch_model.bin"
CODEC_DIR = codec.CODEC_SUBDIR  # "audio_tokenizer"
CODEC_KEY = codec.CODEC_CONFIG_KEY
# The prompt's token ids, each a config key that must hold the value the contract (and the tokenizer) has.
TOKEN_IDS = {
    "pad_token_id": spec.PAD_ID, "im_start_token_id": spec.IM_START_ID, "im_end_token_id": spec.IM_END_ID,
    "audio_start_token_id": spec.AUDIO_START_ID, "audio_end_token_id": spec.AUDIO_END_ID,
    "audio_user_slot_token_id": spec.AUDIO_USER_SLOT_ID, "audio_assistant_slot_token_id": spec.AUDIO_ASSISTANT_SLOT_ID,
}
IGNORED = ("local_transformer.wte.weight",)


@dataclass(frozen=True)
class MossConfig:
    vocab_size: int
    dim: int
    layers: int
    heads: int
    inner: int
    local_layers: int
    n_vq: int
    codebook_size: int  # every codebook's (the audio pad id equals it)
    eps: float
    rope_base: float
    sample_rate: int
    codec_source: str | None  # audio_tokenizer_pretrained_name_or_path

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def audio_pad_id(self) -> int:
        return self.codebook_size


is_moss_tts_nano = config_model_type(spec.MODEL_TYPE, CONFIG)


def _number(d: dict[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
        raise CheckpointError(f"{CONFIG}: {where}{key} must be a positive number, got {v!r}")
    return float(v)


def parse_config(cfg: dict[str, Any]) -> MossConfig:
    """config.json's facts; CheckpointError naming the key for anything missing or that the family does not run."""
    if cfg.get("model_type") != spec.MODEL_TYPE:
        raise CheckpointError(f"{CONFIG}: model_type {cfg.get('model_type')!r} is not {spec.MODEL_TYPE!r}")
    gpt2 = cfg.get("gpt2_config")
    if not isinstance(gpt2, dict):
        raise CheckpointError(f"{CONFIG}: gpt2_config must be an object")
    w = "gpt2_config."
    dim, layers, heads = positive_int(gpt2, "n_embd", w), positive_int(gpt2, "n_layer", w), positive_int(gpt2, "n_head", w)
    inner, vocab = positive_int(gpt2, "n_inner", w), positive_int(gpt2, "vocab_size", w)
    if dim % heads or (dim // heads) % 2:
        raise CheckpointError(f"{CONFIG}: gpt2_config.n_embd {dim} must split into n_head {heads} heads of an even size")
    for key, want in (("position_embedding_type", "rope"), ("activation_function", "gelu_new")):
        if gpt2.get(key) != want:
            raise CheckpointError(f"{CONFIG}: gpt2_config.{key} must be {want!r}, got {gpt2.get(key)!r}")
    for flag, on in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if gpt2.get(flag, on) is not on:
            raise CheckpointError(f"{CONFIG}: gpt2_config.{flag} {gpt2.get(flag)!r} is not supported (only {on})")
    n_vq = positive_int(cfg, "n_vq")
    if n_vq != spec.N_VQ:
        raise CheckpointError(f"{CONFIG}: n_vq must be {spec.N_VQ}, got {n_vq}")
    sizes = cfg.get("audio_codebook_sizes")
    if not isinstance(sizes, list) or len(sizes) != n_vq or len(set(sizes)) != 1:
        raise CheckpointError(f"{CONFIG}: audio_codebook_sizes must list one size {n_vq} times, got {sizes!r}")
    size = positive_int({"audio_codebook_sizes": sizes[0]}, "audio_codebook_sizes")
    if cfg.get("audio_pad_token_id") != size:
        raise CheckpointError(f"{CONFIG}: audio_pad_token_id must equal the codebook size {size}, got "
                              f"{cfg.get('audio_pad_token_id')!r}")
    for name, token in TOKEN_IDS.items():
        if cfg.get(name) != token:
            raise CheckpointError(f"{CONFIG}: {name} must be {token}, got {cfg.get(name)!r}")
    if vocab <= spec.AUDIO_ASSISTANT_SLOT_ID:
        raise CheckpointError(f"{CONFIG}: gpt2_config.vocab_size {vocab} has no room for the prompt's token ids")
    source = cfg.get("audio_tokenizer_pretrained_name_or_path")
    if source is not None and not isinstance(source, str):
        raise CheckpointError(f"{CONFIG}: audio_tokenizer_pretrained_name_or_path must be a string")
    return MossConfig(vocab_size=vocab, dim=dim, layers=layers, heads=heads, inner=inner,
                      local_layers=positive_int(cfg, "local_transformer_layers"), n_vq=n_vq, codebook_size=size,
                      eps=_number(gpt2, "layer_norm_epsilon", w), rope_base=_number(gpt2, "rope_base", w),
                      sample_rate=positive_int(cfg, "audio_tokenizer_sample_rate"), codec_source=source)


def read_config(checkpoint: Path) -> MossConfig:
    return parse_config(read_json(Path(checkpoint) / CONFIG))


def _stack_shapes(out: Shapes, prefix: str, c: MossConfig, layers: int) -> None:
    for i in range(layers):
        p = f"{prefix}.h.{i}"
        for norm in ("ln_1", "ln_2"):
            out[f"{p}.{norm}.weight"] = out[f"{p}.{norm}.bias"] = (c.dim,)
        linear_shapes(out, f"{p}.attn.c_attn", 3 * c.dim, c.dim, bias=True)
        linear_shapes(out, f"{p}.attn.c_proj", c.dim, c.dim, bias=True)
        linear_shapes(out, f"{p}.mlp.fc_in", c.inner, c.dim, bias=True)
        linear_shapes(out, f"{p}.mlp.fc_out", c.dim, c.inner, bias=True)
    out[f"{prefix}.ln_f.weight"] = out[f"{prefix}.ln_f.bias"] = (c.dim,)


def tensor_shapes(c: MossConfig, *, heads: bool = True) -> Shapes:
    """Every tensor the weights hold, in the original names (`heads`: with the tied head copies)."""
    out: Shapes = {"transformer.wte.weight": (c.vocab_size, c.dim)}
    _stack_shapes(out, "transformer", c, c.layers)
    _stack_shapes(out, "local_transformer", c, c.local_layers)
    for k in range(c.n_vq):
        out[f"audio_embeddings.{k}.weight"] = (c.codebook_size, c.dim)
    if heads:
        out["text_lm_head.weight"] = (c.vocab_size, c.dim)
        for k in range(c.n_vq):
            out[f"audio_lm_heads.{k}.weight"] = (c.codebook_size, c.dim)
    return out


def tied_heads(c: MossConfig) -> dict[str, str]:
    """Each tied head copy -> the tensor it equals."""
    ties = {"text_lm_head.weight": "transformer.wte.weight"}
    ties.update({f"audio_lm_heads.{k}.weight": f"audio_embeddings.{k}.weight" for k in range(c.n_vq)})
    return ties


def weights_file(checkpoint: Path) -> Path:
    """The weight file (safetensors, or the index of its shards) or pytorch_model.bin; the first wins."""
    root = Path(checkpoint)
    found = weight_files(root, WEIGHTS)
    if found is not None:
        return found
    if (root / TORCH_WEIGHTS).is_file():
        return root / TORCH_WEIGHTS
    raise CheckpointError(f"{root}: missing model.safetensors (or its index and shards) or {TORCH_WEIGHTS}")


def stored_shapes(checkpoint: Path) -> dict[str, tuple[int, ...]]:
    path = weights_file(checkpoint)
    if path.name == TORCH_WEIGHTS:
        return {k: tuple(v.shape) for k, v in load_torch_state(path).items()}
    return read_weights(Path(checkpoint), WEIGHTS).shapes()


def check_tensors(checkpoint: Path, c: MossConfig) -> None:
    """The stored tensors against the config: none missing (the tied head copies may be), none unexpected (but
    the ignored `local_transformer.wte`), every shape right."""
    stored = stored_shapes(checkpoint)
    expected = tensor_shapes(c, heads=False)
    heads = tensor_shapes(c)
    expected.update({n: s for n, s in heads.items() if n in stored})
    compare_tensors(f"{checkpoint}: {weights_file(checkpoint).name}", stored, expected, ignore=lambda n: n in IGNORED)


def hub_snapshot(repo_folder: Path, revision: str | None = None) -> Path | None:
    """A `models--Org--Name` cache folder's snapshot: `revision` (a ref under refs/, or a snapshot's commit), else
    the one refs/main names, else its only snapshot; None when there is none such (never downloads)."""
    snapshots = Path(repo_folder) / "snapshots"
    want = revision or "main"
    ref = Path(repo_folder) / "refs" / want
    commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else want
    if commit and (snapshots / commit).is_dir():
        return snapshots / commit
    if revision is None:
        found = sorted(p for p in snapshots.glob("*") if p.is_dir())
        return found[0] if len(found) == 1 else None
    return None


def is_codec_dir(path: Path) -> bool:
    """A MOSS-Audio-Tokenizer-Nano checkpoint folder: a config.json with encoder_kwargs and decoder_kwargs."""
    cfg = peek_json(Path(path) / CONFIG)
    return cfg is not None and "encoder_kwargs" in cfg and "decoder_kwargs" in cfg


def codec_sha256(folder: Path) -> str:
    """The codec's identity (what precomputed voices of its codes are checked against): sha256 over its config.json
    and weight files (`*.safetensors` and their index), each as `name NUL file-sha256 LF`, by name."""
    import hashlib

    from ttscore.runtime.weights import file_digest

    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file() and (
        p.name == CONFIG or p.name.endswith(".safetensors") or p.name.endswith(".safetensors.index.json")))
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.name}\0{file_digest(p)}\n".encode())
    return h.hexdigest()


def _named_codec(named: str, checkpoint: Path) -> Path | None:
    """The folder `named` (the LM config's audio_tokenizer_pretrained_name_or_path) stands for: a folder (absolute,
    ~, or relative to the checkpoint), a `models--Org--Name` cache folder (its snapshot), a snapshot, or a repo id
    `Org/Name[@revision]` in the Hugging Face cache."""
    for cand in (Path(named).expanduser(), checkpoint / named):
        if cand.is_dir():
            return hub_snapshot(cand) if cand.resolve().name.startswith(HUB_PREFIX) else cand
    repo = REPO_ID.fullmatch(named)
    if repo is None:
        return None
    return hub_snapshot(hub_cache() / (HUB_PREFIX + repo["repo"].replace("/", "--")), repo["revision"])


def codec_dir(checkpoint: Path, c: MossConfig | None = None) -> Path:
    """The codec checkpoint's folder (the one finder of the runtime, the export and the tools):
    `<checkpoint>/audio_tokenizer/` when it holds a codec, else what the LM config's
    `audio_tokenizer_pretrained_name_or_path` names (`_named_codec`: a folder, absolute or relative to the
    checkpoint, a `models--Org--Name` cache folder or snapshot, or a repo id in the Hugging Face cache; never
    downloaded). `c` None: the key is read from config.json without checking the rest. CheckpointError otherwise."""
    root = Path(checkpoint)
    inside = root / CODEC_DIR
    if is_codec_dir(inside):
        return inside
    if c is not None:
        named: Any = c.codec_source
    else:
        named = (peek_json(root / CONFIG) or {}).get(CODEC_KEY)
    if isinstance(named, str) and named:
        found = _named_codec(named, root)
        if found is not None and is_codec_dir(found):
            return found
        get = named if REPO_ID.fullmatch(named) else codec.CODEC_REPO
        raise CheckpointError(
            f"{root}: its codec {named!r} ({CODEC_KEY}) is neither a codec folder nor in the Hugging Face cache "
            f"({hub_cache()}); run `huggingface-cli download {get}` or put the codec in {inside}/")
    raise CheckpointError(f"{root}: no codec: {inside}/ has no codec config.json and {CONFIG} names none "
                          f"({CODEC_KEY})")


def read_checkpoint(checkpoint: Path) -> MossConfig:
    """Check the directory: config, tokenizer, the weights against the config, and that a codec is found."""
    root = Path(checkpoint)
    require_files(root, (CONFIG, TOKENIZER))
    c = read_config(root)
    check_tensors(root, c)
    codec_dir(root, c)
    return c
