"""What every family's checkpoint reader (`ttscore.runtime.families.<family>.checkpoint`) does the same way,
each with a `CheckpointError` naming the file, key or tensor: read a config file, take a positive integer from
it, require the files a layout needs, compare the tensors a checkpoint stores with those its config implies,
load a torch state dict without running code, read a hyperpyyaml config and name a
weight-normed tensor the way current torch does. What a family's configs mean and which tensors they imply
stays the family's. The weight files themselves: ttscore.runtime.weights."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError

Shapes = dict[str, tuple[int, ...]]


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing file {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must contain a JSON object")
    return data


def peek_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is absent or not one (a family's "is this my checkpoint" test)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def has_model_type(checkpoint: Path, model_type: str, config: str = "config.json") -> bool:
    """Whether the directory's `config` is a JSON object whose `model_type` is `model_type` (a family's detect)."""
    cfg = peek_json(Path(checkpoint) / config)
    return cfg is not None and cfg.get("model_type") == model_type


def positive_int(d: Mapping[str, Any], key: str, where: str = "", file: str = "config.json") -> int:
    """`d[key]`, a positive integer (`where`: the section's prefix in messages, e.g. "llm_config.")."""
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise CheckpointError(f"{file}: {where}{key} must be a positive integer, got {v!r}")
    return v


def require_files(root: Path, names: Iterable[str]) -> None:
    """Each of `names` (relative paths) is a file under `root`; the error names every missing one and what a
    checkpoint needs."""
    names = list(names)
    missing = [name for name in names if not (Path(root) / name).is_file()]
    if missing:
        raise CheckpointError(f"{root}: missing: {', '.join(missing)} (a checkpoint needs {', '.join(names)})")


def name_problems(stored: Iterable[str], expected: Iterable[str], *, ignore: Callable[[str], bool] = lambda n: False,
                  optional: Iterable[str] = ()) -> list[str]:
    """The expected tensors a checkpoint lacks (`optional` ones may be absent) and the ones it holds that
    nothing expects (`ignore`: tolerated extras), as message parts."""
    stored, expected, optional = set(stored), list(expected), set(optional)
    missing = [n for n in expected if n not in stored and n not in optional]
    unexpected = sorted(n for n in stored - set(expected) if not ignore(n))
    parts = []
    if missing:
        parts.append(f"missing {len(missing)} tensor(s): {', '.join(missing[:8])}")
    if unexpected:
        parts.append(f"unexpected {len(unexpected)} tensor(s): {', '.join(unexpected[:8])}")
    return parts


def compare_tensors(what: str, stored: Mapping[str, Sequence[int]], expected: Shapes, *,
                  ignore: Callable[[str], bool] = lambda n: False,
                  fits: Callable[[str, tuple[int, ...], tuple[int, ...]], bool] = lambda n, got, want: got == want,
                  ) -> None:
    """CheckpointError (`what`: the message's start) naming missing and unexpected tensors, else misshapen ones
    (`fits(name, stored shape, expected shape)`: whether a stored shape is accepted)."""
    parts = name_problems(stored, expected, ignore=ignore)
    if not parts:
        wrong = [f"{n} {list(stored[n])} (want {list(s)})" for n, s in expected.items()
                 if not fits(n, tuple(stored[n]), s)]
        if wrong:
            parts.append(f"{len(wrong)} tensor(s) of the wrong shape: {', '.join(wrong[:4])}")
    if parts:
        raise CheckpointError(f"{what}: " + "; ".join(parts))


def load_torch_state(path: Path, rename: Callable[[str], str] | None = None) -> dict[str, Any]:
    """A torch `.pt`/`.pth` state dict, loaded with weights_only (no code runs) and memory-mapped, its names
    optionally mapped by `rename`."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # any unpickling failure is a bad checkpoint
        raise CheckpointError(f"{path}: cannot load with weights_only=True ({exc})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a state dict")
    return {rename(k): v for k, v in state.items()} if rename else state


def weight_norm_name(name: str) -> str:
    """A tensor name with the older weight-norm pair (`weight_g`, `weight_v`) as torch's parametrizations
    name it (`parametrizations.weight.original0`, `original1`); any other name as it is."""
    if name.endswith(".weight_g"):
        return name[: -len("weight_g")] + "parametrizations.weight.original0"
    if name.endswith(".weight_v"):
        return name[: -len("weight_v")] + "parametrizations.weight.original1"
    return name


def weight_norm_shapes(out: Shapes, name: str, shape: tuple[int, ...], bias: bool = True) -> None:
    """Add a weight-normed (parametrizations) layer's tensors to `out`: g [out, 1, ...] (norm over all but
    dim 0), v of the weight's `shape`, and a bias [out]."""
    out[f"{name}.parametrizations.weight.original0"] = (shape[0],) + (1,) * (len(shape) - 1)
    out[f"{name}.parametrizations.weight.original1"] = shape
    if bias:
        out[f"{name}.bias"] = (shape[0],)


def linear_shapes(out: Shapes, name: str, o: int, i: int, bias: bool = False) -> None:
    """Add a Linear layer's weight [o, i] (and bias [o]) to `out`."""
    out[f"{name}.weight"] = (o, i)
    if bias:
        out[f"{name}.bias"] = (o,)


class _Ref(str):
    """A hyperpyyaml `!ref` scalar: `<key>` names and arithmetic, resolved against the top level."""


_ARITH = re.compile(r"^[0-9eE.+\-*/() ]+$")


def _tagged(loader: Any, suffix: str, node: Any) -> Any:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    value = loader.construct_scalar(node)
    return _Ref(str(value)) if suffix == "ref" else value


def _resolve(value: Any, top: dict[str, Any], file: str, depth: int = 0) -> Any:
    if depth > 20:
        raise CheckpointError(f"{file}: !ref nesting too deep")
    if isinstance(value, _Ref):
        names = re.findall(r"<([^<>]+)>", value)
        if len(names) == 1 and value.strip() == f"<{names[0]}>":
            return _resolve(top.get(names[0]), top, file, depth + 1)
        text = str(value)
        for n in names:
            resolved = _resolve(top.get(n), top, file, depth + 1)
            if not isinstance(resolved, (int, float)) or isinstance(resolved, bool):
                raise CheckpointError(f"{file}: !ref {value!r}: <{n}> is not a number")
            text = text.replace(f"<{n}>", repr(resolved))
        if not _ARITH.match(text):
            raise CheckpointError(f"{file}: cannot evaluate !ref {value!r}")
        result = eval(text, {"__builtins__": {}}, {})  # digits and + - * / only (checked above)
        return int(result) if isinstance(result, float) and result.is_integer() and "/" not in text else result
    if isinstance(value, dict):
        return {k: _resolve(v, top, file, depth) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, top, file, depth) for v in value]
    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]*\.?[0-9]+[eE][-+]?[0-9]+", value):
        return float(value)  # YAML 1.1 reads 1e-06 as a string
    return value


def read_hyperpyyaml(path: Path) -> dict[str, Any]:
    """A hyperpyyaml config (SpeechBrain's: `!new:` / `!name:` / `!apply:` tags, `!ref <key>` arithmetic) as plain
    data, read with a permissive SafeLoader: tags dropped (their mapping kept), `!ref`s resolved; nothing runs."""
    import yaml

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: _tagged(loader, suffix.split(":")[0], node))
    file = Path(path).name
    try:
        raw = yaml.load(Path(path).read_text(), Loader=Loader)  # a SafeLoader subclass
    except (OSError, yaml.YAMLError) as e:
        raise CheckpointError(f"{file}: cannot read ({e})") from e
    if not isinstance(raw, dict):
        raise CheckpointError(f"{file}: not a mapping")
    return dict(_resolve(raw, raw, file))


@dataclass(frozen=True)
class Stack:
    """One transformer stack's sizes, by the names Hugging Face configs give them."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float


def stack_sizes(d: Mapping[str, Any], where: str = "", eps: float = 1e-6) -> dict[str, Any]:
    """A Hugging Face config section's stack sizes (Stack's fields): positive integers, `head_dim` defaulting to
    hidden_size / num_attention_heads and `rms_norm_eps` to `eps`."""
    heads = positive_int(d, "num_attention_heads", where)
    hidden = positive_int(d, "hidden_size", where)
    return {"hidden_size": hidden, "intermediate_size": positive_int(d, "intermediate_size", where),
            "num_layers": positive_int(d, "num_hidden_layers", where), "num_heads": heads,
            "num_kv_heads": positive_int(d, "num_key_value_heads", where),
            "head_dim": int(d.get("head_dim") or hidden // heads), "rms_norm_eps": float(d.get("rms_norm_eps", eps))}


def decoder_layer_shapes(out: Shapes, prefix: str, s: Stack, *, qk_norm: bool, gated_query: bool = False,
                         qkv_bias: bool = False) -> None:
    """Add the tensors of one Llama-style decoder layer (`prefix`, e.g. "model.layers.0.") to `out`: the q/k/v/o
    projections, without bias or with one on q/k/v (`qkv_bias`, Qwen2's) (`gated_query`: q_proj also holds each
    head's output gate), per-head q/k RMSNorm weights (`qk_norm`), the two layer norms and the SwiGLU MLP."""
    h, hd, mlp = s.hidden_size, s.head_dim, s.intermediate_size
    linear_shapes(out, prefix + "self_attn.q_proj", (2 if gated_query else 1) * s.num_heads * hd, h, qkv_bias)
    linear_shapes(out, prefix + "self_attn.k_proj", s.num_kv_heads * hd, h, qkv_bias)
    linear_shapes(out, prefix + "self_attn.v_proj", s.num_kv_heads * hd, h, qkv_bias)
    out[prefix + "self_attn.o_proj.weight"] = (h, s.num_heads * hd)
    if qk_norm:
        out[prefix + "self_attn.q_norm.weight"] = (hd,)
        out[prefix + "self_attn.k_norm.weight"] = (hd,)
    out[prefix + "input_layernorm.weight"] = (h,)
    out[prefix + "post_attention_layernorm.weight"] = (h,)
    out[prefix + "mlp.gate_proj.weight"] = (mlp, h)
    out[prefix + "mlp.up_proj.weight"] = (mlp, h)
    out[prefix + "mlp.down_proj.weight"] = (h, mlp)
