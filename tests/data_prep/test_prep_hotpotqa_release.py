"""``prep hotpotqa`` on records shaped as HotpotQA's released files are documented (the
hotpotqa/hotpot README's "JSON Format"): a train record whose supporting fact points
past its paragraph's last sentence, a full-wiki dev file whose retrieved paragraphs miss
gold titles (and one question with none at all, which prepro.py notes), and the test
file, which has no ``answer``, ``supporting_facts``, ``type`` or ``level``."""

import json

import pytest
from helpers import fails, ok
from releases import HOTPOT_FULLWIKI as FULLWIKI
from releases import HOTPOT_TEST as TEST
from releases import HOTPOT_TRAIN as TRAIN

from data_prep.gpt2_bpe import train_bpe
from longformer_fs.conventions import BOS, HOTPOTQA_SYMBOLS, NUM_SPECIALS


def write(path, records):
    path.write_text(json.dumps(records))
    return path


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hotpot_release_bpe")
    texts = [r["question"] + " " + " ".join(t + " " + " ".join(s) for t, s in r["context"]) for r in TRAIN + TEST]
    train_bpe(texts * 20, tmp, 400)
    return tmp


def tokenizer(bpe):
    return ["--encoder-json", bpe / "encoder.json", "--vocab-bpe", bpe / "vocab.bpe", "--dict", bpe / "dict.txt"]


def read(data, split, name):
    from fairseq.data import data_utils

    return data_utils.load_indexed_dataset(str(data / f"{split}.{name}"), None, "mmap")


def rows(data, split):
    return [json.loads(x) for x in (data / f"{split}.examples.jsonl").read_text().splitlines()]


def split_stats(data, split):
    return json.loads((data / "stats.json").read_text())["splits"][split]


def test_a_fact_past_its_paragraph_is_skipped_and_counted(bpe, tmp_path):
    out = ok("prep", "hotpotqa", "--train", write(tmp_path / "train.json", TRAIN), *tokenizer(bpe), "--out",
             tmp_path / "out")  # fmt: skip
    # The record is kept; its other facts label their sentences ([p] and [s] in context order).
    assert read(tmp_path / "out", "train", "sentences")[1].tolist() == [0, 0, 1, 1]
    assert read(tmp_path / "out", "train", "paragraphs")[1].tolist() == [0, 1, 1]
    # The gold record keeps every fact as given: the official script scores against it.
    assert [r["supporting_facts"] for r in rows(tmp_path / "out", "train")] == [r["supporting_facts"] for r in TRAIN]
    stats = split_stats(tmp_path / "out", "train")
    where = f"train.json: record 1 (_id '{TRAIN[1]['_id']}')"
    reason = "supporting fact ['Esma Sultan Mansion', 2]: sentence index out of range"
    reason += " ('Esma Sultan Mansion' has 2 sentences)"
    assert stats["skipped_facts"]["count"] == 1
    assert stats["skipped_facts"]["by_reason"] == {"sentence index out of range": 1}
    [example] = stats["skipped_facts"]["examples"]
    assert example["origin"].endswith(where) and example["reason"] == reason
    assert stats["no_supporting_fact"] == 0 and stats["labelled"] is True
    # The printed report: the table's column, then the count by reason and the example.
    lines = out.splitlines()
    assert lines[0].split()[-2:] == ["facts", "skipped"] and lines[1].split()[-1] == "1"
    assert "train: supporting facts skipped (their questions kept): 1 (1 sentence index out of range)" in lines
    assert any(line.strip().endswith(f"{where}: {reason}") for line in lines)


def test_the_fullwiki_dev_file_counts_missing_gold_titles_and_keeps_every_question(bpe, tmp_path):
    ok("prep", "hotpotqa", "--train", write(tmp_path / "train.json", TRAIN), "--valid",
       write(tmp_path / "dev_fullwiki.json", FULLWIKI), *tokenizer(bpe), "--out", tmp_path / "out")  # fmt: skip
    data = tmp_path / "out"
    assert [r["_id"] for r in rows(data, "valid")] == [r["_id"] for r in FULLWIKI]
    stats = split_stats(data, "valid")
    assert stats["skipped_facts"]["by_reason"] == {"title not in the context": 5}
    assert stats["no_supporting_fact"] == 2  # records 1 and 2: no gold title was retrieved
    assert stats["empty_context"] == 1 and stats["span_without_match"] == 2
    # Record 0 keeps its retrieved fact; records 1 and 2 label nothing.
    assert [read(data, "valid", "sentences")[i].tolist() for i in range(3)] == [[1, 0, 0], [0], []]
    # A question without paragraphs is its question alone.
    base = len((bpe / "dict.txt").read_text().splitlines())
    ids = {s: NUM_SPECIALS + base + i for i, s in enumerate(HOTPOTQA_SYMBOLS)}
    tokens = read(data, "valid", "tokens")[2].tolist()
    assert tokens[:2] == [BOS, ids["[q]"]] and tokens[-1] == ids["[/q]"] and ids["[p]"] not in tokens
    gold = {key: FULLWIKI[2][key] for key in ("_id", "answer", "supporting_facts")}
    assert rows(data, "valid")[2] == {**gold, "type": "span", "titles": [], "sentence_counts": [], "context": ""}


def test_the_test_file_is_a_split_without_labels(bpe, tmp_path):
    out = ok("prep", "hotpotqa", "--train", write(tmp_path / "train.json", TRAIN), "--test",
             write(tmp_path / "test_fullwiki.json", TEST), *tokenizer(bpe), "--out", tmp_path / "out")  # fmt: skip
    data = tmp_path / "out"
    # Only the model's inputs: no label file, and rows without gold.
    inputs = {f"test.{name}.{ext}" for name in ("tokens", "offsets") for ext in ("bin", "idx")}
    assert {p.name for p in data.glob("test.*")} == inputs | {"test.examples.jsonl"}
    assert [sorted(r) for r in rows(data, "test")] == [["_id", "context", "sentence_counts", "titles"]] * 2
    assert [r["titles"] for r in rows(data, "test")] == [[t for t, _ in r["context"]] for r in TEST]
    assert len(read(data, "test", "offsets")[0]) == 2 * len(read(data, "test", "tokens")[0])
    stats = split_stats(data, "test")
    assert stats["labelled"] is False and stats["examples"] == 2 and stats["empty_context"] == 1
    assert "skipped_facts" not in stats and "types" not in stats
    test_row = next(line for line in out.splitlines() if line.startswith("test "))
    assert test_row.split()[-4:] == ["-"] * 4
    assert "test: no answers or supporting facts (a test file)" in out and "--predictions FILE" in out


@pytest.mark.parametrize("flag", ["--train", "--valid", "--input"])
def test_a_file_without_labels_is_only_a_test_split(bpe, tmp_path, flag):
    test = write(tmp_path / "test_fullwiki.json", TEST)
    others = {"--valid": ["--train", write(tmp_path / "train.json", TRAIN)], "--input": ["--valid-fraction", 0]}
    others = others.get(flag, [])
    err = fails("prep", "hotpotqa", *others, flag, test, *tokenizer(bpe), "--out", tmp_path / "out")
    assert (
        f"{flag}: {test} has no 'answer' or 'supporting_facts'" in err and "give a file without them as --test" in err
    )
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "records, message",
    [
        (TRAIN + TEST[:1], f"record 2 (_id '{TEST[0]['_id']}'): no 'answer', 'supporting_facts' key, but record 0 has"),
        (TEST + TRAIN[:1], f"record 2 (_id '{TRAIN[0]['_id']}'): has 'answer', but record 0 has neither"),
    ],
)
def test_a_file_that_labels_some_records_only_is_named(bpe, tmp_path, records, message):
    err = fails("prep", "hotpotqa", "--test", write(tmp_path / "mixed.json", records), *tokenizer(bpe), "--out",
                tmp_path / "out")  # fmt: skip
    assert message in err and "labels on every record (train, dev) or on none (test)" in err, err


def test_a_malformed_fact_is_still_an_error(bpe, tmp_path):
    records = json.loads(json.dumps(TRAIN))
    records[0]["supporting_facts"].append(["Arthur's Magazine", "1"])
    err = fails("prep", "hotpotqa", "--train", write(tmp_path / "t.json", records), *tokenizer(bpe), "--out",
                tmp_path / "out")  # fmt: skip
    assert "record 0" in err and "supporting fact [\"Arthur's Magazine\", '1'] is not [title, sentence index]" in err
