"""Counting a source's model passes in a test: which entry points ran while a page drew (a warmed page runs none)."""


def count_passes(monkeypatch, source, entries) -> list[str]:
    """Wrap each of ``source``'s ``entries`` (method names) so that a call appends its name to the returned list,
    then runs as before: the list of passes made from now on."""
    passes: list[str] = []

    def counting(entry: str):
        real = getattr(source, entry)

        def counted(*args, **kwargs):
            passes.append(entry)
            return real(*args, **kwargs)

        return counted

    for entry in entries:
        monkeypatch.setattr(source, entry, counting(entry))
    return passes
