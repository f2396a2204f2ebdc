"""What `--checkpoint` names: a directory, a Hugging Face cache snapshot, or a repo id.

- a checkpoint directory, named after itself;
- a Hugging Face cache snapshot, `.../models--Org--Name/snapshots/<revision>/` (its files are links
  into `blobs/`, followed), or the `models--Org--Name` folder itself (its `refs/main` snapshot),
  named after the repo (`Name`);
- a repo id, `Org/Name` or `Org/Name@revision`, resolved through huggingface_hub in the local cache
  (`HF_HUB_CACHE`, else `HF_HOME/hub`, else ~/.cache/huggingface/hub) and downloaded into it when
  it is not there, unless `HF_HUB_OFFLINE` is set; named `Name`.

An existing directory wins over a repo id of the same spelling. `resolve_checkpoint` is called once
by every command that takes a checkpoint (export, say, serve, prepare, precompute-voice);
`find_checkpoints` is prepare's (`TTS_CHECKPOINTS` in compose and Kubernetes): a checkpoint, a
directory of them, or a Hugging Face cache folder (every `models--*` repo in it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ttscore.contract.errors import CheckpointError
from ttscore.runtime.hub import HUB_PREFIX, REPO_ID, hub_cache, hub_offline


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the directory the loaders read (a snapshot's files may be links)
    name: str  # the served model id
    repo_id: str | None = None
    revision: str | None = None  # the snapshot's commit, for a Hugging Face cache snapshot


def resolve_checkpoint(spec: str | Path | Checkpoint) -> Checkpoint:
    """The checkpoint `spec` names (see the module docstring). Raises CheckpointError."""
    if isinstance(spec, Checkpoint):
        return spec
    path = Path(spec).expanduser()
    if path.is_dir():
        return _from_directory(path)
    if path.exists():
        raise CheckpointError(f"{path} is not a checkpoint directory")
    match = REPO_ID.fullmatch(str(spec))
    if match is None:
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    return _from_hub(match["repo"], match["revision"])


def _repo_of(folder: Path) -> str | None:
    """`Org/Name` of a `models--Org--Name` cache folder, or None."""
    if not folder.name.startswith(HUB_PREFIX):
        return None
    parts = folder.name[len(HUB_PREFIX):].split("--")
    return "/".join(parts) if len(parts) == 2 and all(parts) else None


def _from_directory(path: Path) -> Checkpoint:
    real = path.resolve()
    repo = _repo_of(real)
    if repo is not None:  # models--Org--Name: its main snapshot
        ref = real / "refs" / "main"
        snapshots = sorted(p for p in (real / "snapshots").glob("*") if p.is_dir())
        revision = ref.read_text(encoding="utf-8").strip() if ref.is_file() else None
        if revision is None and len(snapshots) == 1:
            revision = snapshots[0].name
        if revision is None or not (real / "snapshots" / revision).is_dir():
            raise CheckpointError(f"{path}: a Hugging Face cache folder with no refs/main snapshot; "
                                  "name a snapshot (snapshots/<revision>) or the repo id with @revision")
        return Checkpoint(real / "snapshots" / revision, repo.split("/")[1], repo, revision)
    repo = _repo_of(real.parent.parent) if real.parent.name == "snapshots" else None
    if repo is not None:
        return Checkpoint(path, repo.split("/")[1], repo, real.name)
    return Checkpoint(path, path.absolute().name)


def _from_hub(repo: str, revision: str | None) -> Checkpoint:
    from huggingface_hub import snapshot_download

    cache = hub_cache()
    named = f"{repo}@{revision}" if revision else repo
    get = f"huggingface-cli download {repo}" + (f" --revision {revision}" if revision else "")
    try:
        folder = snapshot_download(repo, revision=revision, cache_dir=cache, local_files_only=True)
    except Exception:  # not cached (huggingface_hub's LocalEntryNotFoundError and kin)
        folder = None
    if folder is None:
        if hub_offline():
            raise CheckpointError(
                f"{named} is not a directory and not in the Hugging Face cache ({cache}), and HF_HUB_OFFLINE "
                f"is set: run `{get}` where the Hub is reachable (with the same HF_HOME), or pass the "
                "checkpoint directory")
        try:
            folder = snapshot_download(repo, revision=revision, cache_dir=cache)
        except Exception as exc:
            raise CheckpointError(
                f"{named} is not a directory and could not be downloaded into the Hugging Face cache ({cache}): "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; run `{get}` or pass the "
                "checkpoint directory") from None
    return _from_directory(Path(folder))


def find_checkpoints(root: str | Path) -> list[Checkpoint]:
    """prepare's checkpoints: `root` if it is one (a checkpoint directory, snapshot, `models--*`
    folder or repo id), else every checkpoint directory and `models--*` repo directly in it, by name."""
    path = Path(root).expanduser()
    if not path.is_dir() or _is_checkpoint(path) or _repo_of(path.resolve()) is not None:
        return [resolve_checkpoint(root)]
    found = [resolve_checkpoint(p) for p in sorted(path.iterdir())
             if p.is_dir() and (_is_checkpoint(p) or _repo_of(p.resolve()) is not None)]
    return sorted(found, key=lambda c: c.name)


def _is_checkpoint(path: Path) -> bool:
    """A checkpoint directory: a config.json, or a layout a registered family detects (one without a
    config.json, e.g. Mistral's params.json)."""
    if (path / "config.json").is_file():
        return True
    from export.families import FAMILIES

    return any(f.detect(path) for f in FAMILIES.values())
