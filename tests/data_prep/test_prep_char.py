"""text8/enwik8 preparation on small generated zips, read back through fairseq."""

import functools
import http.server
import json
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import read_char_split

from data_prep.char_corpus import prepare
from data_prep.fairseq_dataset import PrepError
from longformer_fs.cli import main

SIZES = (3000, 400, 350)


def make_zip(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, data)
    return path


def text8_like(n: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return bytes(rng.choice(np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", np.uint8), n))


def enwik8_like(n: int) -> bytes:
    base = "<page>\n  <title>Caf\u00e9</title>\n  <text>[[Link]] &amp; more</text>\n</page>\n".encode()
    return (base * (n // len(base) + 1))[:n]


@pytest.mark.parametrize("name,make", [("text8", text8_like), ("enwik8", enwik8_like)])
def test_round_trip_splits_in_file_order(tmp_path, name, make):
    data = make(sum(SIZES))
    zip_path = make_zip(tmp_path / f"{name}.zip", name, data)
    out = tmp_path / "out"
    manifest = prepare(name, out, zip_path, verify=False, split_sizes=SIZES)
    assert manifest["tokens"] == {"train": 3000, "valid": 400, "test": 350}
    assert read_char_split(out, "train") == data[:3000]
    assert read_char_split(out, "valid") == data[3000:3400]
    assert read_char_split(out, "test") == data[3400:]
    assert manifest["vocab_bytes"] == len(set(data[:3000]))
    if name == "enwik8":  # newlines are ordinary tokens, no eos anywhere
        assert "0x0a" in (out / "dict.txt").read_text()


def test_unseen_bytes_map_to_unk_and_are_counted(tmp_path):
    data = bytearray(text8_like(sum(SIZES)))
    data[3100] = ord("#")  # only in valid
    zip_path = make_zip(tmp_path / "text8.zip", "text8", bytes(data))
    manifest = prepare("text8", tmp_path / "out", zip_path, verify=False, split_sizes=SIZES)
    assert manifest["unknown_tokens"] == {"train": 0, "valid": 1, "test": 0}


def test_second_run_does_nothing(tmp_path, capsys):
    zip_path = make_zip(tmp_path / "text8.zip", "text8", text8_like(sum(SIZES)))
    out = tmp_path / "out"
    prepare("text8", out, zip_path, verify=False, split_sizes=SIZES)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    capsys.readouterr()
    prepare("text8", out, zip_path, verify=False, split_sizes=SIZES)
    assert "nothing to do" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    prepare("text8", out, zip_path, verify=False, split_sizes=(3100, 300, 350))  # other inputs: redone
    assert json.loads((out / "prep.json").read_text())["tokens"]["train"] == 3100


def test_errors_are_clear(tmp_path):
    good = make_zip(tmp_path / "text8.zip", "text8", text8_like(sum(SIZES)))
    with pytest.raises(PrepError, match="does not exist"):
        prepare("text8", tmp_path / "a", tmp_path / "missing.zip")
    with pytest.raises(PrepError, match="sha1 .* official text8.zip"):
        prepare("text8", tmp_path / "b", good)  # checksum on by default
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(PrepError, match="not a readable zip"):
        prepare("text8", tmp_path / "c", corrupt, verify=False, split_sizes=SIZES)
    wrong_member = make_zip(tmp_path / "other.zip", "enwik8", b"x" * sum(SIZES))
    with pytest.raises(PrepError, match="no member 'text8'"):
        prepare("text8", tmp_path / "d", wrong_member, verify=False, split_sizes=SIZES)
    with pytest.raises(PrepError, match="add up to"):
        prepare("text8", tmp_path / "e", good, verify=False, split_sizes=(10, 10, 10))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(PrepError, match="holds files this command did not write"):
        prepare("text8", busy, good, verify=False, split_sizes=SIZES)


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_then_prepare(tmp_path, http_server):
    root, base = http_server
    data = enwik8_like(sum(SIZES))
    make_zip(root / "enwik8.zip", "enwik8", data)
    out = tmp_path / "out"
    prepare("enwik8", out, download_missing=True, verify=False, split_sizes=SIZES, url=f"{base}/enwik8.zip")
    assert (out / "enwik8.zip").is_file() and read_char_split(out, "test") == data[3400:]
    with pytest.raises(PrepError, match="cannot download"):
        prepare("enwik8", tmp_path / "offline", download_missing=True, url=f"{base}/nothing-here.zip")


def test_a_download_that_is_not_the_official_zip_is_refused(tmp_path, http_server):
    """--download checks what it fetched against the official checksum, as --zip does: a
    mirror's different file stops before anything is prepared (the zip stays, for a rerun
    with --skip-checksum on purpose)."""
    root, base = http_server
    make_zip(root / "text8.zip", "text8", text8_like(sum(SIZES)))
    out = tmp_path / "out"
    with pytest.raises(PrepError, match="has sha1 [0-9a-f]{40}, but the official text8.zip .* --skip-checksum"):
        prepare("text8", out, download_missing=True, split_sizes=SIZES, url=f"{base}/text8.zip")
    assert sorted(p.name for p in out.iterdir()) == ["text8.zip"]
    (root / "text8.zip").unlink()  # a rerun reads what was fetched
    prepare("text8", out, download_missing=True, verify=False, split_sizes=SIZES, url=f"{base}/text8.zip")
    assert read_char_split(out, "train") == text8_like(sum(SIZES))[: SIZES[0]]


def test_cli(tmp_path, capsys):
    zip_path = make_zip(tmp_path / "text8.zip", "text8", text8_like(sum(SIZES)))
    args = ["prep", "text8", "--zip", str(zip_path), "--out", str(tmp_path / "out"), "--split-sizes", "3000,400,350"]
    assert main(args) == 2  # official checksum by default
    assert "longformer-fs: error: --zip" in capsys.readouterr().err
    assert main(args + ["--skip-checksum"]) == 0
    assert "3,000/400/350 bytes" in capsys.readouterr().out
