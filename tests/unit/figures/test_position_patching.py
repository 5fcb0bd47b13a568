"""The figure of one head patched at one position at a time (attnviz.figures.position_patching): a bar a token,
tokens escaped and cut on the axis and whole on hover, a position not run said so; and its price
(attnviz.labs.heads_matter.patching.PatchPlan.positions_seconds): passes of as many rows from the head's layer."""

from attnviz.figures.position_patching import AXIS_TOKEN_CHARS, make_position_patch_figure
from attnviz.labs.heads_matter.patching import PatchPlan


def test_a_bar_a_token_escaped_cut_and_whole_on_hover():
    long = "x" * 40
    fig = make_position_patch_figure(
        [0.0, 0.55, None, -0.1], ["When", "<b>Mary</b>", long, "\u202e"], title="t", measure="fraction restored"
    )
    (bar,) = fig.data
    assert list(bar.x) == ["0 When", "1 &lt;b&gt;Mary&lt;/b&gt;", f"2 {'x' * (AXIS_TOKEN_CHARS - 1)}…", "3 ⟨U+202E⟩"]
    assert "&lt;b&gt;Mary&lt;/b&gt;" in bar.customdata[1] and "<b>" not in "".join(bar.customdata)
    assert long in bar.customdata[2].replace("<br>", "") and "not run" in bar.customdata[2]
    assert [round(v, 2) if v == v else None for v in bar.y] == [0.0, 0.55, None, -0.1]
    assert list(bar.marker.color) == ["#d62728", "#d62728", "#1f77b4", "#1f77b4"]


def test_positions_are_priced_as_passes_from_the_heads_layer():
    """16 rows a pass, a first-layer pass 2 s and a last-layer one 1 s over 30 layers: 20 positions of a head in
    layer 29 are one full pass (1 s) and one of 4 rows (0.25 s); in layer 0, 2 s and 0.5 s."""
    plan = PatchPlan(heads=[], rows=16, first_seconds=2.0, last_seconds=1.0, done={}, n_layer=30)
    assert plan.positions_seconds((29, 0), 20) == 1.25
    assert plan.positions_seconds((0, 3), 20) == 2.5
    assert plan.positions_seconds((0, 3), 0) == 0.0
