"""The families' floors side by side: a markdown table and one plot from perf/floor.py's results.

    .venv/bin/python perf/floor_table.py perf/results/floors/*.json --out perf/results/floors/floors

Writes OUT.md (per family: achieved and floor in ms per audio second, their ratio, the stage furthest above its
own floor) and OUT.png (achieved against the floor per family, log scale: the ratio is the distance between the
two marks).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in sorted(results, key=lambda r: r["family"]):
        got = r["achieved"]["graphs"]
        stages = []
        for name, g in r["floor"]["graphs"].items():
            if g["prompt"]:
                continue
            ms = got.get(name, {}).get("ms_per_audio_s", 0.0)
            stages.append((name, ms, g["floor_ms_per_audio_s"], "reads" if g["read_ms_per_audio_s"]
                           >= g["compute_ms_per_audio_s"] else "arithmetic"))
        in_graphs = sum(s[1] for s in stages)
        worst = max(stages, key=lambda s: s[1] - s[2])
        out.append({"family": r["family"], "precision": r["precision"], "audio_s": r["achieved"]["audio_s"],
                    "achieved": r["achieved"]["ms_per_audio_s"], "floor": r["floor"]["floor_ms_per_audio_s"],
                    "ratio": r["achieved_over_floor"], "outside_graphs": r["achieved"]["ms_per_audio_s"] - in_graphs,
                    "stages": stages, "worst": worst})
    return out


def table(data: list[dict[str, Any]]) -> str:
    lines = ["| family | precision | audio s | achieved ms per audio s | floor | achieved / floor | outside graphs "
             "(engine Python) | per stage: achieved / floor ms (bound by) |",
             "|---|---|---|---|---|---|---|---|"]
    for d in data:
        stages = "; ".join(f"{n} {a:.0f} / {f:.0f} ({b})" for n, a, f, b in d["stages"])
        lines.append(f"| {d['family']} | {d['precision']} | {d['audio_s']:.2f} | {d['achieved']:.0f} | {d['floor']:.0f} "
                     f"| **{d['ratio']:.2f}x** | {d['outside_graphs']:.0f} | {stages} |")
    return "\n".join(lines) + "\n"


def plot(data: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.6 * len(data) + 1.5))
    ys = range(len(data))
    ax.hlines(list(ys), [d["floor"] for d in data], [d["achieved"] for d in data], color="0.7", lw=3)
    ax.scatter([d["floor"] for d in data], list(ys), color="tab:green", label="floor (this CPU)", zorder=3)
    ax.scatter([d["achieved"] for d in data], list(ys), color="tab:red", label="achieved (offline, one stream)", zorder=3)
    for y, d in zip(ys, data, strict=True):
        ax.annotate(f"{d['ratio']:.1f}x", (d["achieved"], y), xytext=(6, -3), textcoords="offset points")
    ax.axvline(1000, color="0.5", ls=":", lw=1)
    ax.text(1000, -0.45, " real time", color="0.4", fontsize=8)
    lo = min(d["floor"] for d in data) / 1.5
    hi = max(d["achieved"] for d in data) * 2.0
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.6, len(data) - 0.4)
    ax.set_yticks(list(ys), [f"{d['family']} ({d['precision']})" for d in data])
    ax.set_xscale("log")
    ax.set_xlabel("ms per second of audio (log scale)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8, frameon=False)
    ax.set_title("Achieved vs floor, real dimensions, 2 vCPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="OUT.md and OUT.png")
    args = ap.parse_args()
    data = rows([json.loads(p.read_text()) for p in args.results])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table(data))
    plot(data, args.out.with_suffix(".png"))
    print(table(data))


if __name__ == "__main__":
    main()
