"""Titles and abstract headings of PDF papers (:mod:`data_prep.pdf_papers`), on PDFs built
here: with fpdf2, and by hand where the font size must come from the matrices. The papers
typeset by real LaTeX classes are scored in ``test_pdf_papers_latex.py``."""

from pathlib import Path

import pytest

from data_prep.pdf_papers import NO_HEADING_NO_PROSE, abstract_heading, normalize, read_paper, usable_metadata_title

JOURNAL_HEADER = "Journal of Tests 12 (2026) 1-9"
TITLE_LINES = ["Sliding Windows over", "Very Long Documents"]
TITLE = " ".join(TITLE_LINES)


def make_pdf(path: Path, pages: list[list[tuple[float, str]]], metadata_title: str | None = None) -> Path:
    """pages: per page, lines as (font size in pt, text), set 7 mm apart from the top."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    if metadata_title is not None:
        pdf.set_title(metadata_title)
    for lines in pages:
        pdf.add_page()
        y = 12.0
        for size, text in lines:
            pdf.set_font("helvetica", size=size)
            pdf.text(20, y, text)
            y += 7 * max(size, 10) / 10
    pdf.output(str(path))
    return path


def raw_pdf(path: Path, content: bytes) -> Path:
    """A one-page PDF (612 x 792 pt, Helvetica as /F1) whose page draws ``content``."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def journal_paper(path: Path, metadata_title: str | None = None) -> Path:
    """Page 1: a small journal header above an 18 pt two-line title; page 2 has no header."""
    page1 = [
        (9, JOURNAL_HEADER),
        (18, TITLE_LINES[0]),
        (18, TITLE_LINES[1]),
        (10, "D. Author"),
        (10, "Abstract"),
        (10, "We slide windows over long documents."),
        (10, "1 Introduction"),
        (10, "Documents are long."),
    ]
    return make_pdf(path, [page1, [(10, "2 Method"), (10, "Windows slide.")]], metadata_title)


def test_running_header_above_the_title_is_not_the_title(tmp_path):
    paper = read_paper(journal_paper(tmp_path / "journal.pdf"))
    assert paper.title == TITLE
    assert paper.abstract == "We slide windows over long documents."
    assert paper.body == "1 Introduction\nDocuments are long.\n2 Method\nWindows slide."
    assert paper.found == {"title": "layout", "abstract": "heading", "keywords": "none", "body": "heading",
                           "authors": "layout", "references": "none"}  # fmt: skip
    assert paper.authors == "D. Author"


def test_metadata_title_wins_over_the_largest_text(tmp_path):
    paper = read_paper(journal_paper(tmp_path / "journal.pdf", metadata_title="Windows  over Documents (final)"))
    assert paper.title == "Windows over Documents (final)" and paper.found["title"] == "metadata"


@pytest.mark.parametrize("junk", ["untitled", "Microsoft Word - draft7.doc", "paper_final.pdf", "journal", "  "])
def test_junk_metadata_titles_fall_back_to_the_largest_text(tmp_path, junk):
    assert read_paper(journal_paper(tmp_path / "journal.pdf", metadata_title=junk)).title == TITLE


def test_metadata_title_filter():
    path = Path("/papers/banded-attention.pdf")
    assert usable_metadata_title("Banded Attention for Long Inputs", path) == "Banded Attention for Long Inputs"
    assert usable_metadata_title("  Node.js at Scale ", path) == "Node.js at Scale"
    for junk in (None, "", "Untitled1", "Microsoft PowerPoint - talk.pptx", "C:\\work\\x", "banded-attention", "x"):
        assert usable_metadata_title(junk, path) is None, junk


def test_paper_without_abstract_keeps_its_title_and_header_out_of_the_body(tmp_path):
    pdf = make_pdf(tmp_path / "note.pdf", [[(9, JOURNAL_HEADER), (16, "Windowed Notes"), (10, "Windows are local.")]])
    paper = read_paper(pdf)
    assert paper.title == "Windowed Notes" and paper.abstract is None
    assert paper.abstract_missing == NO_HEADING_NO_PROSE and paper.found["abstract"] == "none"
    assert paper.body == "Windows are local."


def test_sizes_come_from_the_matrices_and_rotated_text_is_ignored(tmp_path):
    # As LaTeX output often draws: a unit font size, scaled by the text matrix (Tm) or the
    # transformation matrix (cm). The arXiv identifier runs up the margin at 20 pt, larger
    # than the 17 pt title (8.5 pt scaled twice by cm), and must not be taken.
    content = b"""
BT /F1 1 Tf 9 0 0 9 72 760 Tm (Journal of Tests 12 \\(2026\\) 1-9) Tj ET
BT /F1 1 Tf 0 20 -20 0 30 450 Tm (arXiv:2601.00001v1 [cs.CL] 1 Jan 2026) Tj ET
q 2 0 0 2 0 0 cm BT /F1 8.5 Tf 36 350 Td (Banded Attention) Tj ET Q
BT /F1 1 Tf 10 0 0 10 72 660 Tm (Abstract) Tj 0 -1.5 Td (We band it.) Tj ET
BT /F1 1 Tf 10 0 0 10 72 600 Tm (1 Introduction) Tj 0 -1.5 Td (Bands are fast.) Tj ET
"""
    paper = read_paper(raw_pdf(tmp_path / "latex.pdf", content))
    assert paper.title == "Banded Attention"
    assert paper.abstract == "We band it."


def test_uniform_size_falls_back_to_the_first_line(tmp_path):
    pdf = make_pdf(tmp_path / "plain.pdf", [[(10, "Plain Title"), (10, "Abstract"), (10, "Short."), (10, "Text.")]])
    assert read_paper(pdf).title == "Plain Title"


def test_manual_mentioning_abstract_syntax_notation_has_no_abstract(tmp_path):
    lines = [
        (16, "Protocol Manual"),
        (10, "This manual describes the encoding rules."),
        (10, "Abstract Syntax Notation One (ASN.1) defines the messages."),
        (10, "Abstracts of the related standards are listed in the annex."),
        (10, "ABSTRACT SYNTAX is a term of art."),
        (10, "Abstract-based definitions are avoided."),
    ]
    paper = read_paper(make_pdf(tmp_path / "manual.pdf", [lines]))
    assert paper.title == "Protocol Manual"
    assert paper.abstract is None and paper.abstract_missing == NO_HEADING_NO_PROSE
    assert paper.body == "\n".join(text for _, text in lines[1:])  # lines 7 mm apart: paragraphs


@pytest.mark.parametrize(
    "heading, rest",
    [
        ("Abstract", ""),
        ("ABSTRACT", ""),
        ("Abstract:", ""),
        ("Abstract.", ""),
        ("Abstract\u2014", ""),
        ("Abstract\u2014We band.", "We band."),
        ("Abstract \u2013 We band.", "We band."),
        ("Abstract. We band.", "We band."),
        ("Abstract: We band.", "We band."),
        ("Abstract - We band.", "We band."),
        ("  abstract  ", ""),
        ("ABSTRACT We band.", "We band."),
        ("A B S T R A C T", ""),
        ("Zusammenfassung", ""),
        ("Résumé. Nous étudions.", "Nous étudions."),
        ("Аннотация", ""),
        ("摘要", ""),
    ],
)
def test_abstract_heading_forms(heading, rest):
    assert abstract_heading(heading) == rest


@pytest.mark.parametrize(
    "line",
    [
        "Abstract Syntax Notation One is used.",
        "ABSTRACT SYNTAX NOTATION ONE is used.",
        "Abstract Data types.",
        "Abstracts of talks follow.",
        "Abstract-based methods.",
        "Abstraction.",
        "Summary statistics are given in Table 2.",
    ],
)
def test_abstract_at_the_start_of_running_text_is_no_heading(line):
    assert abstract_heading(line) is None


def test_normalize_maps_look_only_forms_and_keeps_meaning():
    assert normalize("\ufb01le \ufb02ow \ufb00ect e\ufb03cient\u00a0x \uff21\uff22") == "file flow ffect efficient x AB"
    assert normalize("x\u00b2 \u00bd \u2460 e\u0301") == "x\u00b2 \u00bd \u2460 \u00e9"  # superscripts, fractions stay
