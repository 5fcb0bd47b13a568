"""Browser payload for the Heads page, side by side: ``python -m benchmarks.payload``.

For 12 heads x 512 tokens (the issue's case) it builds the figures each way
and reports the JSON bytes Streamlit would send, with ratios to the naive way
(every head as float64 JSON lists, as a plain ``go.Heatmap(z=list)`` does).
"""

from __future__ import annotations

import argparse
import json
import time

import plotly.graph_objects as go
import torch

from attnviz.figures.base import make_head_heatmap_figure
from attnviz.figures.grid_picture import grid_picture
from attnviz.figures.heads import head_grid, make_head_grid_figure


def heads_figure(attention: torch.Tensor, to_z) -> str:
    """Every head as its own heatmap trace, z converted by ``to_z``."""
    fig = go.Figure([go.Heatmap(z=to_z(attention[0, h]), visible=h == 0) for h in range(attention.shape[1])])
    return fig.to_json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    attention = torch.randn(1, args.heads, args.tokens, args.tokens, generator=g).mul(3).softmax(-1)
    labels = [f"{i} tok{i}" for i in range(args.tokens)]

    rows = []

    def measure(name: str, build) -> None:
        start = time.perf_counter()
        size = len(build())
        rows.append((name, size, time.perf_counter() - start))

    measure("every head, float64 JSON lists (naive)", lambda: json.dumps({"z": attention[0].double().tolist()}))
    measure("every head, float32 binary", lambda: heads_figure(attention, lambda w: w.numpy()))
    measure("every head, uint8 binary", lambda: heads_figure(attention, lambda w: (w * 255).round().byte().numpy()))
    measure(
        "uint8 grid as Plotly + one float32 head (before #39)",
        lambda: (
            make_head_grid_figure(attention).to_json()
            + make_head_heatmap_figure(attention[0, 0], labels, labels).to_json()
        ),
    )
    measure(
        "attnviz: grid as a palette PNG + one float32 head",
        lambda: (
            json.dumps(grid_picture(head_grid(attention), label="grid", hint="click"))
            + make_head_heatmap_figure(attention[0, 0], labels, labels).to_json()
        ),
    )
    naive = rows[0][1]
    print(f"payload for {args.heads} heads x {args.tokens} tokens")
    print(f"{'representation':<52} {'bytes':>12} {'vs naive':>9} {'build s':>8}")
    for name, size, seconds in rows:
        print(f"{name:<52} {size:>12,} {size / naive:>9.3f} {seconds:>8.2f}")


if __name__ == "__main__":
    main()
