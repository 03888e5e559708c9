"""A :class:`coref.document.Document` as HTML, every mention highlighted in the colour of its entity.

For notebooks (``IPython.display.HTML(document_html(document))``): reading coreference as coloured, nested boxes is
quicker than reading :func:`coref.document.bracketed`. Each mention is a ``<span>`` boxed and tinted in its
entity's colour, with the entity's label as a subscript at its end and a hover ``title`` naming the entity.
Entities take the colours of matplotlib's ``tab10`` palette in order of first mention, cycling after ten (so two
entities ten apart share a colour; the labels still tell them apart). Nested mentions are nested spans.

A :class:`Document` may hold crossing mentions (overlapping, neither inside the other; its validation does not
forbid them), which HTML elements cannot: a mention that must close while a later-opened one is still open
closes that one too and reopens it right after, as browsers mend misnested tags, so that one mention may be
drawn as two adjacent boxes; its label is written once, at its real end.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from coref.document import Document, Mention

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")  # matplotlib's tab10
STYLE = "line-height: 2.2; font-family: sans-serif"


def entity_colours(document: Document) -> dict[int, str]:
    """Each entity's colour: the palette in order of first mention, cycling."""
    return {entity: PALETTE[k % len(PALETTE)] for k, entity in enumerate(document.entities())}


def _hover(mention: Mention, entity_names: Mapping[int, str] | None,
           mention_titles: Mapping[tuple[int, int], str] | None = None) -> str:
    name = (entity_names or {}).get(mention.entity)
    about = (mention_titles or {}).get(mention.span)
    return (f"entity {mention.entity}" + (f": {name}" if name is not None else "")
            + (f"; {about}" if about is not None else ""))


def document_html(document: Document, title: str | None = None,
                  entity_names: Mapping[int, str] | None = None,
                  mention_titles: Mapping[tuple[int, int], str] | None = None) -> str:
    """An HTML fragment (a ``<div>``) of ``document``'s tokens, one sentence per line, each mention a coloured
    box labelled with its entity, ``entity_names[entity]`` (when given) in its hover title, and after it
    ``mention_titles[(start, end)]`` (when given: what to say about that one mention, e.g. its posterior
    probability); ``title`` (when given) a heading above. Tokens, names, mention titles and the title are
    HTML-escaped; exact duplicate mentions are drawn once."""
    colours = entity_colours(document)

    def open_tag(mention: Mention) -> str:
        colour = colours[mention.entity]
        hover = _hover(mention, entity_names, mention_titles)
        return (f'<span class="mention" title="{escape(hover)}" style="background: '
                f'{colour}22; border: 1px solid {colour}; border-radius: 4px; padding: 1px 2px; margin: 0 1px">')

    def label(mention: Mention) -> str:
        colour = colours[mention.entity]
        return f'<sub style="color: {colour}; font-weight: bold">{mention.entity}</sub></span>'

    starts: dict[int, list[Mention]] = {}
    for mention in sorted(set(document.mentions), key=lambda m: (m.start, -m.end, m.entity)):
        starts.setdefault(mention.start, []).append(mention)  # enclosing mentions open first
    sentence_starts = {start for start, _ in document.sentences[1:]}
    parts: list[str] = [f"<div class=\"entitylm-coref\" style=\"{STYLE}\">"]
    if title is not None:
        parts.append(f"<h4>{escape(title)}</h4>")
    stack: list[Mention] = []  # the open mentions, outermost first
    reopen: list[Mention] = []  # crossing mentions closed after the previous token, to open again
    for position, token in enumerate(document.tokens):
        if position:
            parts.append("<br>\n" if position in sentence_starts else " ")
        for mention in reopen + starts.get(position, []):
            parts.append(open_tag(mention))
            stack.append(mention)
        parts.append(escape(token))
        ending = sum(mention.end == position + 1 for mention in stack)
        reopen = []
        while ending:  # close the innermost open mentions until every one ending here is closed
            mention = stack.pop()
            if mention.end == position + 1:
                parts.append(label(mention))
                ending -= 1
            else:  # it crosses one that ends here: closed now, reopened before the next token
                parts.append("</span>")
                reopen.insert(0, mention)
    parts.append("</div>")
    return "".join(parts)
