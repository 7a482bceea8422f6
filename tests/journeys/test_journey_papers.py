"""docs/summarization.md's journey from a folder of PDF papers, run on the papers typeset by
real LaTeX classes (tests/data_prep/papers): ``prep docs`` writes their fields to
``papers.jsonl`` and counts how each abstract was found; ``prep summarization`` pairs
bodies with abstracts and names the paper that has none, with the reason."""

import json
from pathlib import Path

import pytest
from journey import Journey, Workspace
from tex_truth import bag_f1, truth

from data_prep.pdf_papers import NO_HEADING_NO_PROSE

pytestmark = pytest.mark.slow  # a journey: its page's command blocks run as written, as processes

PAPERS = Path(__file__).parents[1] / "data_prep" / "papers"


def test_papers_from_pdf_to_a_summarization_dataset(gpt2, tmp_path):
    workspace = Workspace(tmp_path / "checkout")
    workspace.path("papers").symlink_to(PAPERS)
    workspace.path("gpt2").symlink_to(gpt2)
    workspace.path("bart.large").symlink_to(gpt2)  # for its dict.txt, as a BART release has one
    journey = Journey("papers-pdf")
    journey.run(workspace)
    docs, pairs = journey.stdout.values()

    pdfs = sorted(PAPERS.glob("*.pdf"))
    records = [json.loads(line) for line in workspace.path("data-bin/papers-mlm/papers.jsonl").read_text().splitlines()]
    assert sorted(Path(r["file"]).name for r in records) == [p.name for p in pdfs]
    without = [r for r in records if r["abstract"] is None]
    assert [Path(r["file"]).name for r in without] == ["article_no_abstract.pdf"]
    assert without[0]["abstract_missing"] == NO_HEADING_NO_PROSE and without[0]["found"]["abstract"] == "none"
    by_heading = sum(r["found"]["abstract"] == "heading" for r in records)
    by_layout = sum(r["found"]["abstract"] == "layout" for r in records)
    assert f"papers {len(pdfs)}: abstracts found {by_heading} by heading, {by_layout} by layout" in docs
    assert "papers without an abstract (kept: their body): 1" in docs
    assert f"article_no_abstract.pdf: {NO_HEADING_NO_PROSE}" in docs
    # The abstracts in papers.jsonl are the papers' own, as their sources give them.
    for record in records:
        want = truth(PAPERS / Path(record["file"]).with_suffix(".tex").name)
        assert bag_f1(record["abstract"], want["abstract"]) >= 0.6, record["file"]

    assert f"{without[0]['file']} (data-bin/papers-mlm/papers.jsonl:" in pairs  # the paper, by name
    assert f"empty target ('abstract'): {NO_HEADING_NO_PROSE}" in pairs
    stats = json.loads(workspace.path("data-bin/papers/stats.json").read_text())
    assert sum(s["pairs"] for s in stats["splits"].values()) == len(pdfs) - 1
