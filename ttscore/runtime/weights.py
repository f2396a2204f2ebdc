"""A checkpoint's weight files as the reference loaders find them, read without torch (stdlib only).

A weight stem `<stem>` (e.g. `model`, `speech_tokenizer/model`, `audiovae`) is stored either as one
file, `<stem>.safetensors`, or sharded the way `save_pretrained` writes it above its shard size:
`<stem>.safetensors.index.json` = {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
next to the shards it names (`<stem>-00001-of-00002.safetensors`, ...). Like transformers, the
single file wins when both are present. Tensors may be stored in any dtype safetensors has;
export converts floating ones to float32 (export/weights.py load_tensors).

`read_weights` validates everything it can without reading tensor data (each file's header against
its size, every tensor's byte count against its dtype and shape, the index against the shards) and
fails with a `CheckpointError` naming the file or tensor. `checkpoint_fingerprint` is the identity
of a checkpoint's files by content, for export caches.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError

SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
# Bytes per element of the safetensors dtypes torch loads (the F8 kinds are refused: no reference
# loader here reads them).
ITEM_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_header(path: Path) -> dict[str, Any]:
    """Validate a safetensors file's header and size without reading the tensors.

    Returns the parsed header (`__metadata__` included). A truncated or corrupt file, or a tensor
    whose byte count does not fit its dtype and shape, raises CheckpointError naming it.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) != 8:
                raise CheckpointError(f"{path} is truncated (no safetensors header)")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len <= 0 or header_len > min(size - 8, MAX_HEADER_BYTES):
                raise CheckpointError(f"{path} is corrupt (bad safetensors header length)")
            header = json.loads(fh.read(header_len).decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing file {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path} is corrupt (unreadable safetensors header)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} is corrupt (safetensors header is not an object)")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, stop = (int(x) for x in info["data_offsets"])
            dtype, shape = str(info["dtype"]), [int(d) for d in info["shape"]]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path} is corrupt (tensor {name!r} has no dtype, shape or data_offsets)") from None
        if dtype not in ITEM_BYTES:
            raise CheckpointError(
                f"{path}: tensor {name!r} has dtype {dtype}; supported: {', '.join(ITEM_BYTES)}"
            )
        if stop - start != math.prod(shape) * ITEM_BYTES[dtype]:
            raise CheckpointError(f"{path} is corrupt (tensor {name!r}: {stop - start} bytes for {dtype} {shape})")
        end = max(end, stop)
    if 8 + header_len + end != size:
        raise CheckpointError(
            f"{path} is truncated or corrupt: header describes {end} data bytes, "
            f"file holds {size - 8 - header_len}"
        )
    return header


def weight_files(directory: Path, stem: str = "model") -> Path | None:
    """The file that says where `<stem>`'s weights are (the single file, else the index), or None.
    Existence only: `read_weights` validates."""
    for path in (directory / f"{stem}{SUFFIX}", directory / f"{stem}{INDEX_SUFFIX}"):
        if path.is_file():
            return path
    return None


def describe(stem: str) -> str:
    """How an error names a missing weight stem."""
    return f"{stem}{SUFFIX} (or {stem}{INDEX_SUFFIX} and its shards)"


@dataclass(frozen=True)
class Weights:
    """Where each tensor of one weight stem is: `tensors` maps its name to the file holding it
    (under the same key); `files` are the files in order (one, or the shards)."""

    directory: Path
    stem: str
    index: Path | None
    files: tuple[Path, ...]
    tensors: dict[str, Path]
    dtypes: frozenset[str]

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, from the files' headers."""
        return {name: tuple(int(d) for d in entry["shape"]) for path in self.files
                for name, entry in read_header(path).items() if name != "__metadata__"}


def read_weights(directory: Path, stem: str = "model") -> Weights:
    """Locate and validate `<stem>`'s weights in `directory` (see the module docstring)."""
    directory = Path(directory)
    single = directory / f"{stem}{SUFFIX}"
    if single.is_file():
        header = read_header(single)
        return Weights(directory, stem, None, (single,), dict.fromkeys(_names(header), single), _dtypes(header))
    index = directory / f"{stem}{INDEX_SUFFIX}"
    if not index.is_file():
        raise CheckpointError(f"{directory}: missing {describe(stem)}")
    weight_map = _read_index(index)
    base = index.parent
    shards = list(dict.fromkeys(weight_map.values()))
    tensors: dict[str, Path] = {}
    dtypes: set[str] = set()
    for shard in shards:
        path = base / shard
        if not path.is_file():
            raise CheckpointError(f"{directory}: missing shard {shard} (named by {index.name})")
        header = read_header(path)
        dtypes |= _dtypes(header)
        for name in _names(header):
            owner = weight_map.get(name)
            if owner is None:
                raise CheckpointError(f"{path}: holds tensor {name!r}, which {index.name} does not name")
            if owner != shard:
                raise CheckpointError(f"{path}: holds tensor {name!r}, which {index.name} puts in {owner}")
            tensors[name] = path
    for name, shard in weight_map.items():
        if name not in tensors:
            raise CheckpointError(f"{index}: tensor {name!r} is not in {shard}, where the index puts it")
    return Weights(directory, stem, index, tuple(base / s for s in shards), tensors, frozenset(dtypes))


def _read_index(index: Path) -> dict[str, str]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{index} is not valid JSON: {exc}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no weight_map")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(SUFFIX) or Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise CheckpointError(f"{index}: tensor {name!r} names a bad shard file {shard!r}")
    return {str(k): str(v) for k, v in weight_map.items()}


def _names(header: dict[str, Any]) -> list[str]:
    return [k for k in header if k != "__metadata__"]


def _dtypes(header: dict[str, Any]) -> frozenset[str]:
    return frozenset(str(v["dtype"]) for k, v in header.items() if k != "__metadata__")


# ---- identity of a checkpoint's files -----------------------------------------------------------

_SHA256 = re.compile(r"[0-9a-f]{64}")


def file_digest(path: Path, memo: MutableMapping[str, str] | None = None) -> str:
    """sha256 of one file's bytes. A Hugging Face cache file that is a link into `blobs/` named by
    a sha256 (the LFS files: the weights) is named by exactly that already, so its name is used.
    Otherwise the bytes are hashed, and the result remembered in `memo` (if given) under the file's
    real path, size and modification time."""
    real = path.resolve()
    if real.parent.name == "blobs" and _SHA256.fullmatch(real.name):
        return real.name
    st = real.stat()
    key = f"{real}:{st.st_size}:{st.st_mtime_ns}"
    if memo is not None and key in memo:
        return memo[key]
    h = hashlib.sha256()
    with real.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    if memo is not None:
        memo[key] = digest
    return digest


def checkpoint_fingerprint(directory: Path, memo: MutableMapping[str, str] | None = None) -> str:
    """Identity of a checkpoint by content: every file's relative path, size and sha256
    (`file_digest`), hidden files and folders (`.gitattributes`, `.cache/`) left out. Two paths to
    the same files (a copy, a symlink, a Hugging Face cache snapshot and a download of it into a
    folder) give the same fingerprint; a changed file gives another."""
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            h.update(f"{rel}:{p.stat().st_size}:{file_digest(p, memo)}\n".encode())
    return h.hexdigest()[:16]
