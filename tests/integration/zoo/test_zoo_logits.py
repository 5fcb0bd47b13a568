"""Direct logit attribution on every decoder of the zoo that attnviz reads (docs/models.md's table: interface or
eager route, a causal or multimodal LM): every head at every position against the independent hook computation
(tests/integration/dla_reference.py) in float32 and bfloat16, or refused in one line for a reason the library
names. The zoo's folders are built once and kept (build.py's cache), so this file rebuilds nothing another built.
"""

from __future__ import annotations

import pytest
import torch

from attnviz.errors import ModelUnavailableError
from tests.integration.dla_reference import per_head_bound, reference_direct_logits
from tests.integration.zoo.build import EXACT_ROUTES, architectures, build_zoo, committed_table, zoo_dir

TEXT = "the cat sat on the mat because it was warm, and the dog slept by the door"
N_TOKENS = 12
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
REFUSALS = {  # the one-line reasons the attribution may give for a model it does not attribute
    "patching_lib.unsupported",
    "direct_logits_lib.no_lm",
    "direct_logits_lib.no_readout",
    "direct_logits_lib.transformed",
    "direct_logits_lib.norm",
    "direct_logits_lib.join_undetermined",
    "direct_logits_lib.head_undetermined",
    "direct_logits_lib.logits_undetermined",
}
# (type, dtype) pairs the loader refuses in one line because the model's own code fails in that dtype (XLNet's
# relative attention mixes a float32 buffer into bfloat16); any other refusal, or one of these loading, fails
REFUSED_AT_LOAD = frozenset({("xlnet", "bfloat16")})
KINDS = architectures()
TABLE = committed_table()
# the decoders attnviz reads, by the committed table (a type it no longer reads fails test_zoo.py's comparison)
DECODERS = sorted(
    t for t, kind in KINDS.items() if kind in ("causal", "multimodal") and TABLE.get(t, ("",))[0] in EXACT_ROUTES
)


@pytest.fixture(scope="module")
def zoo(request) -> dict[str, dict]:
    """The build status of the types this run selected (``-k llama``: one model built, not every decoder)."""
    mine = [item for item in request.session.items if item.module is request.module]
    return build_zoo(sorted({item.callspec.params["model_type"] for item in mine}))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("model_type", DECODERS)
def test_every_head_equals_the_reference_or_is_refused_in_one_line(zoo, model_type, dtype):
    from attnviz.labs.heads_matter.direct_logits import direct_logit_attribution
    from attnviz.models.hf.loading import load_hf_source
    from attnviz.models.hf.placement import Placement

    assert zoo[model_type]["status"] == "built", zoo[model_type]
    if (model_type, dtype) in REFUSED_AT_LOAD:  # a dtype the model cannot run in: one line, said by the loader
        with pytest.raises(ModelUnavailableError) as refused:
            load_hf_source(str(zoo_dir() / model_type), placement=Placement(dtype))
        assert "\n" not in str(refused.value) and dtype in str(refused.value).lower(), str(refused.value)
        return
    source = load_hf_source(str(zoo_dir() / model_type), placement=Placement(dtype))
    refusal = None
    try:
        found = direct_logit_attribution(source, TEXT, N_TOKENS)
    except ValueError as refused:
        refusal = refused
    if refusal is not None:  # refused: in one line, for a reason the library names
        assert "\n" not in str(refusal) and getattr(refusal.args[0], "key", None) in REFUSALS, str(refusal)
    else:
        assert found.checked, found.check_error
        ids = torch.tensor([source.encode(TEXT, N_TOKENS).ids], device=source.device)
        projections = [p.module for p in source.output_projections.layers]  # where: attnviz's; what: the reference's
        reference = reference_direct_logits(source.model, ids, projections, found.per_head.shape[-1])
        assert found.token_id == reference.token_id
        difference = (found.per_head - reference.per_head).abs()
        bound = per_head_bound(reference.magnitude, DTYPES[dtype])
        assert bool((difference <= bound).all()), (float(difference.max()), float((difference / bound).max()))
