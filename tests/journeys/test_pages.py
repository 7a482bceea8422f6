"""The pages' shell blocks are all accounted for: each is (part of) a journey that a test in
this folder runs, or says why none can run it here; the README's journeys are steps of the
docs' journeys, so running those runs the README's too."""

import re
from pathlib import Path

from pages import PAGES, ROOT, all_blocks, journeys

HERE = Path(__file__).parent


def test_every_block_is_a_journey_or_says_why_not():
    unmarked = [f"{b.page.relative_to(ROOT)}: {b.lines[:1]}" for b in all_blocks() if not b.journey and not b.not_run]
    assert not unmarked, f"mark these blocks <!-- journey: NAME --> or <!-- not a journey: WHY -->: {unmarked}"
    assert len(journeys()) >= 10


def test_every_journey_has_a_test_that_runs_it():
    tested = set()
    for path in HERE.glob("test_journey_*.py"):
        tested |= set(re.findall(r'Journey\(\s*"([\w-]+)"', path.read_text()))
    assert tested == set(journeys()), (sorted(tested), sorted(journeys()))


def test_the_readme_repeats_steps_of_the_docs_journeys():
    readme = PAGES[-1]
    assert readme.name == "README.md"
    docs = {name: [] for name in journeys()}
    for block in all_blocks():
        if block.journey and block.page != readme:
            docs[block.journey] += block.lines
    for block in all_blocks():
        if block.journey and block.page == readme:
            extra = [line for line in block.lines if line not in docs[block.journey]]
            assert docs[block.journey] and not extra, f"README's {block.journey} steps not in docs/: {extra}"


def test_the_guard_reads_the_words_a_make_variable_passes_on():
    """``HYDRA_ARGS="..."`` is one word to the shell: the overrides and flags inside it are
    what a test would be adding without the pages saying so."""
    from journey import undocumented

    page = "make text8 takes HYDRA_ARGS, which overrides any recipe setting"
    assert undocumented('HYDRA_ARGS="model.decoder_layers=2 dataset.batch_size=4"', page) == []
    assert undocumented('HYDRA_ARGS="model.decoder_layers=2" SEEDS=2', page) == ["SEEDS"]
    assert undocumented('SUMMARIZE_ARGS="--min-len 2 --beam 9"', page + " SUMMARIZE_ARGS --min-len") == ["--beam"]
    assert undocumented('HYDRA_ARGS="model.decoder_layers=2"', "make text8 HYDRA_ARGS") == ["overrides"]
