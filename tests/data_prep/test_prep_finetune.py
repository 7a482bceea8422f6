"""``prep classification``, ``prep qa`` and ``prep wikihop`` on tiny inputs built here,
with a GPT-2-style BPE trained here; outputs read back with fairseq's own loaders."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from data_prep.classification import ClassificationConfig, prepare_classification
from data_prep.fairseq_dataset import PrepError
from data_prep.gpt2_bpe import train_bpe
from data_prep.qa import QaPrepConfig, prepare_qa
from data_prep.qa_sources import normalize_answer
from data_prep.wikihop import WikihopConfig, extend_dictionary, prepare_wikihop
from longformer_fs import cli
from longformer_fs.conventions import NUM_SPECIALS, WIKIHOP_SYMBOLS
from longformer_fs.tokenization import SubwordSpec

# ---------------------------------------------------------------- inputs

WORDS = "window attention band token kernel layer global local sparse dense long document model".split()


def documents(seed, n, words=30):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, words)) + "." for _ in range(n)]


BEATLES = (
    "The Beatles were an English rock band formed in Liverpool. The band recorded Abbey Road.\n"
    'Many fans still shout THE BEATLES! and write "beatles" in print.\n'
    "Sgt. Pepper's Lonely Hearts Club Band was released by the Beatles in 1967."
)
FILLER = "The river runs past the old mill and the green field. "
LONG_PAGE = FILLER * 6 + "The hidden key lies under the blue mat. " + FILLER * 6 + "Look under the Blue Mat again."
NYC = "New York City is large. Its subway never sleeps."

QUESTIONS = {
    "band": ("Which band recorded Abbey Road?", ["The Beatles", "Beatles"], "The_Beatles.txt"),
    "album": ("Which album came out in 1967?", ["SGT PEPPER'S LONELY HEARTS CLUB BAND"], "The_Beatles.txt"),
    "mona": ("Who painted the Mona Lisa?", ["Leonardo da Vinci"], "The_Beatles.txt"),
    "key": ("Where is the hidden key?", ["under the blue mat"], "Long_page.txt"),
    "city": ("Which city has a subway that never sleeps?", ["new_york_city"], "New_York_City.txt"),
}
PAGES = {"The_Beatles.txt": BEATLES, "Long_page.txt": LONG_PAGE, "New_York_City.txt": NYC}

SQUAD_CONTEXT = "Liverpool is a city in England. The Beatles came from Liverpool, a port."
WIKIHOP = [
    {
        "id": "WH_train_0",
        "query": "country_of_citizenship thomas of brotherton",
        "answer": "england",
        "candidates": ["france", "england", "scotland"],
        "supports": ["Thomas of Brotherton was a son of Edward I of England.", "England is a country in Europe."],
    },
    {
        "id": "WH_train_1",
        "query": "located_in_the_administrative_territorial_entity liverpool",
        "answer": "merseyside",
        "candidates": ["lancashire", "merseyside"],
        "supports": ["Liverpool is a city in Merseyside.", "Merseyside is a county.", "Lancashire is next to it."],
    },
]
CLASS_TRAIN = [(t, lab) for t, lab in zip(documents(0, 9), ["left", "right", "center"] * 3, strict=True)]
CLASS_VALID = [(t, lab) for t, lab in zip(documents(1, 3), ["right", "left", "left"], strict=True)]
CLASS_TEST = [(t, lab) for t, lab in zip(documents(2, 2), ["center", "left"], strict=True)]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    texts = [t for t, _ in CLASS_TRAIN + CLASS_VALID + CLASS_TEST] + list(PAGES.values()) + [SQUAD_CONTEXT]
    texts += [q for q, _, _ in QUESTIONS.values()]
    texts += [" ".join([e["query"], *e["candidates"], *e["supports"]]) for e in WIKIHOP]
    tokenizer = train_bpe(texts * 2, d, 400)
    symbols = [int(line.split()[0]) for line in (d / "dict.txt").read_text().splitlines()]
    return d, tokenizer, symbols


def spec(d: Path) -> SubwordSpec:
    return SubwordSpec.gpt2(d / "encoder.json", d / "vocab.bpe", d / "dict.txt")


def tokenizer_args(d: Path) -> list[str]:
    return [
        "--encoder-json",
        str(d / "encoder.json"),
        "--vocab-bpe",
        str(d / "vocab.bpe"),
        "--dict",
        str(d / "dict.txt"),
    ]


def decode(bpe, ids) -> str:
    _, tokenizer, symbols = bpe
    return tokenizer.decode([symbols[i - NUM_SPECIALS] for i in ids])


def load(prefix: Path) -> list[list[int]]:
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(str(prefix), None, "mmap")
    assert dataset is not None, prefix
    return [dataset[i].tolist() for i in range(len(dataset))]


def run_cli(argv, capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def mtimes(out: Path) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}


# ---------------------------------------------------------------- classification


def write_jsonl(path: Path, rows, text="text", label="label") -> Path:
    path.write_text("".join(json.dumps({text: t, label: lab}) + "\n" for t, lab in rows))
    return path


@pytest.fixture(scope="module")
def classification(bpe, tmp_path_factory):
    d = tmp_path_factory.mktemp("cls")
    files = {
        s: write_jsonl(d / f"{s}.jsonl", rows)
        for s, rows in (("train", CLASS_TRAIN), ("valid", CLASS_VALID), ("test", CLASS_TEST))
    }
    out = d / "out"
    result = prepare_classification(ClassificationConfig(spec(bpe[0]), files, report_length=20), out)
    return out, files, result


def test_classification_is_read_by_fairseq_sentence_prediction(bpe, classification):
    from fairseq.tasks.sentence_prediction import SentencePredictionConfig, SentencePredictionTask

    out, _, result = classification
    labels = sorted({lab for _, lab in CLASS_TRAIN})
    assert result["labels"] == labels == ["center", "left", "right"]
    assert (out / "label" / "dict.txt").read_text().split("\n")[:3] == ["0 3", "1 3", "2 3"]
    cfg = SentencePredictionConfig(
        data=str(out),
        num_classes=3,
        init_token=0,
        regression_target=False,
        classification_head_name="cls",
        seed=1,
        no_shuffle=True,
        max_positions=4096,
    )
    task = SentencePredictionTask.setup_task(cfg)
    for split, rows in (("train", CLASS_TRAIN), ("valid", CLASS_VALID), ("test", CLASS_TEST)):
        dataset = task.load_dataset(split)
        assert len(dataset) == len(rows)
        for i, (text, label) in enumerate(rows):
            sample = dataset[i]
            tokens = sample["net_input.src_tokens"].tolist()
            assert tokens[0] == 0 and tokens[-1] == 2  # <s> from init_token, </s> from the data
            assert decode(bpe, tokens[1:-1]) == text
            assert sample["target"].tolist() == [labels.index(label)]
    # Lengths count <s> + tokens + </s>; report_length 20 is below every document's length.
    lengths = [len(bpe[1].encode(t).ids) + 2 for t, _ in CLASS_TRAIN]
    tokens = result["splits"]["train"]["tokens"]
    assert tokens["max"] == max(lengths) and tokens["mean"] == pytest.approx(np.mean(lengths))
    assert tokens["over_report_length"] == sum(n > 20 for n in lengths)
    assert result["splits"]["valid"]["labels"] == {"left": 2, "right": 1}


def test_classification_tsv_input_split_by_seed(bpe, tmp_path):
    rows = [(t, i % 2 == 0) for i, t in enumerate(documents(3, 20, words=6))]
    tsv = tmp_path / "all.tsv"
    tsv.write_text("id\tlabel\tbody\n" + "".join(f"{i}\t{json.dumps(lab)}\t{t}\n" for i, (t, lab) in enumerate(rows)))
    made = []
    for name in ("a", "b"):
        cfg = ClassificationConfig(spec(bpe[0]), {}, tsv, (60, 20, 20), seed=7, text_field="body")
        result = prepare_classification(cfg, tmp_path / name, log=lambda *_: None)
        made.append(
            {s: [decode(bpe, item[:-1]) for item in load(tmp_path / name / "input0" / s)] for s in result["splits"]}
        )
    assert made[0] == made[1]  # the same seed, the same split
    assert [len(made[0][s]) for s in ("train", "valid", "test")] == [12, 4, 4]
    assert sorted(t for texts in made[0].values() for t in texts) == sorted(t for t, _ in rows)
    assert made[0]["train"] != [t for t, _ in rows[:12]]  # shuffled
    # TSV labels are strings: false/true, sorted; each label item is [4 + class, </s>].
    labels = dict(rows)
    for split, texts in made[0].items():
        items = load(tmp_path / "a" / "label" / split)
        assert items == [[NUM_SPECIALS + int(labels[t]), 2] for t in texts]
    assert (tmp_path / "a" / "label" / "dict.txt").read_text().split()[::2] == ["0", "1"]


def test_classification_integer_labels_sort_numerically(bpe, tmp_path):
    rows = list(zip(documents(4, 4, words=5), [10, 2, 2, 10], strict=True))
    files = {"train": write_jsonl(tmp_path / "train.jsonl", rows, label="y")}
    result = prepare_classification(
        ClassificationConfig(spec(bpe[0]), files, label_field="y"), tmp_path / "out", log=lambda *_: None
    )
    assert result["labels"] == ["2", "10"]
    assert [item[0] for item in load(tmp_path / "out" / "label" / "train")] == [5, 4, 4, 5]
    # JSON booleans are the labels false and true (true is class 1).
    files = {
        "train": write_jsonl(tmp_path / "bools.jsonl", zip(documents(5, 3, words=5), [True, False, True], strict=True))
    }
    result = prepare_classification(ClassificationConfig(spec(bpe[0]), files), tmp_path / "b", log=lambda *_: None)
    assert result["labels"] == ["false", "true"]
    assert [item[0] for item in load(tmp_path / "b" / "label" / "train")] == [5, 4, 5]


def test_classification_unknown_label_is_a_clear_error(bpe, classification, tmp_path, capsys):
    _, files, _ = classification
    bad = write_jsonl(tmp_path / "valid.jsonl", CLASS_VALID[:1] + [("some text", "sideways")])
    argv = ["prep", "classification", "--train", files["train"], "--valid", bad, "--out", tmp_path / "o"]
    code, _, err = run_cli(argv + tokenizer_args(bpe[0]), capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{bad}:2: label 'sideways' is not in the label dictionary (known: center, left, right)" in err
    # --labels fixes the order, and then a training label outside it is an error too.
    code, _, err = run_cli(
        argv[:4] + ["--labels", "left,right", "--out", tmp_path / "p"] + tokenizer_args(bpe[0]), capsys
    )
    assert code == 2 and "label 'center' is not in the label dictionary (known: left, right)" in err


def test_classification_rerun_is_a_no_op(bpe, classification, capsys):
    out, files, _ = classification
    before = mtimes(out)
    argv = ["prep", "classification", "--report-length", "20", "--out", out] + tokenizer_args(bpe[0])
    argv += [a for s, p in files.items() for a in (f"--{s}", p)]
    code, stdout, _ = run_cli(argv, capsys)
    assert code == 0 and "up to date" in stdout
    assert mtimes(out) == before


# ---------------------------------------------------------------- QA


def triviaqa_entry(qid):
    question, aliases, page = QUESTIONS[qid]
    return {
        "QuestionId": qid,
        "Question": question,
        "Answer": {
            "Aliases": aliases,
            "NormalizedAliases": [normalize_answer(a) for a in aliases],
            "Value": aliases[0],
        },
        "EntityPages": [{"DocSource": "TagMe", "Filename": page, "Title": page[:-4]}],
    }


@pytest.fixture(scope="module")
def triviaqa(tmp_path_factory):
    d = tmp_path_factory.mktemp("triviaqa")
    (d / "evidence" / "wikipedia").mkdir(parents=True)
    for name, text in PAGES.items():
        (d / "evidence" / "wikipedia" / name).write_text(text)
    for split, ids in (("train", ["band", "album", "mona", "key", "city"]), ("valid", ["band", "mona"])):
        (d / f"{split}.json").write_text(json.dumps({"Domain": "Wikipedia", "Data": [triviaqa_entry(q) for q in ids]}))
    return d


def qa_config(bpe, trivia, **kwargs):
    files = {"train": trivia / "train.json", "valid": trivia / "valid.json"}
    return QaPrepConfig(spec(bpe[0]), "triviaqa", files, trivia / "evidence", **kwargs)


def read_qa(out: Path, split: str) -> list[dict]:
    """Every window of a split with its items and the example it belongs to."""
    items = {name: load(out / f"{split}.{name}") for name in ("tokens", "starts", "ends", "offsets")}
    windows = [json.loads(line) for line in (out / f"{split}.windows.jsonl").read_text().splitlines()]
    examples = {e["id"]: e for e in map(json.loads, (out / f"{split}.examples.jsonl").read_text().splitlines())}
    assert len(windows) == len(items["tokens"])
    return [
        {
            **w,
            **{k: v[i] for k, v in items.items()},
            "offsets": np.reshape(items["offsets"][i], (-1, 2)),
            **examples[w["id"]],
        }
        for i, w in enumerate(windows)
    ]


def gold_chars(window) -> set[tuple[int, int]]:
    offsets = window["offsets"]
    assert len(window["starts"]) == len(window["ends"])
    return {(int(offsets[s][0]), int(offsets[e][1])) for s, e in zip(window["starts"], window["ends"], strict=True)}


@pytest.fixture(scope="module")
def qa_whole(bpe, triviaqa, tmp_path_factory):
    out = tmp_path_factory.mktemp("qa") / "whole"
    return out, prepare_qa(qa_config(bpe, triviaqa), out, log=lambda *_: None)


def test_qa_windows_decode_and_gold_spans_cover_every_alias_occurrence(bpe, qa_whole):
    out, result = qa_whole
    windows = {w["id"]: w for w in read_qa(out, "train")}
    assert set(windows) == {
        "band--The_Beatles.txt",
        "album--The_Beatles.txt",
        "key--Long_page.txt",
        "city--New_York_City.txt",
    }
    for w in windows.values():
        tokens = w["tokens"]
        q = w["question_tokens"]
        assert tokens[0] == 0 and tokens[q + 1] == 2 and tokens[-1] == 2 and len(tokens) <= 4096
        assert decode(bpe, tokens[1 : q + 1]) == w["question"]
        assert decode(bpe, tokens[q + 2 : -1]) == w["context"]  # short pages: nothing truncated
        assert (w["offsets"][: q + 2] == -1).all() and (w["offsets"][-1] == -1).all()
        for token, (start, end) in zip(tokens[q + 2 : -1], w["offsets"][q + 2 : -1], strict=True):
            assert w["context"][start:end] == decode(bpe, [token]).lstrip(" ")
    # Every occurrence, whatever its case or punctuation, found where it is in the original text.
    beatles = {(m.start(), m.end()) for m in re.finditer(r"(?i)beatles", BEATLES)}
    assert len(beatles) == 4 and gold_chars(windows["band--The_Beatles.txt"]) == beatles
    album = BEATLES.index("Sgt. Pepper's")
    album_span = (album, BEATLES.index("Club Band") + len("Club Band"))
    assert gold_chars(windows["album--The_Beatles.txt"]) == {album_span}
    assert BEATLES[slice(*album_span)] == "Sgt. Pepper's Lonely Hearts Club Band"
    assert {LONG_PAGE[a:b] for a, b in gold_chars(windows["key--Long_page.txt"])} == {
        "under the blue mat",
        "under the Blue Mat",
    }
    assert [NYC[a:b] for a, b in gold_chars(windows["city--New_York_City.txt"])] == ["New York City"]
    train = result["splits"]["train"]
    assert train["examples"] == 5 and train["skipped"] == 1 and train["answer_not_in_text"] == 1
    assert train["occurrences"] == 4 + 1 + 2 + 1 and train["truncated_documents"] == 0


def test_qa_unanswerable_is_skipped_in_train_and_kept_in_valid(qa_whole):
    out, result = qa_whole
    train = [json.loads(line)["id"] for line in (out / "train.examples.jsonl").read_text().splitlines()]
    assert "mona--The_Beatles.txt" not in train
    valid = {w["id"]: w for w in read_qa(out, "valid")}
    assert set(valid) == {"band--The_Beatles.txt", "mona--The_Beatles.txt"}
    assert valid["mona--The_Beatles.txt"]["starts"] == [] and valid["mona--The_Beatles.txt"]["ends"] == []
    assert valid["mona--The_Beatles.txt"]["answers"] == ["Leonardo da Vinci"]
    assert result["splits"]["valid"]["skipped"] == 0 and result["splits"]["valid"]["answer_not_in_text"] == 1


def test_qa_doc_stride_windows_overlap_fit_and_cover_the_document(bpe, triviaqa, tmp_path):
    max_tokens, stride = 40, 12
    out = tmp_path / "stride"
    result = prepare_qa(qa_config(bpe, triviaqa, max_tokens=max_tokens, doc_stride=stride), out, log=lambda *_: None)
    windows = [w for w in read_qa(out, "train") if w["id"] == "key--Long_page.txt"]
    assert [w["window"] for w in windows] == list(range(len(windows))) and len(windows) > 3
    full = bpe[1].encode(LONG_PAGE).offsets
    covered = []
    for w in windows:
        assert len(w["tokens"]) <= max_tokens
        doc = [tuple(o) for o in w["offsets"][w["question_tokens"] + 2 : -1].tolist()]
        covered.append(doc)
        # Gold spans inside a window cover an alias exactly; none is cut by the window's edge.
        for a, b in gold_chars(w):
            assert normalize_answer(LONG_PAGE[a:b]) == "under blue mat"
    room = max_tokens - windows[0]["question_tokens"] - 3
    for k in range(1, len(covered)):
        assert covered[k][0] == covered[k - 1][stride]  # starts `stride` tokens later: they overlap
        assert len(covered[k - 1]) == room
    assert sorted(set(sum(covered, []))) == [tuple(o) for o in full]  # no token left out
    found = set().union(*(gold_chars(w) for w in windows))
    assert {LONG_PAGE[a:b] for a, b in found} == {"under the blue mat", "under the Blue Mat"}
    assert result["splits"]["train"]["truncated_documents"] == 0


def planted_spans(qid: str) -> set[tuple[int, int]]:
    """Where the answers of QUESTIONS[qid] were written into its page, found by plain regexes."""
    page = PAGES[QUESTIONS[qid][2]]
    pattern = {
        "band": r"(?i)beatles",
        "album": r"Sgt\. Pepper's Lonely Hearts Club Band",
        "mona": r"Leonardo",
        "key": r"(?i)under the blue mat",
        "city": r"New York City",
    }[qid]
    return {(m.start(), m.end()) for m in re.finditer(pattern, page)}


def test_qa_truncation_keeps_the_answers_in_the_first_window_only(bpe, triviaqa, tmp_path):
    out = tmp_path / "cut"
    result = prepare_qa(qa_config(bpe, triviaqa, max_tokens=40), out, log=lambda *_: None)
    windows = {w["id"]: w for w in read_qa(out, "train")}
    expected_ids, truncated, cut_away = set(), 0, 0
    for qid, (question, _, page) in QUESTIONS.items():
        room = 40 - len(bpe[1].encode(question).ids) - 3
        offsets = bpe[1].encode(PAGES[page]).offsets
        truncated += len(offsets) > room
        kept_until = offsets[min(room, len(offsets)) - 1][1]
        inside = {span for span in planted_spans(qid) if span[1] <= kept_until}
        cut_away += bool(planted_spans(qid)) and not inside
        if inside:
            expected_ids.add(f"{qid}--{page}")
            assert gold_chars(windows[f"{qid}--{page}"]) == inside
    assert set(windows) == expected_ids and all(len(w["tokens"]) <= 40 for w in windows.values())
    assert cut_away >= 1 and truncated >= 2  # the inputs exercise both
    train = result["splits"]["train"]
    assert train["answer_in_no_window"] == cut_away and train["truncated_documents"] == truncated
    assert train["skipped"] == cut_away + 1  # and the question whose answer is nowhere


def test_squad_given_spans(bpe, tmp_path):
    liverpool = [m.start() for m in re.finditer("Liverpool", SQUAD_CONTEXT)]
    qas = [
        {
            "id": "q1",
            "question": "Where did the Beatles come from?",
            "answers": [{"text": "Liverpool", "answer_start": liverpool[1]}],
        },
        {
            "id": "q2",
            "question": "Which city is in England?",
            "answers": [{"text": "Liverpool", "answer_start": s} for s in liverpool]
            + [{"text": "Liverpool is a city", "answer_start": 0}],
        },
        {"id": "q3", "question": "Who sang?", "answers": [], "is_impossible": True},
    ]
    (tmp_path / "dev.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": SQUAD_CONTEXT, "qas": qas}]}]}))
    # First with a train split too; the second run, without it, must not leave its files behind.
    both = QaPrepConfig(spec(bpe[0]), "squad", {"train": tmp_path / "dev.json", "valid": tmp_path / "dev.json"})
    assert prepare_qa(both, tmp_path / "out", log=lambda *_: None)["splits"]["train"]["skipped"] == 1  # q3
    cfg = QaPrepConfig(spec(bpe[0]), "squad", {"valid": tmp_path / "dev.json"})
    prepare_qa(cfg, tmp_path / "out", log=lambda *_: None)
    assert not list((tmp_path / "out").glob("train.*"))
    windows = {w["id"]: w for w in read_qa(tmp_path / "out", "valid")}
    assert gold_chars(windows["q1"]) == {(liverpool[1], liverpool[1] + 9)}
    assert gold_chars(windows["q2"]) == {(s, s + 9) for s in liverpool} | {(0, 19)}
    assert windows["q2"]["answers"] == ["Liverpool", "Liverpool is a city"]
    assert windows["q3"]["starts"] == [] and windows["q3"]["answers"] == []


def test_qa_clear_errors(bpe, triviaqa, tmp_path, capsys):
    bad = json.loads((triviaqa / "train.json").read_text())
    del bad["Data"][1]["Question"]
    (tmp_path / "no_question.json").write_text(json.dumps(bad))
    bad["Data"][1]["Question"] = "?"
    bad["Data"][2]["EntityPages"][0]["Filename"] = "Missing.txt"
    (tmp_path / "no_page.json").write_text(json.dumps(bad))
    base = ["prep", "qa", "--format", "triviaqa", "--evidence", triviaqa / "evidence"] + tokenizer_args(bpe[0])

    code, _, err = run_cli(base + ["--train", tmp_path / "no_question.json", "--out", tmp_path / "a"], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{tmp_path / 'no_question.json'}: Data[1] (QuestionId album): no 'Question' key" in err
    code, _, err = run_cli(base + ["--train", tmp_path / "no_page.json", "--out", tmp_path / "b"], capsys)
    assert (
        code == 2
        and "Data[2] (QuestionId mona): EntityPages[0]: evidence file" in err
        and "Missing.txt not found" in err
    )
    # A question of n tokens needs n + 3 + 1 for one document token.
    n = len(bpe[1].encode(QUESTIONS["city"][0]).ids)
    code, _, err = run_cli(
        base + ["--train", triviaqa / "train.json", "--max-tokens", n + 3, "--out", tmp_path / "c"], capsys
    )
    assert code == 2 and f"example 'city--New_York_City.txt': the question has {n} tokens" in err
    assert f"no room for the document in --max-tokens {n + 3}" in err
    assert not (tmp_path / "c" / "prep.json").exists()


def test_qa_rerun_is_a_no_op(bpe, triviaqa, qa_whole, capsys):
    out, _ = qa_whole
    before = mtimes(out)
    argv = ["prep", "qa", "--format", "triviaqa", "--evidence", triviaqa / "evidence", "--out", out]
    argv += ["--train", triviaqa / "train.json", "--valid", triviaqa / "valid.json"] + tokenizer_args(bpe[0])
    code, stdout, _ = run_cli(argv, capsys)
    assert code == 0 and "up to date" in stdout and mtimes(out) == before


# ---------------------------------------------------------------- WikiHop

WIKIHOP_MAX = 64  # the tiny BPE makes long prefixes; long enough for them, shorter than the examples


@pytest.fixture(scope="module")
def wikihop(bpe, tmp_path_factory):
    d = tmp_path_factory.mktemp("wikihop")
    (d / "train.json").write_text(json.dumps(WIKIHOP))
    out = d / "out"
    result = prepare_wikihop(
        WikihopConfig(spec(bpe[0]), {"train": d / "train.json"}, max_tokens=WIKIHOP_MAX), out, log=lambda *_: None
    )
    return d, out, result


def split_at(items: list[int], separators: set[int]) -> list[list[int]]:
    pieces, current = [], []
    for token in items:
        if token in separators:
            pieces.append(current)
            current = []
        else:
            current.append(token)
    return pieces + [current]


def test_wikihop_prefix_context_label_and_dictionary(bpe, wikihop):
    d, out, result = wikihop
    model_dict = (bpe[0] / "dict.txt").read_text().splitlines()
    lines = (out / "dict.txt").read_text().splitlines()
    assert lines == model_dict + [f"{s} 1" for s in WIKIHOP_SYMBOLS]
    ids = {s: NUM_SPECIALS + len(model_dict) + i for i, s in enumerate(WIKIHOP_SYMBOLS)}
    assert result["symbols"] == ids
    q, q_end, ent, ent_end = (ids[s] for s in WIKIHOP_SYMBOLS)
    prefixes, contexts, labels = load(out / "train.prefix"), load(out / "train.context"), load(out / "train.label")
    questions = [
        "country of citizenship thomas of brotherton",
        "located in the administrative territorial entity liverpool",
    ]
    for example, question, prefix, context, label in zip(WIKIHOP, questions, prefixes, contexts, labels, strict=True):
        assert prefix[:2] == [0, q] and prefix[-1] == ent_end and 2 not in prefix
        body = prefix[2:]
        # Every piece is encoded as running text reads it, after a space: a candidate's pieces
        # are then those of its mentions inside the supports.
        assert decode(bpe, body[: body.index(q_end)]) == " " + question
        candidates = split_at(body[body.index(q_end) + 1 :], {ent, ent_end})
        assert [decode(bpe, c) for c in candidates if c] == [" " + c for c in example["candidates"]]
        assert context[0] == 2 and context[-1] == 2
        assert [decode(bpe, s) for s in split_at(context[1:-1], {2})] == [" " + s for s in example["supports"]]
        assert label == [example["candidates"].index(example["answer"])]
    listed = [json.loads(line) for line in (out / "train.examples.jsonl").read_text().splitlines()]
    assert listed == [{"id": e["id"], "candidates": e["candidates"], "answer": e["answer"]} for e in WIKIHOP]
    # Chunks of (WIKIHOP_MAX - prefix) context tokens, counted from the items read back.
    expected = {}
    for prefix, context in zip(prefixes, contexts, strict=True):
        chunks = math.ceil(len(context) / (WIKIHOP_MAX - len(prefix)))
        expected[str(chunks)] = expected.get(str(chunks), 0) + 1
    stats = result["splits"]["train"]
    assert stats["chunks"] == expected and stats["over_max_tokens"] == sum(
        len(p) + len(c) > WIKIHOP_MAX for p, c in zip(prefixes, contexts, strict=True)
    )
    assert stats["over_max_tokens"] >= 1


def test_wikihop_symbols_already_in_the_dictionary_keep_their_ids(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("50 9\n[ent] 3\n51 2\n")
    ids, size = extend_dictionary(path)
    assert path.read_text().splitlines() == ["50 9", "[ent] 3", "51 2", "[q] 1", "[/q] 1", "[/ent] 1"]
    assert ids == {"[q]": 7, "[/q]": 8, "[ent]": 5, "[/ent]": 9} and size == 10
    assert extend_dictionary(path) == (ids, size)  # nothing more to add


def test_wikihop_clear_errors_and_no_op_rerun(bpe, wikihop, tmp_path, capsys):
    d, out, _ = wikihop
    base = ["prep", "wikihop"] + tokenizer_args(bpe[0])
    wrong = [dict(WIKIHOP[0]), {**WIKIHOP[1], "answer": "cheshire"}]
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    code, _, err = run_cli(base + ["--train", tmp_path / "wrong.json", "--out", tmp_path / "a"], capsys)
    assert code == 2 and "Traceback" not in err
    assert (
        f"{tmp_path / 'wrong.json'}: entry 1 (id 'WH_train_1'): answer 'cheshire' is not among its 2 candidates" in err
    )
    missing = [{k: v for k, v in WIKIHOP[0].items() if k != "supports"}]
    (tmp_path / "missing.json").write_text(json.dumps(missing))
    code, _, err = run_cli(base + ["--train", tmp_path / "missing.json", "--out", tmp_path / "b"], capsys)
    assert code == 2 and "entry 0: no 'supports' key" in err
    before = mtimes(out)
    code, stdout, _ = run_cli(base + ["--train", d / "train.json", "--max-tokens", WIKIHOP_MAX, "--out", out], capsys)
    assert code == 0 and "up to date" in stdout and mtimes(out) == before


def test_prep_errors_raise_prep_error(bpe, tmp_path):
    """The library raises PrepError (a ValueError), never a KeyError or TypeError."""
    (tmp_path / "list.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": 3, "qas": []}]}]}))
    with pytest.raises(PrepError, match=r"data\[0\]\.paragraphs\[0\]: 'context' is int, expected str"):
        prepare_qa(QaPrepConfig(spec(bpe[0]), "squad", {"train": tmp_path / "list.json"}), tmp_path / "o")
