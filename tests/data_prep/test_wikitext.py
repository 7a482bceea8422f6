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
EXPORT = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/"
    xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
    xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ http://www.mediawiki.org/xml/export-0.11.xsd"
    version="0.11" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.42.0-wmf.5</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="-1" case="first-letter">Special</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
  <page>
    <title>Anarchism</title>
    <ns>0</ns>
    <id>12</id>
    <revision>
      <id>1187654321</id>
      <parentid>1187650000</parentid>
      <timestamp>2023-11-28T10:00:00Z</timestamp>
      <contributor>
        <username>Example</username>
        <id>42</id>
      </contributor>
      <minor />
      <comment>/* History */ copyedit</comment>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text bytes="2213" xml:space="preserve">{{Short description|Political philosophy and movement}}
{{Use British English|date=August 2021}}
{{Anarchism sidebar}}
{{Infobox political ideology
| name = Anarchism
| image = {{Nowrap|[[File:Circle-A red.svg|100px]]}}
| founders = [[Pierre-Joseph Proudhon]]&lt;ref&gt;{{cite book |last=Marshall |year=1992}}&lt;/ref&gt;
}}
'''Anarchism''' is a [[political philosophy]] and [[Political movement|movement]].&lt;ref&gt;{{Cite|}}&lt;/ref&gt;\
&lt;ref name=":0" /&gt; It rejects the [[State (polity)|state]].
__TOC__
&lt;!-- Please discuss changes on the talk page. --&gt;
== Etymology, terminology, and definition ==
{{Main|Definition of anarchism and libertarianism}}
[[File:Wilhelm Weitling.jpg|thumb|upright|[[Wilhelm Weitling]] in 1840s [[Germany]]]]
The origin of ''anarchism'' is the [[Ancient Greek]] ''anarkhia'', "without a ruler".{{sfn|Bates|2017|p=128}}
{| class="wikitable"
|+ Schools of thought
|-
! School !! Founder
|-
| [[Mutualism (economic theory)|Mutualism]] || {{nowrap|Proudhon}}
|}
=== Early history ===
* The [[Diggers]] of the 17th&amp;nbsp;century.
* See [https://www.marxists.org/reference/archive/proudhon/ Proudhon's works].
== See also ==
{{Portal|Anarchism|Politics}}
== References ==
{{Reflist}}
&lt;references /&gt;
{{Anarchism navbox}}
{{Authority control}}
[[Category:Anarchism| ]]
[[Category:Political ideologies]]
[[de:Anarchismus]]
[[fr:Anarchisme]]
[[zh-min-nan:Hui-thóng-tī-chú-gī]]</text>
      <sha1>8w6l1d2ayk6ns1mzmfpm0hbr6s3v8a3</sha1>
    </revision>
  </page>
  <page>
    <title>AccessibleComputing</title>
    <ns>0</ns>
    <id>10</id>
    <redirect title="Computer accessibility" />
    <revision>
      <id>1002250816</id>
      <timestamp>2021-01-23T15:15:01Z</timestamp>
      <contributor><username>Elli</username><id>20842734</id></contributor>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text bytes="111" xml:space="preserve">#REDIRECT [[Computer accessibility]]

{{rcat shell|
{{R from move}}
{{R from CamelCase}}
}}</text>
      <sha1>kmysdltgexdwkv2xsml3j44jb56dxvn</sha1>
    </revision>
  </page>
  <page>
    <title>Talk:Anarchism</title>
    <ns>1</ns>
    <id>13</id>
    <revision>
      <id>1</id>
      <text xml:space="preserve">Discussion that is not an article.</text>
    </revision>
  </page>
  <page>
    <title>Template:Anarchism sidebar</title>
    <ns>10</ns>
    <id>14</id>
    <revision>
      <id>2</id>
      <text xml:space="preserve">{{Sidebar with collapsible lists|name=Anarchism sidebar}}</text>
    </revision>
  </page>
  <page>
    <title>Albedo</title>
    <ns>0</ns>
    <id>39</id>
    <revision>
      <id>3</id>
      <text bytes="120" xml:space="preserve">{{Other uses}}
'''Albedo''' is the fraction of sunlight that is [[Diffuse reflection|diffusely reflected]] by a body.</text>
    </revision>
  </page>
</mediawiki>
"""

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

WORDS = np.array("the of anarchism state window attention band long model political movement sunlight".split())


def generated_page(rng: np.random.Generator, number: int) -> str:
    """One article of about 4 KB with every construct the cleaner removes (and what it keeps)."""

    def prose(n: int) -> str:
        return " ".join(rng.choice(WORDS, n))

    return f"""{{{{Infobox thing|name=Page {number}|image={{{{Nowrap|[[File:P{number}.svg|100px]]}}}}}}}}
'''Page {number}''' is a [[{prose(2)}|{prose(2)}]] and {prose(60)}.\
<ref name="r{number}">{{{{cite web|title={prose(4)}}}}}</ref>
__NOTOC__
== {prose(3)} ==
[[File:F{number}.jpg|thumb|A [[{prose(1)}]] caption]]
{prose(150)}<!-- a comment -->
{{| class="wikitable"
| {prose(5)} || {{{{nowrap|{prose(2)}}}}}
|}}
* {prose(40)}
== References ==
{{{{Reflist}}}}
<references />
[[Category:{prose(2)}]]
[[de:{prose(1)}]]
[[fr:{prose(1)}]]
{prose(120)}
"""


def write_dump(path: Path, megabytes: float, seed: int = 0) -> int:
    """A bzip2-compressed pages-articles dump of about ``megabytes`` MB of XML; returns its pages."""
    from xml.sax.saxutils import escape

    rng = np.random.default_rng(seed)
    head, tail = EXPORT.split("  <page>", 1)[0], "</mediawiki>\n"
    written, pages = 0, 0
    with bz2.open(path, "wb", compresslevel=1) as out:
        out.write(head.encode())
        while written < megabytes * 1e6:
            page = (
                f"  <page>\n    <title>Page {pages}</title>\n    <ns>0</ns>\n    <id>{pages}</id>\n    <revision>\n"
                f'      <text xml:space="preserve">{escape(generated_page(rng, pages))}</text>\n'
                "    </revision>\n  </page>\n"
            ).encode()
            out.write(page)
            written += len(page)
            pages += 1
        out.write(tail.encode())
    return pages


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
