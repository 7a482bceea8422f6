"""What every converter and export writes is all or nothing, and never over another model
without ``--force`` (``longformer_fs/output.py``); ``export-hf`` finds the model's dictionary
where the checkpoint says its data was."""

import json

import pytest
import torch
from helpers import assert_refused_in_one_line, fails, ok, unreadable_checkpoints

from longformer_fs.output import staged_output


def snapshot(directory):
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_staged_output_moves_everything_in_or_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (out / "model.pt").write_text("old")
    with staged_output(out) as staging:
        (staging / "model.pt").write_text("new")
        (staging / "sub").mkdir()
        (staging / "sub" / "a").write_text("a")
    assert snapshot(out) == {"keep.txt": b"mine", "model.pt": b"new", "sub/a": b"a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left

    before = snapshot(out)
    with pytest.raises(ValueError), staged_output(out) as staging:
        (staging / "model.pt").write_text("half")
        raise ValueError("found late")
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    with pytest.raises(KeyboardInterrupt), staged_output(tmp_path / "new" / "deeper" / "out") as staging:
        (staging / "model.pt").write_text("half")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the parents it made are gone too


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
        others[release] = tmp_path / f"other_{release.parent.name}"
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
        assert record["source_files"]["source"] == str(first[1].resolve().parent if first[1].is_file()
                                                       else first[1].resolve())  # fmt: skip
        for source, target in ((second, out), (first, mine)):
            err = fails(*source, "--out", target)
            assert len(err.strip().splitlines()) == 1 and "--force" in err and str(target) in err, err
        assert snapshot(out) == before and snapshot(mine) == {"notes.txt": b"mine"}
        ok(*second, "--out", out, "--force")
        assert json.loads((out / f"{first[0]}.json").read_text())["source_files"] != record["source_files"]


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
