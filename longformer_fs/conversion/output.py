"""How every converter writes its output directory: all or nothing.

``import-hf``, ``convert-roberta``, ``convert-bart`` and ``export-hf`` write into a
folder beside ``--out`` and move the files in only once all of them are written, so a
command that fails (bad input found late, a full disk, Ctrl-C) leaves ``--out`` exactly
as it was, and never a model without its dictionary or config.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def staged_output(out_dir: Path) -> Iterator[Path]:
    """A directory to write ``out_dir``'s files into.

    On leaving without an error, each file (or folder) written there replaces its
    namesake in ``out_dir``, which is created if needed; files of ``out_dir`` that were
    not written stay. On an error nothing is moved, and the folders this call created
    (``out_dir``'s missing parents) are removed again.
    """
    out_dir = Path(out_dir)
    missing = [path for path in (out_dir, *out_dir.parents) if not path.exists()]  # nearest first
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.") as staging:
            yield Path(staging)
            out_dir.mkdir(exist_ok=True)
            for path in Path(staging).iterdir():
                target = out_dir / path.name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                os.replace(path, target)
    except BaseException:
        for path in missing:
            with contextlib.suppress(OSError):  # not empty: not ours to remove
                path.rmdir()
        raise
