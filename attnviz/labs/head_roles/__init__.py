"""What each head does, measured: its role, how alike heads are, and whether either holds across prompts.

Three questions people ask about a model's heads, answered from an
:class:`~attnviz.models.record.AttentionRecord` (no Streamlit, no I/O), one module each:

- **Roles** (:mod:`~attnviz.labs.head_roles.rules`). Every head is labelled sink, previous-token, self, local,
  uniform, dead or content, with the statistic that decided it as its score, and the entropy left once the first
  token is taken out. All but "dead" come from the record's row-averaged attention statistics; "dead" is about a
  head's *output*, which :func:`head_output_norms` measures by rerunning every layer on a short prefix of the text.
- **Similarity** (:mod:`~attnviz.labs.head_roles.similarity`). The Jensen–Shannon distance between every pair
  of heads' patterns, average-linkage clustering, and the groups of heads closer than a
  threshold: the tutorial's "too many heads" pitfall, measured.
- **Stability and the sink against length** (:mod:`~attnviz.labs.head_roles.experiments`). Roles over several
  prompts, and each head's weight on the first token as the input grows.

The experiments label roles with the rules; the similarity stands alone.
"""

from attnviz.labs.head_roles.experiments import (
    SINK_8192_MB,
    SINK_8192_SECONDS,
    SINK_CHOICES,
    SINK_CONFIRM_SECONDS,
    SINK_LENGTHS,
    SINK_MAX_CELLS,
    SINK_SECONDS_PER_LENGTH,
    STABILITY_MAX_PROMPTS,
    STABILITY_PROMPT_CHARS,
    STABILITY_TOKENS,
    check_sink_cost,
    parse_prompts,
    role_stability,
    sink_cells,
    sink_lengths,
    sink_seconds,
    sink_vs_length,
)
from attnviz.labs.head_roles.rules import (
    OUTPUT_TOKENS,
    ROLES,
    HeadOutputs,
    assign_role,
    describe_roles,
    entropy_without_first,
    head_output_norms,
    head_roles,
    layer_output_norms,
    local_weight,
    output_cost_macs,
    output_seconds,
    outputs_by_themselves,
    per_head_output,
    role_name,
)
from attnviz.labs.head_roles.similarity import (
    REDUNDANT_DISTANCE,
    HeadSimilarity,
    average_linkage,
    head_similarity,
    js_distance_matrix,
    leaf_order,
    redundant_groups,
    similarity_rows,
)

__all__ = [
    "OUTPUT_TOKENS",
    "REDUNDANT_DISTANCE",
    "ROLES",
    "SINK_8192_MB",
    "SINK_8192_SECONDS",
    "SINK_CHOICES",
    "SINK_CONFIRM_SECONDS",
    "SINK_LENGTHS",
    "SINK_MAX_CELLS",
    "SINK_SECONDS_PER_LENGTH",
    "STABILITY_MAX_PROMPTS",
    "STABILITY_PROMPT_CHARS",
    "STABILITY_TOKENS",
    "HeadOutputs",
    "HeadSimilarity",
    "assign_role",
    "average_linkage",
    "check_sink_cost",
    "describe_roles",
    "entropy_without_first",
    "head_output_norms",
    "head_roles",
    "head_similarity",
    "js_distance_matrix",
    "layer_output_norms",
    "leaf_order",
    "local_weight",
    "output_cost_macs",
    "output_seconds",
    "outputs_by_themselves",
    "parse_prompts",
    "per_head_output",
    "redundant_groups",
    "role_name",
    "role_stability",
    "similarity_rows",
    "sink_cells",
    "sink_lengths",
    "sink_seconds",
    "sink_vs_length",
]
