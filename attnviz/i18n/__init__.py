"""English / 中文: the catalogues, the messages the library returns, and the translation the app does.

- :mod:`attnviz.i18n.catalogue`: one catalogue per language (``locales/en.toml``, ``locales/zh.toml``), TOML
  tables flattened to dotted keys (``[heads] title = "Heads"`` is ``"heads.title"``), values ``str.format``
  templates.
- :mod:`attnviz.i18n.message`: a :class:`~attnviz.i18n.message.Message` is a key and its parameters, rendered
  later. The library (core, models, labs) returns these and raises errors that carry them; it never knows the
  reader's language, so its results are the same for every reader and no cache is keyed by a language.
- :mod:`attnviz.i18n.translate`: the reader's language (set by the app at the start of each run) and ``t()``,
  which the figures and the app call as they render. The CLI never uses it: ``str()`` of a message is English,
  the CLI's contract.
"""
