"""A notebook view as HTML: the payload (:mod:`attnviz.notebook.payload`) in a ``<script type="application/json">``,
an element the viewer's script draws it into, and the viewer's script and style themselves (about 40 kB,
:mod:`attnviz.notebook.assets`) where they are needed, never fetched from anywhere.

The script goes into the first view a kernel shows and not again (a notebook of many views carries it once; on
Colab, where each output is a page of its own, into every view): each
later view queues its element on ``window.__attnvizQueue``, which the script drains when it runs, whichever comes
first. A view returned with ``html_action="return"`` is meant to stand alone (saved as a file, sent elsewhere), so
it always carries the script; a second copy on one page only drains the queue again (the script defines itself
once). The element's own text, shown until the script draws over it, says what to do if the script is gone (an
earlier output cleared).
"""

from __future__ import annotations

import html
import json
import sys
import uuid
from dataclasses import dataclass

from attnviz.i18n.translate import t

_sent_in_this_kernel = False  # whether a view carrying the script was shown by this process


def _json_in_html(value: object) -> str:
    """JSON that no HTML parser reads as markup: ``<``, ``>`` and ``&`` as \\u escapes (user text is data, and a
    token ``</script>`` must not end the element that holds it)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def view_html(payload: dict, *, with_script: bool) -> str:
    """The HTML of one view: its element, its payload and (``with_script``) the viewer's style and script."""
    from attnviz.notebook.assets import viewer_css, viewer_script

    element = f"attnviz-{uuid.uuid4().hex}"
    parts = []
    if with_script:
        parts.append(f"<style>{viewer_css()}</style>")
    parts.append(
        f'<div class="attnviz-nb" id="{element}" data-drawn="0" data-theme="{html.escape(payload["theme"])}">'
        f"{html.escape(t('notebook.no_script'))}</div>"
    )
    parts.append(f'<script type="application/json" id="{element}-data">{_json_in_html(payload)}</script>')
    parts.append(
        "<script>(window.__attnvizQueue = window.__attnvizQueue || []).push("
        f'"{element}"); window.attnvizNotebook && window.attnvizNotebook.drain();</script>'
    )
    if with_script:
        parts.append(f"<script>{viewer_script()}</script>")
    return "\n".join(parts)


@dataclass(frozen=True)
class NotebookHTML:
    """A view's HTML, as BertViz's ``html_action="return"`` gives it: ``.data`` the HTML (a string: save it, or
    write it into a page), shown by a notebook through ``_repr_html_``."""

    data: str

    def __repr__(self) -> str:  # a notebook saves this beside the HTML as the output's text: short, not the HTML again
        return f"<attnviz view: {len(self.data.encode()) // 1024:,} kB of HTML>"

    def _repr_html_(self) -> str:
        return self.data

    def save(self, path: str) -> None:
        """Write the view as a page of its own (UTF-8) that opens in any browser, offline."""
        with open(path, "w", encoding="utf-8") as file:
            file.write(
                f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body>\n{self.data}\n</body></html>\n'
            )


def outputs_apart() -> bool:
    """Whether this notebook draws each output in a page of its own, where no output sees another's script:
    Google Colab (an iframe per output). Every view there carries the script."""
    return "google.colab" in sys.modules


def shown(payload: dict, html_action: str) -> NotebookHTML | None:
    """``html_action="view"``: show the view in the notebook (IPython's display; None); ``"return"``: give it,
    standing alone, as a :class:`NotebookHTML`. ValueError, one line, for any other action or no IPython."""
    global _sent_in_this_kernel
    if html_action == "return":
        return NotebookHTML(view_html(payload, with_script=True))
    if html_action != "view":
        raise ValueError(t("notebook.bad_action", value=repr(html_action)))
    try:
        from IPython.display import display
    except ImportError as err:
        raise ValueError(t("notebook.not_ipython")) from err
    display(NotebookHTML(view_html(payload, with_script=not _sent_in_this_kernel or outputs_apart())))
    _sent_in_this_kernel = True
    return None


def forget_script() -> None:
    """Carry the script again in the next view shown (a test's fresh notebook, or after the output holding it was
    cleared: ``attnviz.notebook.reset()``)."""
    global _sent_in_this_kernel
    _sent_in_this_kernel = False
