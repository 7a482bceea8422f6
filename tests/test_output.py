"""Every writer's output is all or nothing, and never over someone else's without ``--force``
(``longformer_fs/output.py``): each ``prep``, converter, exporter, the report, ``check``'s
records and the checkpoints a converter saves, with one fixture, killed between staging and
the first rename; ``export-hf`` finds the model's dictionary where the checkpoint says its
data was."""

import ast
import json
import os
import signal
import subprocess  # a process killed mid-write (SIGKILL) leaves nothing half written
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from conftest import bpe_args
from helpers import ROOT, assert_refused_in_one_line, fails, ok, unreadable_checkpoints
from releases import (
    write_aclimdb,
    write_arxiv_release,
    write_char_zip,
    write_conll_release,
    write_hotpotqa_release,
    write_triviaqa_release,
    write_wikihop_release,
)

from longformer_fs import output
from longformer_fs.output import OutputRefused, check, guarded_output, sources, staged, stamped_files


def snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_staged_output_moves_everything_in_or_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (out / "model.pt").write_text("old")
    with staged(out, "import-hf") as staging:
        (staging.dir / "model.pt").write_text("new")
        (staging.dir / "sub").mkdir()
        (staging.dir / "sub" / "a").write_text("a")
        staging.publish({"inputs": {}})
    assert snapshot(out) == {"import-hf.json": snapshot(out)["import-hf.json"], "keep.txt": b"mine",
                             "model.pt": b"new", "sub/a": b"a"}  # fmt: skip
    assert json.loads((out / "import-hf.json").read_text())["written"] == ["model.pt", "sub"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left

    before = snapshot(out)
    with pytest.raises(ValueError), staged(out, "import-hf") as staging:
        (staging.dir / "model.pt").write_text("half")
        raise ValueError("found late")
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    with pytest.raises(KeyboardInterrupt), staged(tmp_path / "new" / "deeper" / "out", "import-hf") as staging:
        (staging.dir / "model.pt").write_text("half")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the parents it made are gone too


def test_the_guard_lets_a_command_refresh_its_own_output_and_nothing_else(tmp_path):
    source, other = tmp_path / "model.bin", tmp_path / "other.bin"
    source.write_text("weights")
    other.write_text("weights")
    out = tmp_path / "out"
    check(out, "import-hf", sources(source))  # absent
    with guarded_output(out, "import-hf", {"inputs": sources(source)}) as staging:
        (staging / "model.pt").write_text("1")
    source.write_text("weights, edited")  # the same file, edited: still this output's source
    check(out, "import-hf", sources(source))
    check(out, "import-hf", sources(source, other))  # a file added (a split): still from its sources
    for command, inputs in (("import-hf", sources(other)), ("export-hf", sources(source))):
        with pytest.raises(OutputRefused, match=rf"already holds an import of {tmp_path} \(import-hf\).*--force"):
            check(out, command, inputs)
        check(out, command, inputs, force=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefused, match=r"did not write \(notes.txt\).*--force"):
        check(tmp_path / "mine", "import-hf", sources(source))
    inside = tmp_path / "mine" / "text8.zip"  # an input kept in the output directory (a download)
    inside.write_text("zip")
    (tmp_path / "mine" / "notes.txt").unlink()
    check(tmp_path / "mine", "prep", {"zip": output.stamp(inside)})
    with pytest.raises(OutputRefused, match="is a file"):
        check(source, "import-hf", sources(other), force=True)
    # guarded_file's staging is beside the file; a failed write leaves nothing.
    with pytest.raises(ValueError), output.guarded_file(tmp_path / "new" / "model.onnx") as target:
        target.write_text("half")
        raise ValueError
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------- every writer, killed


class Killed(BaseException):
    """A SIGKILL, as the test models it: nothing after it runs, no handler, no cleanup."""


@dataclass
class Writer:
    """One command that writes: ``run(world, out, *extra)`` runs it, returning what it printed."""

    name: str
    run: Callable[..., object]
    # Whether its output is one file (else a directory with a record).
    file: bool = False
    # Whether each run costs seconds (a trace): then the previous output is another file,
    # which the killed write replaces by --force, and no rerun follows (the refresh of its
    # own output is tests/export/test_export_onnx.py's).
    slow: bool = False


def _prep(*args) -> Callable:
    return lambda world, out, *extra: ok("prep", *[a(world) if callable(a) else a for a in args], *extra,
                                         *bpe_args(world.gpt2), "--out", out)  # fmt: skip


def _report(world, out, *extra):
    from longformer_fs.report.document import write_report

    out.mkdir(parents=True, exist_ok=True)
    return write_report(out, {"gpu": "none"}, {"toy": True, "device": "cpu", "budget": 60}, [], {})


def _records(world, out, *extra):
    from longformer_fs.verification import records

    os.environ["LONGFORMER_FS_CACHE"] = str(out.parent / "cache")
    try:
        return records.save_record("cpu x86_64", "build 1", {"passed": True, "cases": 1, "failures": []})
    finally:
        del os.environ["LONGFORMER_FS_CACHE"]


def _checkpoint(world, out, *extra):
    from longformer_fs.fairseq_format import save_start_checkpoint

    return save_start_checkpoint({"args": None}, {"w": torch.ones(2)}, out)


WRITERS = [
    Writer(
        "prep text8",
        lambda world, out, *extra: ok(
            "prep",
            "text8",
            "--zip",
            world.text8,
            "--skip-checksum",
            "--split-sizes",
            "3000,400,425",
            "--out",
            out,
            *extra,
        ),
    ),  # fmt: skip
    Writer("prep docs", _prep("docs", "--source", lambda w: f"docs=txt:{w.root / 'docs'}", "--workers", "1")),
    Writer(
        "prep summarization",
        _prep("summarization", "--format", "arxiv", "--train", lambda w: w.arxiv / "train.txt", "--workers", "1"),
    ),  # fmt: skip
    Writer("prep classification", _prep("classification", "--train", lambda w: w.imdb / "train")),
    Writer(
        "prep qa",
        _prep(
            "qa",
            "--format",
            "triviaqa",
            "--evidence",
            lambda w: w.triviaqa / "evidence",
            "--valid",
            lambda w: w.triviaqa / "qa" / "wikipedia-dev.json",
        ),
    ),  # fmt: skip
    Writer("prep wikihop", _prep("wikihop", "--train", lambda w: w.root / "qangaroo_v1.1" / "wikihop" / "train.json")),
    Writer("prep hotpotqa", _prep("hotpotqa", "--train", lambda w: w.hotpotqa / "hotpot_train_v1.1.json")),
    Writer("prep coref", _prep("coref", "--train", lambda w: w.conll / "train")),
    Writer("import-hf", lambda world, out, *extra: ok("import-hf", world.longformer_hub, "--out", out, *extra)),
    Writer(
        "convert-roberta",
        lambda world, out, *extra: ok(
            "convert-roberta", world.roberta_base, "--out", out, "--max-positions", "256", *extra
        ),
    ),  # fmt: skip
    Writer("convert-bart", lambda world, out, *extra: ok("convert-bart", world.bart_base, "--out", out, *extra)),
    Writer(
        "export-hf",
        lambda world, out, *extra: ok(
            "export-hf", world.converted / "model.pt", "--out", out, "--tokenizer", world.gpt2, *extra
        ),
    ),  # fmt: skip
    Writer(
        "export-onnx",
        lambda world, out, *extra: ok("export-onnx", world.converted / "model.pt", "--out", out, *extra),
        file=True,
        slow=True,
    ),  # fmt: skip
    Writer("report", _report, file=True),
    Writer("check records", _records, file=True),
    Writer("checkpoint save", _checkpoint, file=True),
]


@dataclass
class World:
    """Every writer's inputs, made once: the releases as they ship, and the models as released."""

    root: Path
    gpt2: Path
    roberta_base: Path
    bart_base: Path
    longformer_hub: Path
    converted: Path

    def __getattr__(self, name):
        return self.root / {"text8": "text8.zip", "arxiv": "arxiv", "imdb": "aclImdb", "triviaqa": "triviaqa",
                            "hotpotqa": "hotpotqa", "conll": "conll-2012/v4/data"}[name]  # fmt: skip


@pytest.fixture(scope="module")
def world(gpt2, roberta_base, bart_base, longformer_hub, converted, tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    write_char_zip(root / "text8.zip", "text8", b"the band of each token covers its neighbours " * 85)
    (root / "docs").mkdir()
    for i in range(12):
        (root / "docs" / f"{i}.txt").write_text(f"Document {i}. " + "Global tokens see the whole sequence. " * 8)
    write_arxiv_release(root)
    write_aclimdb(root / "aclImdb")
    (root / "triviaqa").mkdir()
    write_triviaqa_release(root / "triviaqa")
    write_wikihop_release(root)
    (root / "hotpotqa").mkdir()
    write_hotpotqa_release(root / "hotpotqa")
    write_conll_release(root)
    return World(root, gpt2, roberta_base, bart_base, longformer_hub, converted)


def staging(name: str) -> bool:
    """Whether a path (relative) lies in what :mod:`longformer_fs.output` stages."""
    return any(part.startswith(".") and part.endswith(output.PARTIAL) for part in Path(name).parts)


def killed_at_the_first_rename(monkeypatch, image: dict, around: Path):
    """Make the next write die at its first rename, keeping in ``image`` what a SIGKILL would
    leave under ``around`` there: the previous output, and the new one whole in its staging."""

    def kill(source, target):
        image.update(snapshot(around))
        raise Killed

    monkeypatch.setattr(output, "_move", kill)


@pytest.mark.parametrize("writer", WRITERS, ids=[w.name for w in WRITERS])
def test_a_write_killed_before_its_first_rename_leaves_the_previous_output_whole(writer, world, tmp_path, monkeypatch):
    """Each writer writes, is killed writing again (``--force``: a rerun of ``prep`` from the
    same inputs has nothing to do), and runs again: the kill left the previous output
    byte-identical beside the complete new one in its staging, which the rerun clears."""
    out = tmp_path / "outs" / "out"
    if writer.slow:
        out.parent.mkdir()
        out.write_text("an earlier file")
    else:
        writer.run(world, out)
    before = snapshot(out.parent)
    assert before and not any(map(staging, before)), sorted(before)
    if not writer.file:
        command = writer.name.split()[0]
        record = json.loads((out / f"{command}.json").read_text())
        assert set(record["written"]) | {f"{command}.json"} == {p.name for p in out.iterdir()}

    image: dict = {}
    with monkeypatch.context() as patch:
        killed_at_the_first_rename(patch, image, out.parent)
        with pytest.raises(Killed):
            writer.run(world, out, *([] if writer.file and not writer.slow else ["--force"]))
    assert {name: data for name, data in image.items() if not staging(name)} == before  # the previous output, whole
    assert any(map(staging, image)), "the new output was staged beside the old one"
    if writer.slow:
        return
    for name, data in image.items():  # what the kill left, staging included (the exception cleared it)
        (out.parent / name).parent.mkdir(parents=True, exist_ok=True)
        (out.parent / name).write_bytes(data)

    writer.run(world, out)  # a rerun, without --force: its own output from the same inputs
    after = snapshot(out.parent)
    assert sorted(after) == sorted(before), "the rerun cleared what the kill left"


def test_a_real_kill_between_staging_and_renaming_leaves_the_previous_dataset(world, tmp_path):
    """The model above, in a process that SIGKILLs itself at its first rename."""
    out = tmp_path / "out"
    args = [
        "prep",
        "text8",
        "--zip",
        str(world.text8),
        "--skip-checksum",
        "--split-sizes",
        "3000,400,425",
        "--out",
        str(out),
    ]
    ok(*args)
    before = snapshot(tmp_path)
    code = (
        "import os, signal, sys\n"
        "from longformer_fs import output\n"
        "output._move = lambda source, target: os.kill(os.getpid(), signal.SIGKILL)\n"
        "from longformer_fs.cli import main\n"
        f"sys.exit(main({[*args, '--force']!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert {k: v for k, v in snapshot(tmp_path).items() if not staging(k)} == before
    assert (tmp_path / ".out.partial" / "prep.json").is_file()  # the new dataset, staged whole
    assert "nothing to do" in ok(*args) and snapshot(tmp_path) == before


def renames_in(path: Path) -> list[str]:
    """The calls in ``path`` that rename a file: ``os.replace``, ``os.rename``, ``shutil.move``,
    and ``X.rename(Y)`` or ``X.replace(Y)`` of a path (one argument: ``str.replace`` takes two,
    ``dataclasses.replace`` and ``CodeType.replace`` take keywords)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner, name = ast.unparse(node.func.value), node.func.attr
        if (owner, name) in {("os", "replace"), ("os", "rename"), ("shutil", "move")} or (
            name in {"rename", "replace"} and len(node.args) == 1 and not node.keywords and owner not in {"os"}
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_other_module_moves_a_file_into_place():
    """``longformer_fs/output.py`` is the one place a finished file is renamed into place."""
    assert renames_in(ROOT / "longformer_fs" / "output.py"), "the check finds output.py's own renames"
    moves = [
        found
        for package in ("longformer_fs", "data_prep")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "longformer_fs" / "output.py"
        for found in renames_in(path)
    ]
    assert not moves, moves


@pytest.fixture(scope="module")
def converted(roberta_base, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted")
    ok("convert-roberta", roberta_base, "--out", out, "--max-positions", "256", "--window", "8")
    return out


def test_a_failed_export_leaves_out_byte_identical(converted, gpt2, tmp_path):
    out = tmp_path / "hf"
    ok("export-hf", converted / "model.pt", "--out", out, "--tokenizer", gpt2)
    before = snapshot(out)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(before)
    # A tokenizer folder without its files fails after the weights are written.
    (tmp_path / "empty").mkdir()
    err = fails("export-hf", converted / "model.pt", "--out", out, "--tokenizer", tmp_path / "empty")
    assert str(tmp_path / "empty") in err.strip().splitlines()[-1], err
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "hf"]
    # A dictionary that is not there is found before anything is written.
    assert "no.txt does not exist" in fails(
        "export-hf", converted / "model.pt", "--out", out, "--dict", tmp_path / "no.txt"
    )


def test_export_takes_the_dictionary_of_the_data_the_checkpoint_names(converted, gpt2, tmp_path):
    """fairseq-train writes no dict.txt beside its checkpoints: the task's data has it."""
    state = torch.load(converted / "model.pt", weights_only=False)
    data = tmp_path / "data-bin" / "docs"
    data.mkdir(parents=True)
    (data / "dict.txt").write_bytes((converted / "dict.txt").read_bytes())
    state["cfg"]["task"]["data"] = str(data)
    (tmp_path / "run").mkdir()
    torch.save(state, tmp_path / "run" / "checkpoint_best.pt")

    report = json.loads(ok("export-hf", tmp_path / "run" / "checkpoint_best.pt", "--out", tmp_path / "hf",
                           "--tokenizer", gpt2, "--json"))  # fmt: skip
    assert report["dictionary"] == str(data / "dict.txt")
    (data / "dict.txt").unlink()
    err = fails("export-hf", tmp_path / "run" / "checkpoint_best.pt", "--out", tmp_path / "hf2", "--tokenizer", gpt2)
    assert len(err.strip().splitlines()) == 1 and "--dict" in err and str(data / "dict.txt") in err
    assert not (tmp_path / "hf2").exists()


def test_every_writer_refuses_another_models_out_without_force(roberta_base, bart_base, converted, tmp_path):
    """convert-roberta, convert-bart and export-hf (import-hf: tests/conversion/test_import_hf.py;
    export-onnx: tests/export/test_export_onnx.py and the deploy-LED journey) write into an
    empty OUT, refresh their own output from the same source, and replace anything else only
    with --force; a refusal leaves OUT byte-identical."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    others = {}
    for release in (roberta_base, bart_base):  # another release: the same model under another name
        others[release] = tmp_path / f"other_{release.name}"
        others[release].mkdir()
        for name in ("model.pt", "dict.txt"):
            (others[release] / name).write_bytes((release / name).read_bytes())
    steps = [
        (["convert-roberta", roberta_base, "--max-positions", "256"], ["convert-roberta", others[roberta_base]]),
        (["convert-bart", bart_base, "--max-source-positions", "2048"], ["convert-bart", others[bart_base]]),
        (["export-hf", converted / "model.pt"], ["export-hf", tmp_path / "long" / "model.pt"]),
    ]
    ok("convert-roberta", roberta_base, "--out", tmp_path / "long")
    for first, second in steps:
        out = tmp_path / f"out-{first[0]}"
        ok(*first, "--out", out)
        ok(*first, "--out", out)  # its own output from the same source: refreshed
        before = snapshot(out)
        record = json.loads((out / f"{first[0]}.json").read_text())
        folder = first[1].resolve().parent if first[1].is_file() else first[1].resolve()
        assert {Path(f).parent for f in stamped_files(record["inputs"])} == {folder}  # the files it read
        for source, target in ((second, out), (first, mine)):
            err = fails(*source, "--out", target)
            assert len(err.strip().splitlines()) == 1 and "--force" in err and str(target) in err, err
        assert snapshot(out) == before and snapshot(mine) == {"notes.txt": b"mine"}
        ok(*second, "--out", out, "--force")
        assert json.loads((out / f"{first[0]}.json").read_text())["inputs"] != record["inputs"]


@pytest.mark.parametrize("command", ["convert-roberta", "convert-bart"])
def test_converters_refuse_unreadable_checkpoints_in_one_line(command, converted, tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "dict.txt").write_bytes((converted / "dict.txt").read_bytes())  # a release's layout
    assert_refused_in_one_line(tmp_path, [command, "{checkpoint}", "--out", "out"], tmp_path / "bad",
                               converted / "model.pt")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_the_fine_tuning_recipes_refuse_an_unreadable_model_in_one_line(converted, tmp_path, capsys):
    """``make finetune-* MODEL=...`` reads the model's settings (python -m longformer_fs.recipes)."""
    from longformer_fs import recipes

    data = tmp_path / "cls"  # a finished classification directory, whose dictionary is the model's
    (data / "input0").mkdir(parents=True)
    (data / "input0" / "dict.txt").write_bytes((converted / "dict.txt").read_bytes())
    (data / "prep.json").write_text(json.dumps({"kind": "classification", "splits": {"train": {"documents": 8}}}))
    bad, marker = unreadable_checkpoints(tmp_path / "bad", converted / "model.pt")
    (tmp_path / "bad" / "dict.txt").write_bytes((converted / "dict.txt").read_bytes())
    for path in bad.values():
        assert recipes.main(["finetune-overrides", "imdb", str(data), "--model", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0], err
    assert not marker.exists()
