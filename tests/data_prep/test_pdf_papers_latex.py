"""Papers typeset by real LaTeX classes (``tests/data_prep/papers``), scored against the
truth that ``tex_truth`` reads from each paper's ``.tex``: the issue's bag-of-words F1
over lowercase words of three letters or more, on titles, abstracts and keywords; and
bodies free of what is not running text (authors, e-mail addresses, line numbers,
ligatures, footnote marks, the reference list).

``pytest -s`` prints the table that docs/data.md reports."""

import re
from pathlib import Path

import pytest
from tex_truth import bag_f1, latex_to_text, truth

from data_prep.pdf_papers import FOUND, NO_HEADING_NO_PROSE, read_paper

PAPERS = Path(__file__).parent / "papers"
SOURCES = sorted(PAPERS.glob("*.tex"))
LIGATURES = re.compile("[\ufb00-\ufb06]")
MARKS = re.compile("[*\u2217\u2020\u2021\u00a7\u00b6\u2016\u22c6]")
EMAIL = re.compile(r"\S+@\S+\.[a-z]{2,}")


@pytest.fixture(scope="module")
def papers() -> dict[str, tuple[dict, object]]:
    """name -> (truth from the .tex, paper read from the .pdf)."""
    out = {}
    for tex in SOURCES:
        out[tex.stem] = (truth(tex), read_paper(tex.with_suffix(".pdf")))
    return out


def documentclass(tex: Path) -> str:
    match = re.search(r"\\documentclass(?:\[([^\]]*)\])?\{([^}]+)\}", tex.read_text(encoding="utf-8"))
    return f"{match[2]}[{match[1] or ''}]"


def test_fixtures_cover_the_classes_users_bring():
    assert all(tex.with_suffix(".pdf").exists() for tex in SOURCES), "run tests/data_prep/papers/build.sh"
    classes = [documentclass(tex) for tex in SOURCES]
    acm_formats = {
        f
        for c in classes
        if c.startswith("acmart")
        for f in ("acmsmall", "acmlarge", "acmtog", "sigconf", "manuscript")
        if f in c
    }
    assert len(acm_formats) >= 3, classes
    assert any(c.startswith("revtex4-2") and "aps" in c for c in classes)
    assert any(c.startswith("revtex4-2") and "aip" in c for c in classes)
    assert any(c.startswith("IEEEtran") and "conference" in c for c in classes)
    assert any(c.startswith("IEEEtran") and "journal" in c for c in classes)
    for name in ("elsarticle", "llncs", "amsart"):
        assert any(c.startswith(name) for c in classes), name
    assert any(c.startswith("article") and "twocolumn" in c for c in classes)
    assert any("\\linenumbers" in tex.read_text(encoding="utf-8") or "review" in documentclass(tex) for tex in SOURCES)
    languages = {truth(tex)["language"] for tex in SOURCES} - {"english"}
    assert len(languages) >= 5, languages
    assert len({c.split("[")[0] for c in classes}) >= 10


def scores(papers: dict) -> dict[str, dict[str, float]]:
    return {
        name: {
            "title": bag_f1(paper.title, want["title"]),
            "abstract": bag_f1(paper.abstract, want["abstract"]),
            "keywords": bag_f1(" ".join(paper.keywords), " ".join(want["keywords"])),
        }
        for name, (want, paper) in papers.items()
    }


def test_titles_and_abstracts_meet_the_targets(papers):
    got = scores(papers)
    print(f"\n{'fixture':28} {'title':>6} {'abstract':>9} {'keywords':>9}  how the abstract was found")
    for name, s in got.items():
        how = papers[name][1].found["abstract"]
        print(f"{name:28} {s['title']:6.2f} {s['abstract']:9.2f} {s['keywords']:9.2f}  {how}")
    with_abstract = [n for n, (want, _) in papers.items() if want["abstract"]]
    good = [n for n in with_abstract if got[n]["abstract"] >= 0.8]
    mean = sum(got[n]["abstract"] for n in with_abstract) / len(with_abstract)
    print(f"abstracts: {len(good)}/{len(with_abstract)} at F1 >= 0.8, mean {mean:.3f}")
    bad = {n: round(got[n]["abstract"], 2) for n in with_abstract if n not in good}
    assert len(good) >= 0.9 * len(with_abstract) and mean >= 0.9, bad
    titles = [n for n in got if got[n]["title"] >= 0.9]
    print(f"titles: {len(titles)}/{len(got)} at F1 >= 0.9")
    assert len(titles) >= 0.95 * len(got), {
        n: (papers[n][1].title, s["title"]) for n, s in got.items() if n not in titles
    }


def test_keywords_where_the_paper_has_them(papers):
    got = scores(papers)
    with_keywords = [n for n, (want, _) in papers.items() if want["keywords"]]
    assert len(with_keywords) >= 8
    bad = {n: (papers[n][1].keywords, got[n]["keywords"]) for n in with_keywords if got[n]["keywords"] < 0.8}
    assert len(bad) <= 0.1 * len(with_keywords), bad


def test_every_field_says_how_it_was_found(papers):
    for name, (_, paper) in papers.items():
        assert set(paper.found) == {"title", "authors", "abstract", "keywords", "body", "references"}, name
        assert set(paper.found.values()) <= set(FOUND), (name, paper.found)
        assert (paper.abstract is None) == (paper.found["abstract"] == "none") == (paper.abstract_missing is not None)


def test_a_paper_without_an_abstract_says_why(papers):
    without = [name for name, (want, _) in papers.items() if not want["abstract"]]
    assert without, "a fixture without an abstract"
    for name in without:
        paper = papers[name][1]
        assert paper.abstract is None and paper.abstract_missing == NO_HEADING_NO_PROSE, name
        assert paper.body and paper.title


def counting_up(text: str, run: int = 3, within: int = 15) -> list[int] | None:
    """The first ``run`` integers that count up by one, each within ``within`` words of the
    last: what line numbers left in running text look like."""
    words = text.split()
    numbers = [(k, int(w)) for k, w in enumerate(words) if w.isdecimal() and len(w) <= 4]
    for start, (k, value) in enumerate(numbers):
        chain, position = [value], k
        for k2, value2 in numbers[start + 1 :]:
            if k2 - position > within:
                break
            if value2 == chain[-1] + 1:
                chain.append(value2)
                position = k2
                if len(chain) == run:
                    return chain
    return None


def test_bodies_hold_running_text_only(papers):
    for name, (want, paper) in papers.items():
        body = paper.body
        assert len(body.split()) >= 300, (name, len(body.split()))
        assert not LIGATURES.search(body + (paper.abstract or "") + (paper.title or "")), name
        assert not EMAIL.search(body), (name, EMAIL.search(body)[0])
        assert not MARKS.search(body), (name, body[max(0, MARKS.search(body).start() - 40) :][:80])
        assert not MARKS.search(paper.title or "") and not re.search(r"[^\W\d_]\d$", paper.title or ""), name
        for author in want["authors"]:
            assert author not in body, (name, author)
        assert counting_up(body) is None, (name, counting_up(body))
        if want["first_section"] and want["first_section"].lower() != "nomenclature":  # AIAA: front matter
            # The body starts at the first section, or holds it after an opening without a heading (PRL).
            first = want["first_section"].lower()
            assert bag_f1(body.splitlines()[0], first) == 1.0 or first in body.lower(), name


def test_references_are_kept_apart_from_the_body(papers):
    for name, (_, paper) in papers.items():
        tex = (PAPERS / f"{name}.tex").read_text(encoding="utf-8")
        items = re.split(r"\\bibitem(?:\[[^\]]*\])?\{[^}]*\}", tex.split("\\end{thebibliography}")[0])[1:]
        if not items:
            continue
        assert paper.references and paper.found["references"] in ("heading", "layout"), name
        # The last reference's first words run on in the references, and not in the body.
        last = tokens(latex_to_text(items[-1]))[:6]
        assert len(last) == 6 and window(last, tokens(paper.references)), (name, last)
        assert not window(last, tokens(paper.body)), (name, last)


def tokens(text: str) -> list[str]:
    """Words and numbers, hyphens at line ends rejoined: what a reference's text is made of."""
    return re.findall(r"[^\W_]+", re.sub(r"-\n(?=[a-z])", "", text))


def window(words: list[str], within: list[str]) -> bool:
    return any(within[k : k + len(words)] == words for k in range(len(within) - len(words) + 1))
