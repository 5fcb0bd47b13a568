"""Every head across a corpus: a file's texts read in bounded memory (:mod:`~attnviz.labs.corpus.readers`), run a
batch at a time (:mod:`~attnviz.labs.corpus.run`) into a run folder of Parquet parts and a summary
(:mod:`~attnviz.labs.corpus.store`), which the CLI, a Ray run and the Corpus page read back.

The public names are imported lazily (PEP 562): ``from attnviz.labs.corpus import read_texts`` needs no pandas.
"""

from __future__ import annotations

import importlib

DEFAULT_BATCH_TOKENS = 8192  # a batch's padded tokens (texts x the longest): what one pass holds at a time
_PUBLIC = {
    "read_texts": "readers",
    "TextReader": "readers",
    "run_corpus": "run",
    "CorpusProgress": "run",
    "CorpusReport": "run",
    "LocalExecutor": "run",
    "CorpusRun": "store",
    "induction_probe": "probe",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f"attnviz.labs.corpus.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
