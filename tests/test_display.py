"""coref.io.html: a Document as HTML with every mention highlighted, read back with the standard HTML parser."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from coref.document import Document, Mention
from coref.io.html import PALETTE, document_html


@dataclass
class Box:
    """One mention ``<span>`` as parsed: its title, colour, words (nested boxes' included), label, parent."""

    title: str
    colour: str
    parent: Box | None
    words: list[str] = field(default_factory=list)
    label: str = ""


class Boxes(HTMLParser):
    """The mention spans of a fragment, the text outside them, and whether the tags balance."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.boxes: list[Box] = []
        self.plain: list[str] = []  # text outside every mention
        self.open: list[str] = []
        self.stack: list[Box] = []
        self.in_label = False
        self.feed(html)
        self.close()
        assert not self.open, f"unclosed elements {self.open}"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":  # a void element: no end tag
            return
        self.open.append(tag)
        attributes = dict(attrs)
        if tag == "span":
            colour = re.search(r"border: 1px solid (#[0-9a-f]{6})", attributes["style"] or "").group(1)
            box = Box(attributes["title"] or "", colour, self.stack[-1] if self.stack else None)
            self.boxes.append(box)
            self.stack.append(box)
        self.in_label = tag == "sub"

    def handle_endtag(self, tag: str) -> None:
        assert self.open.pop() == tag, f"</{tag}> closes another element"
        if tag == "span":
            self.stack.pop()
        self.in_label = False

    def handle_data(self, data: str) -> None:
        if self.in_label:
            self.stack[-1].label += data
        elif self.stack:
            for box in self.stack:
                box.words.extend(data.split())
        else:
            self.plain.extend(data.split())


def his_dog() -> Document:
    # [Anna]1 saw [[her]1 dog]2 . [It]2 barked .
    tokens = "Anna saw her dog . It barked .".split()
    mentions = [Mention(0, 1, 1), Mention(2, 4, 2), Mention(2, 3, 1), Mention(5, 6, 2)]
    return Document("dog", tokens, [(0, 5), (5, 8)], mentions)


def test_tokens_names_and_title_are_escaped():
    document = Document("esc", ["a", "<b>", "&", "c"], mentions=[Mention(1, 3, 0)])
    html = document_html(document, title="<T & U>", entity_names={0: 'x"<y>'})
    assert "<b>" not in html and "&lt;b&gt; &amp;" in html and "<h4>&lt;T &amp; U&gt;</h4>" in html
    boxes = Boxes(html).boxes
    assert [box.words for box in boxes] == [["<b>", "&"]]
    assert boxes[0].title == 'entity 0: x"<y>'  # the attribute parses back to the name, quote included


def test_nested_mention_is_a_box_inside_its_enclosing_box():
    boxes = Boxes(document_html(his_dog())).boxes
    assert [(box.words, box.label) for box in boxes] == [
        (["Anna"], "1"), (["her", "dog"], "2"), (["her"], "1"), (["It"], "2")]
    assert boxes[2].parent is boxes[1] and boxes[1].parent is None and boxes[0].parent is None


def test_colours_differ_between_entities_and_repeat_within_one():
    boxes = Boxes(document_html(his_dog())).boxes
    anna, her_dog, her, it = (box.colour for box in boxes)
    assert anna == her == PALETTE[0] and her_dog == it == PALETTE[1] and anna != her_dog


def test_entity_names_appear_in_the_hover_titles():
    boxes = Boxes(document_html(his_dog(), entity_names={1: "Anna", 2: "her dog"})).boxes
    assert [box.title for box in boxes] == ["entity 1: Anna", "entity 2: her dog"] * 2
    assert [box.title for box in Boxes(document_html(his_dog())).boxes] == ["entity 1", "entity 2"] * 2


def test_mention_titles_add_hover_text_to_their_own_mention_only():
    titles = {(2, 4): "P(mention) = 0.90 & <more>", (5, 6): "second"}
    boxes = Boxes(document_html(his_dog(), entity_names={2: "her dog"}, mention_titles=titles)).boxes
    assert [box.title for box in boxes] == [
        "entity 1", "entity 2: her dog; P(mention) = 0.90 & <more>", "entity 1", "entity 2: her dog; second"]
    assert "&lt;more&gt;" in document_html(his_dog(), mention_titles=titles)  # escaped in the attribute
    assert document_html(his_dog(), mention_titles={}) == document_html(his_dog())


def test_a_document_without_mentions_is_its_text_one_sentence_per_line():
    html = document_html(Document("plain", "No one came . It rained .".split(), [(0, 4), (4, 7)]))
    assert re.sub(r"<div[^>]*>|</div>", "", html) == "No one came .<br>\nIt rained ."
    parsed = Boxes(html)
    assert parsed.boxes == [] and parsed.plain == "No one came . It rained .".split()


def test_crossing_mentions_are_split_into_balanced_boxes_labelled_once():
    # [a [b]0 c]1 : the mentions (0, 2) and (1, 3) cross; duplicates are drawn once
    document = Document("cross", ["a", "b", "c", "d"], mentions=[Mention(0, 2, 0), Mention(1, 3, 1), Mention(1, 3, 1)])
    boxes = Boxes(document_html(document)).boxes  # the parser asserts that every end tag closes its own element
    assert [(box.title, box.words, box.label) for box in boxes] == [
        ("entity 0", ["a", "b"], "0"), ("entity 1", ["b"], ""), ("entity 1", ["c"], "1")]
    assert boxes[1].parent is boxes[0] and boxes[2].parent is None


def test_palette_cycles_after_ten_entities():
    document = Document("many", [str(k) for k in range(11)], mentions=[Mention(k, k + 1, k) for k in range(11)])
    colours = [box.colour for box in Boxes(document_html(document)).boxes]
    assert len(set(colours[:10])) == 10 and colours[10] == colours[0]
