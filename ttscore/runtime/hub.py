"""The Hugging Face hub cache, read where huggingface_hub keeps it (never downloading): its location (`hub_cache`,
from the environment at each call), whether the hub is off (`hub_offline`), a repo id's spelling (`REPO_ID`,
`Org/Name[@revision]`) and a repo's cache folder prefix (`HUB_PREFIX`: `models--Org--Name`). The CLI's checkpoint
forms (triton_tts/checkpoints.py) and a family's checkpoint that names another one (MOSS-TTS-Nano's codec) share
them."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")
HUB_PREFIX = "models--"


def hub_cache() -> Path:
    """The hub cache as huggingface_hub finds it: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
    ~/.cache/huggingface/hub (read from the environment now)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or str(Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface")
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")
