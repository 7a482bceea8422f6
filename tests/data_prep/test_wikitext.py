"""Wikipedia markup to plain text (``data_prep.wikitext``): each construct on its own, an
export fragment written by hand in MediaWiki's format, and memory that stays flat as a
streamed dump grows.

Run as a script, this file writes a generated dump of a given size (for measuring peak
memory by hand)::

    python tests/data_prep/test_wikitext.py /tmp/dump.xml.bz2 1000     # about 1,000 MB of XML, bzip2-compressed
"""

import bz2
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from releases import EXPORT, generated_page, write_dump

from data_prep.doc_sources import SourceSpec, read_wiki
from data_prep.wikitext import iter_wiki_pages, strip_markup

# ---------------------------------------------------------------- one construct at a time


@pytest.mark.parametrize(
    "wikitext, expected",
    [
        # links: label, target, trail, leading colon, the pipe trick
        ("See [[Anarchism|anarchists]] and [[Proudhon]]s.", "See anarchists and Proudhons."),
        ("[[:Category:Anarchism]] is a category.", "Category:Anarchism is a category."),
        ("[[Paris, Texas|]] and [[Help:Contents|]] and [[Kropotkin (book)|]]", "Paris and Contents and Kropotkin"),
        # interlanguage links go, whatever the code's shape; other prefixes stay
        ("Text.\n[[de:Anarchismus]]\n[[fr:Anarchisme]]\n[[zh-min-nan:Hui-thóng]]\n[[simple:Anarchism]]", "Text."),
        ("[[Wikipedia:Manual of Style|style]] and [[w:Foo]]", "style and w:Foo"),
        # categories, files, images and media, with links nested in captions
        ("A.[[Category:Anarchism| ]][[category:Political ideologies]]", "A."),
        ("[[File:Goldman.jpg|thumb|[[Emma Goldman]] in [[1911]], a [[File:x.png]] photo]]After.", "After."),
        ("[[Image:Flag.svg|20px]] [[Media:Anthem.ogg|listen]] end", "end"),
        # templates, nested, with parameters and parser functions; a brace run of five
        ("a{{Infobox|name={{lang|fr|x}}|b={{{1|{{c}}}}}}}b", "ab"),
        ("{{#if:{{{x|}}}|yes|no}}kept{{DEFAULTSORT:Anarchism}}", "kept"),
        ("x {{{{{a}}}}} y", "x y"),
        # tables, nested, with templates and links inside; "|}}" closing a template is no table end
        ('{| class="wikitable"\n|-\n| a || {{b}}\n{|\n| [[c]]\n|}\n|}\nAfter the table.', "After the table."),
        ("{{Quote|\n{|\n| cell\n|}}}\nText", "Text"),
        ("{{Infobox\n| a = 1\n|}}\nText", "Text"),
        # references: whole, named, self-closing, with braces inside; the list of references
        ('Fact.<ref name="a">{{cite book|title=}}}} x</ref> More<ref name=b /> end.', "Fact. More end."),
        ("Text.<REF>Upper case.</REF>\n== References ==\n<references />", "Text.\nReferences"),
        ("x<ref group=note>unclosed", "xunclosed"),
        # comments (an unclosed one runs to the end), magic words, non-prose tags
        ("__NOTOC__\nVisible<!-- hidden\n{{also hidden}} --> text.<!-- never closed", "Visible text."),
        (
            "E = <math>mc^2</math>.\n<gallery>\nFile:a.jpg|A\n</gallery>\n<syntaxhighlight lang=c>x</syntaxhighlight>",
            "E = .",
        ),
        ("<nowiki>{{not a template}} [[not a link]]</nowiki>", "{{not a template}} [[not a link]]"),
        # section titles, lists, emphasis, HTML tags and entities, external links, rules
        ("== History ==\n=== Early  years ===\nProse.", "History\nEarly years\nProse."),
        ("* one\n# two\n: indented\n; term", "one\ntwo\nindented\nterm"),
        (
            "'''Anarchism''' is ''a'' '''''political''''' '''Proudhon''''s idea",
            "Anarchism is a political Proudhon's idea",
        ),
        ('A<br/>B <span style="x">C</span> D&nbsp;&amp;&nbsp;E &lt;F&gt;', "A B C D & E <F>"),
        (
            "[https://example.org the site], [http://x.org], [//y.org z] and https://bare.org",
            "the site, , z and https://bare.org",
        ),
        ("Above\n----\nBelow", "Above\nBelow"),
        # an opener that is never closed is text
        ("unclosed {{ brace and [[ link", "unclosed {{ brace and [[ link"),
        ("[[File:x.png|[https://y.org z]]] after", "after"),
    ],
)
def test_strip_markup(wikitext, expected):
    assert strip_markup(wikitext) == expected


# ---------------------------------------------------------------- an export fragment

# A pages-articles fragment as Special:Export writes it: siteinfo with the namespaces, an
# article with the constructs above, a redirect, a talk page and a template page.

ANARCHISM = [
    "Anarchism is a political philosophy and movement. It rejects the state.",
    "Etymology, terminology, and definition",
    'The origin of anarchism is the Ancient Greek anarkhia, "without a ruler".',
    "Early history",
    "The Diggers of the 17th century.",
    "See Proudhon's works.",
    "See also",
    "References",
]


def test_export_fragment_gives_the_articles_as_plain_text(tmp_path):
    path = tmp_path / "enwiki-pages-articles.xml.bz2"
    path.write_bytes(bz2.compress(EXPORT.encode("utf-8")))
    pages = list(iter_wiki_pages(path))
    assert [title for title, _ in pages] == ["Anarchism", "Albedo"]  # no redirect, talk or template page
    assert pages[0][1].split("\n") == ANARCHISM
    assert pages[1][1] == "Albedo is the fraction of sunlight that is diffusely reflected by a body."


def test_local_namespace_names_come_from_siteinfo(tmp_path):
    german = EXPORT.replace(">File<", ">Datei<").replace(">Category<", ">Kategorie<")
    page = "Text.\n[[Datei:Bild.png|mini|Ein [[Bild]]]]\n[[Kategorie:Anarchismus]]\n[[Portal:Anarchismus|Portal]]"
    german = german.replace("'''Albedo''' is the fraction", page + " Albedo")
    path = tmp_path / "dewiki.xml"
    path.write_text(german, encoding="utf-8")
    assert dict(iter_wiki_pages(path))["Albedo"].split("\n") == [
        "Text.",
        "Portal Albedo of sunlight that is diffusely reflected by a body.",
    ]
    # The canonical names work on every wiki.
    assert strip_markup("[[Datei:Bild.png]] [[File:Image.png]]x") == "Datei:Bild.png x"


# ---------------------------------------------------------------- streaming


def peak_bytes_while_streaming(path: Path) -> tuple[int, int]:
    """(pages read, peak bytes allocated by Python) over a whole pass through a dump."""
    tracemalloc.start()
    try:
        pages = sum(1 for _ in iter_wiki_pages(path))
        return pages, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_as_the_dump_grows(tmp_path):
    small, large = tmp_path / "small.xml.bz2", tmp_path / "large.xml.bz2"
    written = write_dump(small, 0.5), write_dump(large, 4)
    (small_pages, small_peak), (large_pages, large_peak) = map(peak_bytes_while_streaming, (small, large))
    assert (small_pages, large_pages) == written and large_pages > 7 * small_pages
    # Eight times the pages, the same peak give or take allocator noise; keeping the pages
    # in the tree would add about 4 KB each (4 MB here).
    assert large_peak < small_peak + 1_000_000, (small_peak, large_peak)


def test_generated_page_keeps_its_prose_only():
    text = strip_markup(generated_page(np.random.default_rng(1), 7))
    lines = text.split("\n")
    assert len(lines) == 6 and lines[0].startswith("Page 7 is a ") and lines[4] == "References"
    assert not any(mark in text for mark in ("{", "}", "[", "]", "|", "<", ">", "=", "'", "File", "Category", "de:"))


def test_a_dump_that_is_not_one_is_skipped_with_the_reason(tmp_path):
    cases = {
        "notxml.xml.bz2": bz2.compress(b"Just text, compressed."),
        "other.xml": b"<rss><channel/></rss>",
        "paper.xml": b"%PDF-1.7\n...",
        "cut.xml.bz2": bz2.compress(EXPORT.encode())[:200],
    }
    reasons = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        [item] = read_wiki(SourceSpec("wiki", "wiki", tmp_path), tmp_path / name)
        reasons[name] = item.reason
    assert reasons == {
        "notxml.xml.bz2": "not a MediaWiki XML dump (not XML: syntax error: line 1, column 0)",
        "other.xml": "not a MediaWiki XML dump (the root element is <rss>, not <mediawiki>)",
        "paper.xml": "a PDF file, not a MediaWiki XML dump",
        "cut.xml.bz2": "truncated file (before its first article)",
    }


if __name__ == "__main__":
    target, size = Path(sys.argv[1]), float(sys.argv[2])
    print(f"{target}: {write_dump(target, size):,} pages, {target.stat().st_size / 1e6:,.0f} MB compressed")
