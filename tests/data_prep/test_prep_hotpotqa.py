"""``prep hotpotqa`` on small HotpotQA-format records written here, with a BPE trained here:
the sequence layout, the labels and the answer spans read back with fairseq's loader and
checked against the records' text; bad records, truncation, and the evidence filter."""

import copy
import json

import numpy as np
import pytest
from helpers import fails, ok

from data_prep.gpt2_bpe import train_bpe
from longformer_fs.conventions import BOS, HOTPOTQA_SYMBOLS, NUM_SPECIALS

RECORDS = [
    {
        "_id": "5a8b57f25542995d1e6f1371",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "context": [
            ["Ed Wood (film)", ["Ed Wood is a 1994 American biographical film.", " It was directed by Tim Burton."]],
            ["Scott Derrickson", ["Scott Derrickson is an American director.", " He lives in Los Angeles."]],
            ["Woodson, Arkansas", ["Woodson is a census-designated place."]],
        ],
        "supporting_facts": [["Scott Derrickson", 0], ["Ed Wood (film)", 0]],
    },
    {
        "_id": "5a8c7595554299585d9e36b6",
        "question": "What government position was held by the woman who portrayed Corliss Archer?",
        "answer": "Chief of Protocol",
        "type": "bridge",
        "level": "medium",
        "context": [
            ["Kiss and Tell (1945 film)", ["Kiss and Tell is a comedy starring Shirley Temple as Corliss Archer."]],
            ["Shirley Temple", ["Shirley Temple was an American actress.", " She served as Chief of Protocol.",
                                " Later, the Chief of Protocol post went to others."]],
            ["Protocol (film)", ["Protocol is a film; its hero becomes Chief of Protocol."]],
        ],
        "supporting_facts": [["Kiss and Tell (1945 film)", 0], ["Shirley Temple", 1]],
    },
]  # fmt: skip


def write(path, records):
    path.write_text(json.dumps(records))
    return path


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hotpot_bpe")
    texts = [r["question"] + " " + " ".join(t + " " + " ".join(s) for t, s in r["context"]) for r in RECORDS]
    train_bpe(texts * 20, tmp, 400)
    return tmp


def prep(bpe, out, *extra):
    return ok("prep", "hotpotqa", *extra, "--encoder-json", bpe / "encoder.json", "--vocab-bpe", bpe / "vocab.bpe",
              "--dict", bpe / "dict.txt", "--out", out)  # fmt: skip


def read(data, split, name):
    from fairseq.data import data_utils

    return data_utils.load_indexed_dataset(str(data / f"{split}.{name}"), None, "mmap")


def test_layout_labels_and_answer_spans(bpe, tmp_path):
    from longformer_fs.tokenization import SubwordSpec

    prep(bpe, tmp_path / "out", "--train", write(tmp_path / "train.json", RECORDS), "--max-tokens", "4096")
    dict_lines = (tmp_path / "out" / "dict.txt").read_text().splitlines()
    base = len((bpe / "dict.txt").read_text().splitlines())
    assert dict_lines[base:] == [f"{s} 1" for s in HOTPOTQA_SYMBOLS]
    ids = {s: NUM_SPECIALS + base + i for i, s in enumerate(HOTPOTQA_SYMBOLS)}
    manifest = json.loads((tmp_path / "out" / "prep.json").read_text())
    assert manifest["kind"] == "hotpotqa" and manifest["splits"]["train"]["examples"] == 2
    examples = [json.loads(x) for x in (tmp_path / "out" / "train.examples.jsonl").read_text().splitlines()]
    encoder = SubwordSpec.gpt2(bpe / "encoder.json", bpe / "vocab.bpe", bpe / "dict.txt").load()
    tokens, offsets = read(tmp_path / "out", "train", "tokens"), read(tmp_path / "out", "train", "offsets")
    for i, record in enumerate(RECORDS):
        # The layout, rebuilt here piece by piece from the record.
        expected = [BOS, ids["[q]"], *encoder.encode([" " + record["question"]])[0], ids["[/q]"]]
        for title, sentences in record["context"]:
            expected += [ids["[p]"], *encoder.encode([" " + title])[0]]
            for sentence in sentences:
                expected += [ids["[s]"], *encoder.encode([" " + sentence])[0]]
        assert tokens[i].tolist() == expected
        ex = examples[i]
        assert ex["_id"] == record["_id"] and ex["supporting_facts"] == record["supporting_facts"]
        assert ex["titles"] == [t for t, _ in record["context"]]
        assert ex["sentence_counts"] == [len(s) for _, s in record["context"]]
        assert ex["context"] == "".join(" " + s for _, ss in record["context"] for s in ss)
        # Every sentence token's characters lie in its sentence; markers and titles have none.
        chars = offsets[i].view(-1, 2).numpy()
        text_tokens = chars[:, 0] >= 0
        markers = np.isin(tokens[i].numpy(), list(ids.values()))
        assert not (text_tokens & markers).any() and text_tokens.sum() < len(chars)
        facts = {tuple(f) for f in record["supporting_facts"]}
        assert read(tmp_path / "out", "train", "paragraphs")[i].tolist() == [
            int(any(t == f[0] for f in facts)) for t, _ in record["context"]
        ]
        assert read(tmp_path / "out", "train", "sentences")[i].tolist() == [
            int((t, k) in facts) for t, ss in record["context"] for k in range(len(ss))
        ]
    assert [int(read(tmp_path / "out", "train", "qtype")[i][0]) for i in range(2)] == [1, 0]  # yes, span
    # The yes/no question has no span; the span question's gold spans are the answer's
    # occurrences in its supporting sentence only (not the later, non-supporting ones).
    assert read(tmp_path / "out", "train", "starts")[0].tolist() == [-1]
    starts, ends = read(tmp_path / "out", "train", "starts")[1], read(tmp_path / "out", "train", "ends")[1]
    chars = offsets[1].view(-1, 2).numpy()
    context = examples[1]["context"]
    spans = [context[chars[s, 0] : chars[e, 1]] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert spans == ["Chief of Protocol"]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())["splits"]["train"]
    assert stats["truncated"] == 0 and stats["types"] == {"span": 1, "yes": 1, "no": 0}


def test_truncation_is_counted_and_cuts_the_labels(bpe, tmp_path):
    out = prep(bpe, tmp_path / "out", "--train", write(tmp_path / "t.json", RECORDS), "--max-tokens", "40")
    assert "cut at 40" in out
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())["splits"]["train"]
    assert stats["truncated"] == 2 and stats["longest"] == 40
    p_id = NUM_SPECIALS + len((bpe / "dict.txt").read_text().splitlines()) + 2
    examples = [json.loads(x) for x in (tmp_path / "out" / "train.examples.jsonl").read_text().splitlines()]
    for i in range(2):
        tokens = read(tmp_path / "out", "train", "tokens")[i]
        markers = int((tokens == p_id).sum()), int((tokens == p_id + 1).sum())
        assert len(tokens) == 40
        assert markers == (len(examples[i]["titles"]), sum(examples[i]["sentence_counts"]))
        assert len(read(tmp_path / "out", "train", "paragraphs")[i]) == markers[0] < 3
        assert len(read(tmp_path / "out", "train", "sentences")[i]) == markers[1]
    # The span question's answer sits past token 40: lost, and counted so.
    assert stats["answer_lost_to_truncation"] == 1 and read(tmp_path / "out", "train", "starts")[1].tolist() == [-1]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("context"), "no 'context' key"),
        (lambda r: r["context"].append(["Title only"]), "context[3] is not [title, [sentence, ...]]"),
        (lambda r: r.update(answer=None), "'answer' is NoneType"),
    ],
)
def test_bad_records_are_named(bpe, tmp_path, change, message):
    records = copy.deepcopy(RECORDS)
    change(records[1])
    err = fails("prep", "hotpotqa", "--train", write(tmp_path / "bad.json", records), "--encoder-json",
                bpe / "encoder.json", "--vocab-bpe", bpe / "vocab.bpe", "--dict", bpe / "dict.txt",
                "--out", tmp_path / "out")  # fmt: skip
    assert "record 1" in err and "5a8c7595554299585d9e36b6" in err and message in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_duplicate_ids_and_a_question_without_room(bpe, tmp_path):
    err = fails("prep", "hotpotqa", "--train", write(tmp_path / "d.json", [RECORDS[0], RECORDS[0]]),
                "--encoder-json", bpe / "encoder.json", "--vocab-bpe", bpe / "vocab.bpe", "--dict",
                bpe / "dict.txt", "--out", tmp_path / "out")  # fmt: skip
    assert "occurs twice" in err and RECORDS[0]["_id"] in err
    err = fails("prep", "hotpotqa", "--train", write(tmp_path / "t.json", RECORDS), "--max-tokens", "8",
                "--encoder-json", bpe / "encoder.json", "--vocab-bpe", bpe / "vocab.bpe", "--dict",
                bpe / "dict.txt", "--out", tmp_path / "out")  # fmt: skip
    assert "leaves no room for a paragraph" in err and RECORDS[0]["_id"] in err


def test_evidence_keeps_the_listed_paragraphs_and_the_gold_record(bpe, tmp_path):
    evidence = {RECORDS[0]["_id"]: ["Scott Derrickson"], RECORDS[1]["_id"]: ["Protocol (film)", "Shirley Temple"]}
    (tmp_path / "ev.json").write_text(json.dumps(evidence))
    train = write(tmp_path / "t.json", RECORDS)
    prep(bpe, tmp_path / "out", "--train", train, "--evidence", tmp_path / "ev.json")
    examples = [json.loads(x) for x in (tmp_path / "out" / "train.examples.jsonl").read_text().splitlines()]
    assert [e["titles"] for e in examples] == [["Scott Derrickson"], ["Shirley Temple", "Protocol (film)"]]
    assert [e["sentence_counts"] for e in examples] == [[2], [3, 1]]
    assert examples[1]["supporting_facts"] == RECORDS[1]["supporting_facts"]  # scored against the full gold
    assert read(tmp_path / "out", "train", "paragraphs")[1].tolist() == [1, 0]
    (tmp_path / "ev2.json").write_text(json.dumps({RECORDS[0]["_id"]: ["Scott Derrickson"]}))
    err = fails("prep", "hotpotqa", "--train", train, "--evidence", tmp_path / "ev2.json", "--encoder-json",
                bpe / "encoder.json", "--vocab-bpe", bpe / "vocab.bpe", "--dict", bpe / "dict.txt",
                "--out", tmp_path / "out2")  # fmt: skip
    assert "no paragraphs listed" in err and RECORDS[1]["_id"] in err
