"""A small, strict renderer of the kustomize subset deploy/k8s uses, so `make test` can render and
validate the overlays where kustomize (`kubectl kustomize`) is not installed. tests/tools_tests/test_k8s.py
checks that it renders exactly what kubectl renders wherever kubectl is available.

Supported, and nothing else (anything unknown is an error, not silently ignored):
- `resources`: YAML files (one or more documents) and directories holding a kustomization.yaml;
- `namespace`: set on every namespaced resource (a Namespace resource is renamed to it);
- `images`: `name` -> `newName` / `newTag` on every container and init container;
- `patches`: RFC 6902 JSON patches (inline `patch` or `path`), with a `target` by kind and name.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION = "kustomization.yaml"
KNOWN_KEYS = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
                  "CustomResourceDefinition", "PriorityClass"}


class KustomizeError(ValueError):
    pass


def render(directory: Path) -> list[dict[str, Any]]:
    """The resources `kubectl kustomize directory` would print (order aside)."""
    directory = Path(directory)
    path = directory / KUSTOMIZATION
    if not path.is_file():
        raise KustomizeError(f"{directory} has no {KUSTOMIZATION}")
    spec = yaml.safe_load(path.read_text()) or {}
    unknown = set(spec) - KNOWN_KEYS
    if unknown:
        raise KustomizeError(f"{path}: unsupported key(s) {sorted(unknown)}")
    if spec.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{path}: kind must be Kustomization")
    out: list[dict[str, Any]] = []
    for entry in spec.get("resources") or []:
        target = directory / entry
        if target.is_dir():
            out += render(target)
        elif target.is_file():
            out += [d for d in yaml.safe_load_all(target.read_text()) if d is not None]
        else:
            raise KustomizeError(f"{path}: resource {entry} does not exist")
    names = [(d.get("kind"), d.get("metadata", {}).get("name")) for d in out]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise KustomizeError(f"{path}: resources defined twice: {sorted(duplicates)}")
    for patch in spec.get("patches") or []:
        _patch(out, patch, directory)
    for image in spec.get("images") or []:
        _image(out, image)
    namespace = spec.get("namespace")
    if namespace:
        for doc in out:
            if doc.get("kind") == "Namespace":
                doc["metadata"]["name"] = namespace
            elif doc.get("kind") not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = namespace
    return out


def _patch(docs: list[dict[str, Any]], patch: dict[str, Any], directory: Path) -> None:
    unknown = set(patch) - {"target", "patch", "path"}
    if unknown:
        raise KustomizeError(f"patch with unsupported key(s) {sorted(unknown)}")
    target = patch.get("target") or {}
    if set(target) - {"kind", "name"} or not target.get("kind") or not target.get("name"):
        raise KustomizeError(f"a patch target needs exactly kind and name, got {target}")
    ops = yaml.safe_load(patch["patch"] if "patch" in patch else (directory / patch["path"]).read_text())
    if not isinstance(ops, list):
        raise KustomizeError("only JSON 6902 patches (a list of operations) are supported")
    matches = [d for d in docs if d.get("kind") == target["kind"] and d.get("metadata", {}).get("name") == target["name"]]
    if not matches:
        raise KustomizeError(f"patch target {target} matches no resource")
    for doc in matches:
        for op in ops:
            apply_operation(doc, op)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def apply_operation(doc: dict[str, Any], op: dict[str, Any]) -> None:
    """One RFC 6902 operation (add, replace, remove), in place; KustomizeError when it does not apply."""
    kind, parts = op.get("op"), _pointer(str(op.get("path", "")))
    if kind not in ("add", "replace", "remove") or not parts:
        raise KustomizeError(f"unsupported patch operation {op}")
    parent: Any = doc
    for part in parts[:-1]:
        try:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        except (KeyError, IndexError, ValueError):
            raise KustomizeError(f"{op['path']}: {part!r} does not exist") from None
    last = parts[-1]
    value = copy.deepcopy(op.get("value"))
    if isinstance(parent, list):
        if last == "-" and kind == "add":
            parent.append(value)
            return
        try:
            index = int(last)
        except ValueError:
            raise KustomizeError(f"{op['path']}: {last!r} is not a list index") from None
        if not 0 <= index < len(parent) + (kind == "add"):
            raise KustomizeError(f"{op['path']}: index {index} is out of range")
        if kind == "add":
            parent.insert(index, value)
        elif kind == "replace":
            parent[index] = value
        else:
            del parent[index]
        return
    if not isinstance(parent, dict):
        raise KustomizeError(f"{op['path']}: the parent is not an object or a list")
    if kind in ("replace", "remove") and last not in parent:
        raise KustomizeError(f"{op['path']}: {last!r} does not exist")
    if kind == "remove":
        del parent[last]
    else:
        parent[last] = value


def _image(docs: list[dict[str, Any]], image: dict[str, Any]) -> None:
    if set(image) - {"name", "newName", "newTag"} or "name" not in image:
        raise KustomizeError(f"unsupported images entry {image}")
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            name, _, tag = str(container.get("image", "")).partition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
