"""Other on-disk layouts of a checkpoint, as people have them (tests/runtime_tests/test_checkpoints.py, perf/README.md).

- `shard`: the weights split the way `save_pretrained` does above its shard size:
  `<stem>-0000N-of-0000M.safetensors` + `<stem>.safetensors.index.json` =
  {"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}} (tensors in name order, a new
  shard when the next tensor would pass `max_bytes`, or `shards` files of about equal size);
- `cast`: every floating tensor stored in another dtype (a bf16 fine-tune, or it upcast back);
- `copy_of` and `edit_safetensors`: a copy of a checkpoint for a test to break, and a weights file rewritten
  with its tensors edited;
- `hub_snapshot`: a Hugging Face cache entry, `models--Org--Name/{blobs,refs/main,snapshots/<rev>}`,
  with the snapshot's files relative links into `blobs/` (named by their sha256, as huggingface_hub
  names LFS files) and `refs/main` holding the revision.

Tensors are read and written one shard at a time (a 1.7B fp32 checkpoint fits). Command line:
    python tests/checkpoint_layouts.py shard SRC DST [--shards N | --max-bytes B] [--stem model]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

WEIGHT_SUFFIX = ".safetensors"


def _copy_tree(src: Path, dst: Path, skip: Iterable[Path] = ()) -> None:
    skipped = {p.resolve() for p in skip}
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if p.is_dir():
            (dst / rel).mkdir(parents=True, exist_ok=True)
        elif p.resolve() not in skipped:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / rel)


def copy_of(src: Path, dst: Path) -> Path:
    """A copy of the checkpoint folder `src` at `dst` (for a test to change)."""
    shutil.copytree(src, dst)
    return dst


def edit_safetensors(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Rewrites the safetensors file `path` with its tensors (a dict by name) as `edit` changes them in place."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(path))
    edit(state)
    save_file(state, str(path))


def _tensor_sizes(path: Path) -> dict[str, int]:
    from ttscore.runtime.weights import read_header

    header = read_header(path)
    return {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__"}


def shard(src: Path, dst: Path, *, stem: str = "model", max_bytes: int | None = None, shards: int | None = None) -> Path:
    """A copy of checkpoint `src` at `dst` with `<stem>.safetensors` split into shards + index."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    single = src / f"{stem}{WEIGHT_SUFFIX}"
    sizes = _tensor_sizes(single)
    total = sum(sizes.values())
    groups: list[list[str]] = [[]]
    if max_bytes is None:
        # exactly `shards` files (2 by default): a tensor goes to the shard its middle byte falls in
        count = min(shards or 2, len(sizes))
        groups = [[] for _ in range(count)]
        before = 0
        for name in sorted(sizes):
            groups[min(count - 1, (2 * before + sizes[name]) * count // (2 * total))].append(name)
            before += sizes[name]
        groups = [g for g in groups if g]
    else:
        used = 0
        for name in sorted(sizes):
            if groups[-1] and used + sizes[name] > max_bytes:
                groups.append([])
                used = 0
            groups[-1].append(name)
            used += sizes[name]
    _copy_tree(src, dst, skip=[single])
    base = dst / stem
    base.parent.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for i, names in enumerate(groups, 1):
        file = f"{base.name}-{i:05d}-of-{len(groups):05d}{WEIGHT_SUFFIX}"
        with safe_open(str(single), framework="pt") as fh:
            tensors = {n: fh.get_tensor(n) for n in names}
        save_file(tensors, str(base.parent / file), metadata={"format": "pt"})
        del tensors
        weight_map.update(dict.fromkeys(names, file))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (base.parent / f"{base.name}{WEIGHT_SUFFIX}.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return dst


def cast(src: Path, dst: Path, dtype: str) -> Path:
    """A copy of `src` with every floating tensor of every safetensors file stored as `dtype`
    ("bfloat16", "float16", "float32"); the index of a sharded stem is kept (its total_size updated)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    files = sorted(src.rglob(f"*{WEIGHT_SUFFIX}"))
    _copy_tree(src, dst, skip=files)
    want = getattr(torch, dtype)
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            meta = fh.metadata()
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not iterable)
        tensors = {k: (t.to(want) if t.is_floating_point() else t) for k, t in tensors.items()}
        save_file(tensors, str(dst / f.relative_to(src)), metadata=meta)
    for index in sorted(dst.rglob(f"*{WEIGHT_SUFFIX}.index.json")):
        data = json.loads(index.read_text())
        data["metadata"]["total_size"] = sum(
            sum(_tensor_sizes(index.parent / s).values()) for s in set(data["weight_map"].values()))
        index.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return dst


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def hub_snapshot(src: Path, cache: Path, repo_id: str, revision: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """`src` as the Hugging Face hub cache `cache` holds a download of `repo_id` at `revision`
    (blobs + relative links + refs/main); returns the snapshot directory."""
    org, name = repo_id.split("/")
    repo = Path(cache) / f"models--{org}--{name}"
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)  # no newline, as huggingface_hub writes it
    for p in sorted(Path(src).rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(src)
        blob = repo / "blobs" / _sha256(p)
        if not blob.exists():
            shutil.copy2(p, blob)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shard")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("--stem", default="model")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--shards", type=int)
    g.add_argument("--max-bytes", type=int)
    args = p.parse_args(argv)
    print(shard(Path(args.src), Path(args.dst), stem=args.stem, max_bytes=args.max_bytes, shards=args.shards))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
