"""Files in the layouts their official releases ship, for the tests that read releases and
for the user journeys (``tests/journeys/``), which start from them as a user does.

Each writer follows its release's documented layout (file names, fields, folders) and
writes a few records chosen to exercise what the readers must handle; none holds data
of the release itself.

- TriviaQA (``triviaqa-rc.tar.gz``): :func:`write_triviaqa_release`;
- IMDB (``aclImdb_v1.tar.gz``) and Hyperpartisan's JSONL: :func:`write_aclimdb`,
  :func:`write_byarticle`;
- WikiHop (``qangaroo_v1.1.zip``): :func:`write_wikihop_release`;
- HotpotQA's four files: :data:`HOTPOT_TRAIN`, ... and :func:`write_hotpotqa_release`;
- CoNLL-2012 (``conll-2012/v4/data/...``): :func:`part_text`, :func:`release_file`,
  :func:`write_conll_release`;
- a Wikipedia pages-articles dump: :data:`EXPORT`, :func:`write_dump`;
- the arXiv summarization files of Cohan et al. (2018): :func:`write_arxiv_release`;
- a paper as a PDF: :func:`write_paper_pdf`; text8/enwik8-style zips: :func:`write_char_zip`.
"""

import bz2
import json
import re
import zipfile
from pathlib import Path

import numpy as np

# ================================================================ TriviaQA
WIKIPEDIA = {
    "Andrew_Lloyd_Webber.txt": "Andrew Lloyd Webber wrote many musicals. Sunset Boulevard premiered in the US "
    "on 9 December 1993.\nHis Sunset Blvd. ran for years.",
    "Sunset_Boulevard_(musical).txt": "Sunset Boulevard is a musical by Andrew Lloyd Webber. It opened in London.",
    "The_Beatles.txt": "The Beatles were an English rock band formed in Liverpool. They recorded Abbey Road.",
    "Liverpool.txt": "Liverpool is a city in England. Its port is famous.",
}
WEB = {
    "35/35_995.txt": "The official website for Andrew Lloyd Webber. Sunset Boulevard had its American premiere.",
    "12/12_3.txt": "Fans of the band from Liverpool still visit the studios on Abbey Road.",
    "12/12_4.txt": "THE BEATLES recorded Abbey Road in 1969; the Beatles split up a year later.",
}


def answer(*aliases: str) -> dict:
    """An ``Answer`` object as the release has it; the first alias is the ``Value``."""
    normalized = [re.sub(r"[^\w\s]", " ", a.lower()).strip() for a in aliases]
    return {"Aliases": list(aliases), "MatchedWikiEntityName": aliases[0], "NormalizedAliases": normalized,
            "NormalizedMatchedWikiEntityName": normalized[0], "NormalizedValue": normalized[0],
            "Type": "WikipediaEntity", "Value": aliases[0]}  # fmt: skip


def page(filename: str, verified: bool = True) -> dict:
    return {"DocSource": "TagMe", "Filename": filename, "Title": filename[:-4].replace("_", " "),
            "DocPartOfVerifiedEval": verified}  # fmt: skip


def result(filename: str, rank: int, verified: bool = True) -> dict:
    return {"Description": "...", "DisplayUrl": "www.example.org", "Filename": filename, "Rank": rank,
            "Title": f"Result {rank}", "Url": f"http://www.example.org/{rank}",
            "DocPartOfVerifiedEval": verified}  # fmt: skip


def question(qid: str, text: str, gold: dict | None, pages=(), results=None, verified: bool = True) -> dict:
    """One ``Data`` entry; ``gold`` None leaves out ``Answer`` (a test file), ``results``
    None leaves out ``SearchResults`` (a Wikipedia file)."""
    entry = {"QuestionId": qid, "Question": text, "EntityPages": list(pages),
             "QuestionSource": "http://trivia.example/", "QuestionPartOfVerifiedEval": verified}  # fmt: skip
    if gold is not None:
        entry["Answer"] = gold
    if results is not None:
        entry["SearchResults"] = list(results)
    return entry


SUNSET = ("tc_33", "Which Lloyd Webber musical premiered in the US on 10th December 1993?")
SUNSET_GOLD = answer("Sunset Boulevard", "Sunset Blvd", "West Sunset Boulevard", "Sunset Blvd.")
BAND = ("tc_51", "Which band recorded Abbey Road?")
BAND_GOLD = answer("The Beatles", "Beatles")
CITY = ("tc_77", "Which city did the Beatles come from?")
MONA = ("tc_90", "Who painted the Mona Lisa?")
SUNSET_PAGES = [page("Andrew_Lloyd_Webber.txt"), page("Sunset_Boulevard_(musical).txt")]


def write_triviaqa_release(directory: Path) -> Path:
    """The release's qa/ files and evidence/ under ``directory``."""
    for sub, texts in (("wikipedia", WIKIPEDIA), ("web", WEB)):
        for name, text in texts.items():
            (directory / "evidence" / sub / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / "evidence" / sub / name).write_text(text)
    (directory / "qa").mkdir()
    files = {
        "wikipedia-train.json": ("Wikipedia", False, "train", [
            question(*SUNSET, SUNSET_GOLD, SUNSET_PAGES),
            question(*BAND, BAND_GOLD, [page("The_Beatles.txt")]),
            question(*CITY, answer("Liverpool"), [page("Liverpool.txt"), page("The_Beatles.txt")]),
        ]),
        # QuestionPartOfVerifiedEval false on tc_77 counts only in a VerifiedEval file; tc_90 has no page.
        "wikipedia-dev.json": ("Wikipedia", False, "dev", [
            question(*SUNSET, SUNSET_GOLD, SUNSET_PAGES),
            question(*MONA, answer("Leonardo da Vinci"), []),
            question(*CITY, answer("Liverpool"), [page("Liverpool.txt")], verified=False),
        ]),
        "wikipedia-test-without-answers.json": ("Wikipedia", False, "test", [
            question(*SUNSET, None, SUNSET_PAGES),
            question(*BAND, None, [page("The_Beatles.txt")]),
        ]),
        # The Wikipedia domain keeps a verified question's every page, whatever its own flag.
        "verified-wikipedia-dev.json": ("Wikipedia", True, "dev", [
            question(*SUNSET, SUNSET_GOLD, [page("Andrew_Lloyd_Webber.txt"),
                                            page("Sunset_Boulevard_(musical).txt", verified=False)]),
            question(*CITY, answer("Liverpool"), [page("Liverpool.txt")], verified=False),
            question(*BAND, BAND_GOLD, [page("The_Beatles.txt")]),
        ]),
        "web-dev.json": ("Web", False, "dev", [
            question(*SUNSET, SUNSET_GOLD, SUNSET_PAGES, [result("35/35_995.txt", 0)]),
            question(*BAND, BAND_GOLD, [page("The_Beatles.txt")], [result("12/12_3.txt", 0), result("12/12_4.txt", 1)]),
            question(*MONA, answer("Leonardo da Vinci"), [], []),
        ]),
        # The Web domain keeps a verified question's verified documents only.
        "verified-web-dev.json": ("Web", True, "dev", [
            question(*SUNSET, SUNSET_GOLD, [page("Andrew_Lloyd_Webber.txt", verified=False),
                                            page("Sunset_Boulevard_(musical).txt")], [result("35/35_995.txt", 0)]),
            question(*BAND, BAND_GOLD, [page("The_Beatles.txt")], [result("12/12_4.txt", 0)], verified=False),
        ]),
    }  # fmt: skip
    for name, (domain, verified, split, data) in files.items():
        release = {"Data": data, "Domain": domain, "VerifiedEval": verified, "Version": 1.0, "Split": split}
        (directory / "qa" / name).write_text(json.dumps(release, indent=2))
    return directory


# ================================================================ IMDB and Hyperpartisan

# aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt: one review a file, on one line, no final newline.
REVIEWS = {
    "train/pos/0_9.txt": "A moving film.<br /><br />The cast is superb and the score soars.",
    "train/pos/10_10.txt": 'The "twist" works, and the ending earns it.',
    "train/pos/1_7.txt": "Good, if long.<br />Worth a second look.",
    "train/neg/0_3.txt": "Dull from start to end.<br /><br /><br />Skip it.",
    "train/neg/1_1.txt": "The worst film I saw this year.",
    "train/unsup/0_0.txt": "An unrated review of a film.",
    "train/unsup/1_0.txt": "Another review without a rating.",
    "test/pos/0_10.txt": "A joy to watch.<br /><br />Ten out of ten.",
    "test/neg/0_2.txt": "Flat and slow.",
    "test/neg/1_4.txt": "Not for me.<br />Too loud.",
}
# What the release keeps beside the label folders: bag-of-words features and review URLs.
BESIDE = ["train/labeledBow.feat", "train/unsupBow.feat", "train/urls_pos.txt", "train/urls_neg.txt"]
BESIDE += ["train/urls_unsup.txt", "test/labeledBow.feat", "test/urls_pos.txt", "test/urls_neg.txt"]

ARTICLES = [
    "Senate passes the budget after a long night of debate.",
    "THEY are lying to you about everything, wake up!",
    "Local bakery wins a regional prize for its bread.",
    "The radical agenda will destroy this country, again.",
    "Council approves new bike lanes downtown.",
]


def write_aclimdb(root: Path) -> Path:
    for name, text in REVIEWS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    for name in BESIDE:
        (root / name).write_text("0 0:1 1:2\n" if name.endswith(".feat") else "http://www.imdb.com/title/tt0453418/\n")
    for name in ("README", "imdb.vocab", "imdbEr.txt"):
        (root / name).write_text("the\nand\n")
    return root


def write_byarticle(path: Path, labels: list) -> Path:
    rows = [
        {"id": f"{i:07d}", "text": text, "hyperpartisan": label}
        for i, (text, label) in enumerate(zip(ARTICLES[: len(labels)], labels, strict=True))
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ================================================================ HotpotQA

# Distractor setting (train, dev): every record labelled. Record 1's second fact points
# past the last of its paragraph's two sentences.
HOTPOT_TRAIN = [
    {
        "_id": "5a7a06935542990198eaf050",
        "question": "Which magazine was started first, Arthur's Magazine or First for Women?",
        "answer": "Arthur's Magazine",
        "type": "comparison",
        "level": "medium",
        "context": [
            ["Radio City (Indian radio station)", ["Radio City is India's first private FM radio station."]],
            ["Arthur's Magazine", ["Arthur's Magazine was an American literary periodical.",
                                   " It was published in Philadelphia from 1844."]],
            ["First for Women", ["First for Women is a woman's magazine started in 1989."]],
        ],
        "supporting_facts": [["Arthur's Magazine", 0], ["First for Women", 0]],
    },
    {
        "_id": "5a879ab05542996e4f30887e",
        "question": "The Oberoi family is part of a hotel company that has a head office in what city?",
        "answer": "Delhi",
        "type": "bridge",
        "level": "medium",
        "context": [
            ["Esma Sultan Mansion", ["The Esma Sultan Mansion is a historical yalı in Istanbul.",
                                     " It is now a venue."]],
            ["The Oberoi Group", ["The Oberoi Group is a hotel company with its head office in Delhi."]],
            ["Oberoi family", ["The Oberoi family is an Indian family famous for its hotels."]],
        ],
        "supporting_facts": [["Oberoi family", 0], ["Esma Sultan Mansion", 2], ["The Oberoi Group", 0]],
    },
]  # fmt: skip

# Full-wiki dev: the same layout, with the retriever's paragraphs. Record 0 lacks one gold
# title; record 1 lacks both (its answer is in no paragraph either); record 2 has none.
HOTPOT_FULLWIKI = [
    {
        "_id": "5a8b57f25542995d1e6f1371",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "context": [
            ["Scott Derrickson", ["Scott Derrickson is an American director.", " He lives in Los Angeles."]],
            ["Woodson, Arkansas", ["Woodson is a census-designated place."]],
        ],
        "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood", 0]],
    },
    {
        "_id": "5a8c7595554299585d9e36b6",
        "question": "What government position was held by the woman who portrayed Corliss Archer?",
        "answer": "Chief of Protocol",
        "type": "bridge",
        "level": "hard",
        "context": [["Meet Corliss Archer", ["Meet Corliss Archer is a radio sitcom."]]],
        "supporting_facts": [["Kiss and Tell (1945 film)", 0], ["Shirley Temple", 0]],
    },
    {
        "_id": "5a85ea095542994775f606a8",
        "question": "What science fantasy young adult series has companion books about enslaved worlds?",
        "answer": "Animorphs",
        "type": "bridge",
        "level": "hard",
        "context": [],
        "supporting_facts": [["The Hork-Bajir Chronicles", 0], ["Animorphs", 0]],
    },
]  # fmt: skip

# The test file (hotpot_test_fullwiki_v1.json): "_id", "question", "context" only.
HOTPOT_TEST = [
    {
        "_id": "5a8b57f25542995d1e6f1372",
        "question": "Which city is the head office of the Oberoi Group in?",
        "context": [
            ["The Oberoi Group", ["The Oberoi Group is a hotel company with its head office in Delhi."]],
            ["Arthur's Magazine", ["Arthur's Magazine was an American literary periodical."]],
        ],
    },
    {"_id": "5a8b57f25542995d1e6f1373", "question": "Who directed Ed Wood?", "context": []},
]


# ================================================================ CoNLL-2012


def part_text(name, sentences, placeholder=False, part=0):
    """One document part as the release writes it; ``sentences``: lists of ``(word, POS,
    coreference)``, one speaker. ``placeholder``: a skeleton, every word ``[WORD]``."""
    lines = [f"#begin document ({name}); part {part:03d}"]
    for sentence in sentences:
        for i, (word, pos, coref) in enumerate(sentence):
            parse = "(TOP*" if i == 0 else "*)" if i == len(sentence) - 1 else "*"
            word = "[WORD]" if placeholder else word
            lines.append(f"{name}  {part}  {i:>3}  {word:>12}  {pos:>4}  {parse:>8}  -  -  -  Speaker#1  *  {coref:>6}")
        lines.append("")
    return "\n".join(lines + ["#end document"]) + "\n"


# English: bc/cnn/00/cnn_0004 with escaped sentence-final words, nw/wsj/00/wsj_0001 without.
CNN = [
    [("He", "PRP", "(5)"), ("said", "VBD", "-"), ("so", "RB", "-"), ("/.", ".", "-")],
    [("Did", "VBD", "-"), ("he", "PRP", "(5)"), ("go", "VB", "-"), ("/?", ".", "-")],
    [("Yes", "UH", "-"), ("/.", ".", "-")],
]
WSJ = [[("Pierre", "NNP", "(1"), ("Vinken", "NNP", "1)"), ("rested", "VBD", "-"), ("and", "CC", "-"),
        ("he", "PRP", "(1)"), ("slept", "VBD", "-"), (".", ".", "-")]]  # fmt: skip
CCTV = [[("他", "PN", "(3)"), ("说", "VV", "-"), ("他", "PN", "(3)"), ("来", "VV", "-"), ("。", "PU", "-")]]
ANN = [[("قال", "VERB", "-"), ("إنه", "PRON", "(2)"), ("هو", "PRON", "(2)"), (".", "PUNC", "-")]]
CONLL_WORDS = " ".join(w for doc in (CNN, WSJ, CCTV, ANN) for sentence in doc for w, _, _ in sentence)


def release_file(split_root, language, document, text):
    """``split_root/data/<language>/annotations/<document>.v4_<kind>``; ``document`` like
    ``bc/cnn/00/cnn_0004``, ``text`` by kind: ``gold_conll``, ``gold_skel``."""
    for kind, content in text.items():
        path = split_root / "data" / language / "annotations" / f"{document}.v4_{kind}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return split_root / "data" / language / "annotations" / f"{document}.v4_gold_conll"


def restored(document, sentences):
    """A document both as its skeleton and as restored, the two files the tree holds."""
    return {"gold_skel": part_text(document, sentences, True), "gold_conll": part_text(document, sentences)}


def write_conll_release(root: Path) -> Path:
    """``root/conll-2012/v4/data``: English, Chinese and Arabic train documents (one Chinese
    skeleton never restored), English and Chinese development and test ones."""
    data = root / "conll-2012" / "v4" / "data"
    train, dev, test = data / "train", data / "development", data / "test"
    release_file(train, "english", "bc/cnn/00/cnn_0004", restored("bc/cnn/00/cnn_0004", CNN))
    release_file(train, "english", "nw/wsj/00/wsj_0001", restored("nw/wsj/00/wsj_0001", WSJ))
    release_file(train, "chinese", "bc/cctv/00/cctv_0001", restored("bc/cctv/00/cctv_0001", CCTV))
    # A Chinese document whose words were never restored: no concern of an English run.
    release_file(train, "chinese", "bc/cctv/00/cctv_0002", {"gold_skel": part_text("bc/cctv/00/cctv_0002", CCTV, True)})
    release_file(train, "arabic", "nw/ann/00/ann_0001", restored("nw/ann/00/ann_0001", ANN))
    release_file(dev, "english", "nw/wsj/00/wsj_0002", restored("nw/wsj/00/wsj_0002", WSJ))
    release_file(dev, "chinese", "bc/cctv/00/cctv_0003", restored("bc/cctv/00/cctv_0003", CCTV))
    release_file(test, "english", "bc/cnn/00/cnn_0005", restored("bc/cnn/00/cnn_0005", CNN))
    return data


# ================================================================ WikiHop

WIKIHOP = [
    {
        "id": "WH_train_0",
        "query": "participant_of juan rossell",
        "answer": "1996 summer olympics",
        "candidates": ["1996 summer olympics", "olympic games", "sport"],
        "supports": [
            "The 1996 Summer Olympics were an international multi-sport event held in Atlanta.",
            "Juan Miguel Rossell Milanes is a Cuban beach volleyball player. He competed at the 1996 "
            "Summer Olympics in Atlanta.",
        ],
    },
    {
        "id": "WH_train_1",
        "query": "country_of_citizenship pierre vinken",
        "answer": "netherlands",
        "candidates": ["belgium", "netherlands", "germany"],
        "supports": ["Pierre Vinken was a Dutch publisher.", "The Dutch live in the Netherlands, by the sea."],
    },
    {
        "id": "WH_dev_0",
        "query": "located_in_the_administrative_territorial_entity liverpool",
        "answer": "england",
        "candidates": ["england", "wales"],
        "supports": ["Liverpool is a city in the north west of England.", "Wales lies to the west."],
    },
]


def write_wikihop_release(root: Path) -> Path:
    """``root/qangaroo_v1.1/wikihop/{train,dev}.json``, as ``qangaroo_v1.1.zip`` unpacks: a
    JSON list of ``{id, query, answer, candidates, supports}`` records."""
    wikihop = root / "qangaroo_v1.1" / "wikihop"
    wikihop.mkdir(parents=True)
    (wikihop / "train.json").write_text(json.dumps(WIKIHOP[:2]))
    (wikihop / "dev.json").write_text(json.dumps(WIKIHOP[2:]))
    return wikihop


# ================================================================ HotpotQA files


def write_hotpotqa_release(root: Path) -> Path:
    """HotpotQA's four files under ``root`` (train, both dev settings, the test file)."""
    files = {
        "hotpot_train_v1.1.json": HOTPOT_TRAIN,
        "hotpot_dev_distractor_v1.json": HOTPOT_TRAIN[:1],
        "hotpot_dev_fullwiki_v1.json": HOTPOT_FULLWIKI,
        "hotpot_test_fullwiki_v1.json": HOTPOT_TEST,
    }
    for name, records in files.items():
        (root / name).write_text(json.dumps(records))
    return root


# ================================================================ arXiv (Cohan et al., 2018)

ARXIV_SENTENCES = [
    "we study attention over long documents .",
    "the band of each token covers its neighbours .",
    "global tokens see the whole sequence .",
    "the model reads sixteen thousand tokens at once .",
    "results improve as the input grows .",
    "we release code and models .",
]


def write_arxiv_release(root: Path, papers: tuple[int, int, int] = (6, 2, 2)) -> Path:
    """``root/arxiv/{train,val,test}.txt`` as the arXiv dataset ships them, papers of
    :data:`ARXIV_SENTENCES` (the report's toy world writes the same layout)."""
    from longformer_fs.report.recipe_runs import write_arxiv_release as write

    arxiv = root / "arxiv"
    arxiv.mkdir(parents=True)
    return write(arxiv, list(ARXIV_SENTENCES), papers)


# ================================================================ papers and corpora


def write_paper_pdf(path: Path, title: str, abstract: list[str], body: list[str]) -> Path:
    """A one-page paper: a large title, an "Abstract" heading, its lines, then "1 Introduction"."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.set_font("helvetica", size=16)
    pdf.text(20, 20, title)
    pdf.set_font("helvetica", size=10)
    for i, line in enumerate(["Abstract", *abstract, "1 Introduction", *body]):
        pdf.text(20, 35 + 6 * i, line)
    pdf.output(str(path))
    return path


def write_char_zip(path: Path, member: str, data: bytes) -> Path:
    """A zip holding ``data`` as ``member``, as text8.zip (``text8``) and enwik8.zip (``enwik8``) do."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, data)
    return path


# ================================================================ Wikipedia dump

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


WIKI_WORDS = np.array("the of anarchism state window attention band long model political movement sunlight".split())


def generated_page(rng: np.random.Generator, number: int) -> str:
    """One article of about 4 KB with every construct the cleaner removes (and what it keeps)."""

    def prose(n: int) -> str:
        return " ".join(rng.choice(WIKI_WORDS, n))

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
