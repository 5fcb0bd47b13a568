"""Which heads matter: ablation, activation and attribution patching, direct logit attribution, the agreement
between an estimate and the exact effects, and the reductions they share."""
