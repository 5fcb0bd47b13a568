"""Side by side: two records of the same model's heads (two texts, two models with one tokenizer, two masks).

What changes from record A to record B, head by head, without Streamlit or I/O:

- **Statistics.** Each head's row-averaged statistics (:attr:`AttentionRecord.statistics`) in both, and their
  difference b − a, for every statistic both records have.
- **Patterns.** Where the two token sequences agree (:func:`align_tokens`, difflib's matching blocks on the
  tokens' text), the Jensen–Shannon divergence (base 2, in [0, 1]) between a head's attention row in A and in B
  for the same aligned query, both restricted to the aligned keys and renormalised, averaged over the aligned
  queries (:func:`head_jsd`). Rows are read at full resolution from the records on demand, over at most
  :data:`JSD_QUERIES` aligned queries in a few runs of consecutive ones spread evenly along the text
  (:func:`jsd_rows`): one run is read as one block, where a row read alone costs several times its share, so the
  cost is bounded at any length. The time it will take is measured on this machine by timing one layer's share of
  the work (:func:`measured_seconds`), and the work reports its layers to a progress bar.
- **One head** (:func:`head_pair`): its pattern in A and in B, and B − A on the aligned tokens, at full
  resolution up to :data:`FULL_VIEW_TOKENS` tokens and pooled past that.
- **Two models** are compared only when their tokenizers read the text into the same tokens
  (:func:`same_tokens`), and the heads only when both have the same layers x heads; otherwise the comparison says
  why not (:attr:`Comparison.note`) instead of pairing heads that have nothing to do with each other.
- **Two masks** need a source whose mask is a setting with the weights left as they are: the embedded model,
  causal or bidirectional under one seed (:func:`mask_variant`). A model that always runs under its own mask
  cannot be captured under another; :func:`mask_variant` says so by returning None.

One module each: :mod:`~attnviz.labs.compare.comparison` (the statistics, the alignment, the JSD and the
:class:`Comparison` of two records), :mod:`~attnviz.labs.compare.head_pair` (one head's maps in A, in B and
B − A, with their pooling) and :mod:`~attnviz.labs.compare.sides` (what B may be, and why not).
"""

from attnviz.labs.compare.comparison import (
    ALIGN_TOKENS,
    CELL_FLOPS,
    CHUNK_ELEMENTS,
    CONFIRM_SECONDS,
    FLOAT_FLOOR,
    FLOPS_PER_SECOND,
    JSD_CELLS,
    JSD_QUERIES,
    LARGEST,
    MIN_JSD_QUERIES,
    QUERY_RUNS,
    Alignment,
    Comparison,
    align_records,
    align_tokens,
    aligned_rows,
    cell_flops,
    compare_records,
    comparison_need,
    comparison_seconds,
    head_jsd,
    jensen_shannon,
    jsd_queries,
    jsd_rows,
    measured_seconds,
    rounded,
    shared_statistics,
    spread,
    stat_diff,
)
from attnviz.labs.compare.head_pair import (
    PAIR_BYTES_PER_CELL,
    HeadPair,
    Span,
    diff_plan,
    diff_rows,
    head_pair,
    head_pair_need,
    head_pair_seconds,
    pool_signed,
)
from attnviz.labs.compare.sides import MODES, mask_name, mask_variant, same_tokens, tokens_differ

__all__ = [
    "ALIGN_TOKENS",
    "CELL_FLOPS",
    "CHUNK_ELEMENTS",
    "CONFIRM_SECONDS",
    "FLOAT_FLOOR",
    "FLOPS_PER_SECOND",
    "JSD_CELLS",
    "JSD_QUERIES",
    "LARGEST",
    "MIN_JSD_QUERIES",
    "MODES",
    "PAIR_BYTES_PER_CELL",
    "QUERY_RUNS",
    "Alignment",
    "Comparison",
    "HeadPair",
    "Span",
    "align_records",
    "align_tokens",
    "aligned_rows",
    "cell_flops",
    "compare_records",
    "comparison_need",
    "comparison_seconds",
    "diff_plan",
    "diff_rows",
    "head_jsd",
    "head_pair",
    "head_pair_need",
    "head_pair_seconds",
    "jensen_shannon",
    "jsd_queries",
    "jsd_rows",
    "mask_name",
    "mask_variant",
    "measured_seconds",
    "pool_signed",
    "rounded",
    "same_tokens",
    "shared_statistics",
    "spread",
    "stat_diff",
    "tokens_differ",
]
