"""Writing random-weight checkpoints (every family's make-tiny): per-tensor deterministic weights,
JSON files, and a checkpoint directory written aside and moved into place (`checkpoint_writer`). A maker that
builds the reference's torch modules on the meta device walks their tensors module by module (`module_tensors`),
each module type drawn by the family's own rule.

Each tensor draws from its own PCG64 stream seeded by sha256(seed, scope, name), so a file depends
only on its arguments and a tensor's values do not change when another tensor is added.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

TINY_SIZES = ("tiny", "real")  # make-tiny --size of a family with one real size
# The chat LMs' byte-level BPE tokenizer that several families' text stacks use (Qwen2's and Qwen3's): its
# pre-tokenizer split (tokenizer.json's Split pattern, then byte-level without its own regex) and its added tokens
# after the 151643 BPE ids, in id order (151643..151668), the first CHAT_LM_SPECIAL of them special.
CHAT_LM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                 r"|\s+(?!\S)|\s+")
CHAT_LM_ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                 "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                 "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>")
CHAT_LM_SPECIAL = 14


def tiny_size(size: str) -> bool:
    """Whether the make-tiny `size` of a family with one real size (TINY_SIZES) is the tiny one, not the real
    one; ValueError for any other size."""
    if size not in TINY_SIZES:
        raise ValueError(f"size must be one of {', '.join(TINY_SIZES)}, got {size!r}")
    return size == "tiny"


def tensor_rng(seed: int, scope: str, name: str) -> Any:
    import numpy as np

    digest = hashlib.sha256(f"{seed}\0{scope}\0{name}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "little")))


class TensorInit:
    """Per-tensor deterministic draws; every tensor of the state dict must be claimed exactly once."""

    def __init__(self, seed: int, scope: str, dtype: Any) -> None:
        self.seed, self.scope, self.dtype = seed, scope, dtype
        self.tensors: dict[str, Any] = {}

    def _put(self, name: str, arr: Any) -> None:
        import torch

        if name in self.tensors:
            raise AssertionError(f"tensor {name} initialized twice")
        self.tensors[name] = torch.from_numpy(arr).to(self.dtype)

    def normal(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> None:
        import numpy as np

        arr = tensor_rng(self.seed, self.scope, name).standard_normal(shape, dtype=np.float32)
        if std != 1.0:
            arr *= np.float32(std)
        if mean != 0.0:
            arr += np.float32(mean)
        self._put(name, arr)

    def fan_in(self, name: str, shape: tuple[int, ...]) -> None:
        """Normal with std 1/sqrt(fan_in), fan_in the product of every dim but the first (a vector: its length)."""
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        self.normal(name, shape, 1.0 / math.sqrt(fan_in))

    def uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> None:
        import numpy as np

        arr = tensor_rng(self.seed, self.scope, name).uniform(low, high, size=shape).astype(np.float32)
        self._put(name, arr)

    def const(self, name: str, shape: tuple[int, ...], value: float) -> None:
        import numpy as np

        self._put(name, np.full(shape, value, dtype=np.float32))


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def replace_dir(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``; an existing ``dst`` is swapped out first, then deleted."""
    if not dst.exists():
        os.replace(src, dst)
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{dst.name}.old-", dir=dst.parent))
    os.replace(dst, trash / "old")
    try:
        os.replace(src, dst)
    except BaseException:
        os.replace(trash / "old", dst)  # put the previous checkpoint back
        raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)


@contextmanager
def checkpoint_writer(out: Path, what: str, replaces: Callable[[Path], bool] | None) -> Iterator[Path]:
    """A checkpoint directory written into a temporary sibling of `out` (yielded) and moved into place when the
    block ends; on any failure nothing is left behind. An existing `out` is replaced only when it is empty or
    `replaces(out)` recognises it (FileExistsError otherwise, before anything is written); `replaces` None:
    whatever is there. `what` names the checkpoint for people ("a VoxCPM2 checkpoint")."""
    out = Path(out)
    if replaces is not None and out.exists() and not (out.is_dir() and (not any(out.iterdir()) or replaces(out))):
        raise FileExistsError(f"{out} exists and is not {what} directory; not replacing it")
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)  # mkdtemp creates 0700
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("wrote %s to %s in %.1f s", what, out, time.perf_counter() - started)


def write_files(root: Path, files: Mapping[str, bytes | str]) -> None:
    """Write each file (path relative to `root` -> bytes, or text as UTF-8), creating its folders."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def save_weights(tensors: Mapping[str, Any], path: Path) -> None:
    """A safetensors file of `tensors` with the `{"format": "pt"}` metadata transformers writes."""
    from safetensors.torch import save_file

    save_file(dict(tensors), str(path), metadata={"format": "pt"})


def learn_bpe_merges(words: Mapping[tuple[str, ...], int], count: int) -> tuple[tuple[str, str], ...]:
    """Classic BPE over `words` (symbols -> frequency): up to `count` merges, each of the most frequent
    adjacent pair, ties broken by the pair itself, so a tiny tokenizer's merges are fully deterministic."""
    import itertools
    from collections import Counter

    merges: list[tuple[str, str]] = []
    for _ in range(count):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            for a, b in itertools.pairwise(w):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged: dict[tuple[str, ...], int] = {}
        for w, n in words.items():
            out: list[str] = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            key = tuple(out)
            merged[key] = merged.get(key, 0) + n
        words = merged
    return tuple(merges)


def byte_level_bpe(corpus: Sequence[str], special_tokens: Sequence[str] = (), pre_tokenizer: Any = None) -> Any:
    """A small byte-level BPE tokenizer (Qwen's family: byte-level pre-tokenizer and decoder, the 256 byte symbols
    as its alphabet) trained on `corpus` up to 400 pieces; `pre_tokenizer` replaces the plain byte-level one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(special_tokens), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus), trainer=trainer)
    return tok


# ---- torch modules, tensor by tensor ------------------------------------------------------------------------
@dataclass(frozen=True)
class ModuleTensors:
    """One module's own persistent tensors (parameters and persistent buffers, not its children's)."""

    name: str  # the module's name in the model ("" for the model itself)
    module: Any
    full: dict[str, str]  # tensor -> its checkpoint name (the walk's prefix, the module's name, the tensor)
    shapes: dict[str, tuple[int, ...]]
    gain: float  # the walk's gain for this module (1.0 unless a pattern of `gains` matches its name)

    @property
    def kind(self) -> str:
        return type(self.module).__name__


def module_tensors(model: Any, prefix: str = "", gains: Mapping[str, float] | None = None) -> Iterator[ModuleTensors]:
    """Each module of `model` (a torch module, e.g. on the meta device) that owns persistent tensors, in
    `named_modules` order; `gains` maps a module-name regex (full match) to a multiplier on its weight scale."""
    import re

    persistent = set(model.state_dict().keys())
    for mod_name, mod in model.named_modules():
        own = [(n, t) for n, t in (*mod.named_parameters(recurse=False), *mod.named_buffers(recurse=False))
               if f"{mod_name}.{n}".lstrip(".") in persistent]
        if not own:
            continue
        gain = next((g for pattern, g in (gains or {}).items() if re.fullmatch(pattern, mod_name)), 1.0)
        yield ModuleTensors(mod_name, mod, {n: prefix + (f"{mod_name}.{n}" if mod_name else n) for n, _ in own},
                            {n: tuple(t.shape) for n, t in own}, gain)


def conv_fan_in(mod: Any) -> int:
    """A Conv1d's inputs per output sample (in / groups x kernel); a ConvTranspose1d's weight [in, out/groups, k]:
    each output sample sees about k / stride taps per input channel. At least 1."""
    from torch import nn

    k = int(mod.kernel_size[0])
    if isinstance(mod, nn.ConvTranspose1d):
        return max(1, mod.in_channels // mod.groups * max(1, k // int(mod.stride[0])))
    return max(1, mod.in_channels // mod.groups * k)


def init_common(init: TensorInit, m: ModuleTensors, linear_bias: float, norm_bias: float) -> bool:
    """Draw module `m`'s tensors if it is of a common type, and say whether it was: Linear, Conv1d and
    ConvTranspose1d weights normal with std gain / sqrt(fan-in) (their biases normal, std `linear_bias` and 0.05),
    Embedding weights standard normal, LayerNorm / GroupNorm / *RMSNorm weights normal around 1 with std 0.1 (a
    bias: std `norm_bias`), Snake1d alphas uniform in [0.5, 1.5]. A family draws its other modules its own way."""
    from torch import nn

    mod, full, shapes, gain = m.module, m.full, m.shapes, m.gain
    if isinstance(mod, nn.Linear):
        init.normal(full["weight"], shapes["weight"], gain / mod.in_features**0.5)
        bias = linear_bias
    elif isinstance(mod, (nn.Conv1d, nn.ConvTranspose1d)):
        init.normal(full["weight"], shapes["weight"], gain / conv_fan_in(mod) ** 0.5)
        bias = 0.05
    elif isinstance(mod, nn.Embedding):
        init.normal(full["weight"], shapes["weight"], 1.0)
        return True
    elif isinstance(mod, (nn.LayerNorm, nn.GroupNorm)) or m.kind.endswith("RMSNorm"):
        init.normal(full["weight"], shapes["weight"], 0.1, mean=1.0)
        bias = norm_bias
    elif m.kind == "Snake1d":
        init.uniform(full["alpha"], shapes["alpha"], 0.5, 1.5)
        return True
    else:
        return False
    if "bias" in full:
        init.normal(full["bias"], shapes["bias"], bias)
    return True


def check_complete(init: TensorInit, model: Any) -> None:
    """AssertionError naming (some of) the persistent tensors of `model` that `init` has not drawn."""
    missing = set(model.state_dict().keys()) - set(init.tensors)
    if missing:
        raise AssertionError(f"tensors left uninitialized: {sorted(missing)[:10]}")
