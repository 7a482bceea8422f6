"""The package layers, checked on the source: who may import whom.

An import graph is read with ``ast`` (every ``import`` statement, including those inside
functions), at the granularity of this repository's packages, e.g.
``longformer_fs.models`` -> ``longformer_fs.attention``.
"""

import ast
import re
import subprocess  # a new interpreter: what importing each layer loads
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("longformer_fs", "data_prep")
EXTERNAL = ("fairseq", "transformers", "torch")


def unit_of(module: str) -> str:
    """``longformer_fs.models.led`` -> ``longformer_fs.models``; top-level modules stay whole."""
    parts = module.split(".")
    if parts[0] == "longformer_fs" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def module_name(path: Path) -> tuple[str, bool]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports."""
    name, is_package = module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
                found |= {f"{prefix}.{a.name}" for a in node.names} if node.module is None else {prefix}
            else:
                # ``from package import module`` imports the module; a name in it, the package.
                folder = ROOT.joinpath(*node.module.split("."))
                submodules = {
                    a.name for a in node.names if (folder / f"{a.name}.py").is_file() or (folder / a.name).is_dir()
                }
                found |= {f"{node.module}.{name}" for name in submodules}
                if len(submodules) < len(node.names):
                    found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = unit_of(module_name(path)[0])
            for target in imports_of(path):
                top = target.split(".")[0]
                if top in PACKAGES:
                    dest = unit_of(target)
                elif top in EXTERNAL:
                    dest = top
                else:
                    continue
                if dest != source:
                    edges.setdefault(source, set()).add(dest)
    return edges


@pytest.fixture(scope="module")
def edges():
    return graph()


def test_the_graph_sees_imports(edges):
    """Positive control: edges that exist must be found, or every check below is empty."""
    assert "longformer_fs.models" in edges["longformer_fs.conversion"]
    assert "longformer_fs.attention" in edges["longformer_fs.models"]
    assert "fairseq" in edges["longformer_fs.models"]
    assert "data_prep" in edges["longformer_fs.commands"]
    assert "longformer_fs.conventions" in edges["data_prep"]


def test_models_never_import_conversion(edges):
    assert "longformer_fs.conversion" not in edges.get("longformer_fs.models", set())


DEVICES = "longformer_fs.devices"


def test_attention_core_and_modules_know_nothing_of_fairseq(edges):
    for unit in ("longformer_fs.attention", "longformer_fs.modules"):
        assert not edges.get(unit, set()) & {"fairseq", "transformers"}, unit
    # Below the core: the one module of decisions that differ on a GPU (docs/design.md's Layout).
    assert edges.get("longformer_fs.attention", set()) <= {"torch", DEVICES}


def test_the_device_decisions_sit_beneath_everything(edges):
    """``devices`` imports torch alone, and the rehearsal's watch nothing of ours but it; the
    core asks ``devices`` (positive control: it does)."""
    assert edges[DEVICES] == {"torch"}
    assert edges["longformer_fs.rehearsal"] <= {"torch", DEVICES}
    assert DEVICES in edges["longformer_fs.attention"]


def test_only_the_device_module_asks_the_device_type():
    """A branch on CUDA is asked of ``devices`` alone: no other module of the package names
    ``is_cuda`` or compares a device type with ``"cuda"`` (``devices`` does, positive control)."""
    pattern = re.compile(r"is_cuda|device\.type\s*[!=]=\s*[\"']cuda[\"']")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "longformer_fs").rglob("*.py"))
        if path.name != "devices.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, offenders
    assert pattern.search((ROOT / "longformer_fs" / "devices.py").read_text())


def test_attention_core_imports_without_fairseq():
    """At run time too: the package's own __init__ leaves fairseq to whoever needs it."""
    code = "import sys, longformer_fs.attention; print([m for m in ('fairseq', 'transformers') if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_only_the_command_line_reaches_commands_and_benchmarks(edges):
    front = {"longformer_fs.commands", "longformer_fs.benchmarks", "longformer_fs.report"}
    for source, targets in edges.items():
        if source not in front:
            assert not targets & front, source


# The rule of docs/design.md's "Layout": data_prep/ and the plugin's library share only
# what both agree on, the conventions and the tokenization; the command line is the one
# place that uses both.
CONVENTIONS = "longformer_fs.conventions"
TOKENIZATION = "longformer_fs.tokenization"
OUTPUT = "longformer_fs.output"  # how every command writes, prep's included
SHARED = {CONVENTIONS, TOKENIZATION, OUTPUT}
COMMAND_LINE = {"longformer_fs.commands", "longformer_fs.benchmarks", "longformer_fs.report", "longformer_fs.cli"}


def test_data_prep_uses_nothing_of_the_plugin_but_what_both_agree_on(edges):
    assert {t for t in edges.get("data_prep", set()) if t.startswith("longformer_fs")} <= SHARED


def test_only_the_command_line_imports_data_prep(edges):
    library = {source for source in edges if source.startswith("longformer_fs")} - COMMAND_LINE
    assert library, "no plugin unit found"
    offenders = sorted(source for source in library if "data_prep" in edges[source])
    assert not offenders, f"{offenders} import data_prep/; move what both need to {CONVENTIONS}"


def test_what_both_agree_on_imports_nothing_of_the_repository_nor_torch(edges):
    """The bottom of both sides: importing it must not pull in either (nor torch or fairseq,
    which the spawn workers of ``prep docs`` would pay for at start)."""
    assert not edges.get(CONVENTIONS, set()) and not edges.get(OUTPUT, set())
    assert edges.get(TOKENIZATION, set()) <= {CONVENTIONS}


def test_kernels_know_torch_only_in_the_binding():
    sources = sorted((ROOT / "cuda_ext").rglob("*.c*")) + sorted((ROOT / "cuda_ext").rglob("*.h"))
    assert sources
    for path in sources:
        includes = re.findall(r'^#include [<"]([^>"]+)[>"]', path.read_text(), re.M)
        torch_headers = [h for h in includes if h.startswith(("torch/", "ATen/", "c10/"))]
        if path.name == "binding.cpp":
            assert torch_headers
        else:
            assert not torch_headers, (path, torch_headers)


def test_the_plugins_units_import_one_another_without_a_cycle(edges):
    """The registration among them: components imports models, tasks and criterions, which
    never import it back (importing one registers its own members)."""
    assert {"longformer_fs.models", "longformer_fs.tasks", "longformer_fs.criterions"} <= edges[
        "longformer_fs.components"
    ]
    units = {unit for unit in edges if unit.startswith("longformer_fs")}

    def reaches(start, goal, seen):
        for nxt in edges.get(start, set()) & units:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(unit for unit in units if reaches(unit, unit, set()))
    assert not cycles, cycles


def test_the_two_directions_meet_only_below_both(edges):
    """Models come in through conversion/ and leave through export/, side by side: neither
    imports the other, and what both need sits below both (HF's formats in hf_format/, the
    output step, ``Checkpoint`` for the way out), importing neither. Every exporter starts
    from ``Checkpoint`` and writes through ``output``, and neither direction reaches into
    evaluation/ (loading a model is ``checkpoint``'s), but for the LED export's self-check,
    which runs fairseq's generation."""
    export, conversion = edges["longformer_fs.export"], edges["longformer_fs.conversion"]
    assert "longformer_fs.export" not in conversion and "longformer_fs.conversion" not in export
    assert {"longformer_fs.hf_format", "longformer_fs.output"} <= conversion & export
    assert {"longformer_fs.checkpoint", "longformer_fs.heads"} <= export
    below = {"longformer_fs.hf_format", "longformer_fs.output", "longformer_fs.checkpoint"}
    assert not {unit for unit in below if edges.get(unit, set()) & {"longformer_fs.export", "longformer_fs.conversion"}}
    assert "longformer_fs.evaluation" not in conversion
    # One exception: an LED's export checks its files against fairseq's own generation.
    reaching = {path.name: re.findall(r"from \.\.evaluation(\.\w+)? import", path.read_text())
                for path in (ROOT / "longformer_fs" / "export").glob("*.py")}  # fmt: skip
    assert {name: found for name, found in reaching.items() if found} == {"onnx_led.py": [".summarization"]}


def import_order(package: str) -> tuple[dict[str, set[str]], list[str]]:
    """The modules of ``longformer_fs.<package>`` with the ones among them each imports
    (imports inside functions included), and the modules in an order where each comes
    after everything it imports; an import cycle fails."""
    root = ROOT / "longformer_fs" / package
    modules = {module_name(path)[0]: path for path in root.glob("*.py") if path.name != "__init__.py"}
    inner = {name: {t for t in imports_of(path) if t in modules and t != name} for name, path in modules.items()}
    order, done = [], set()
    while len(done) < len(inner):  # peel off the modules whose imports are all peeled off
        ready = sorted(name for name, targets in inner.items() if name not in done and targets <= done)
        assert ready, f"import cycle among {sorted(set(inner) - done)}"
        order += ready
        done |= set(ready)
    return inner, order


def test_conversion_modules_import_one_another_without_a_cycle():
    """Inside conversion/ too, module by module, imports inside functions included: a
    conversion from an HF directory to model.pt visits each module once (roberta ->
    readers -> read_hf -> hf_directory -> released); and inside hf_format/, reading a
    tokenizer comes before checking its ids, which comes before writing one."""
    inner, order = import_order("conversion")
    conv = "longformer_fs.conversion."
    assert {conv + "hf_directory", conv + "released"} <= inner[conv + "read_hf"]
    assert conv + "readers" in inner[conv + "roberta"]
    assert order.index(conv + "released") < order.index(conv + "readers") < order.index(conv + "roberta")
    _, order = import_order("hf_format")
    hf = "longformer_fs.hf_format."
    assert order.index(hf + "tokenizer_files") < order.index(hf + "token_ids") < order.index(hf + "tokenizer_out")


def test_export_modules_import_one_another_without_a_cycle():
    """Inside export/, the same: the ONNX steps both plans share (tracing, quantizing) sit
    below the encoder's plan (onnx) and the LED's (onnx_led), and the encoder's command
    hands an LED to the LED's plan, never the other way round."""
    inner, order = import_order("export")
    ex = "longformer_fs.export."
    assert ex + "onnx_trace" in inner[ex + "onnx"] & inner[ex + "onnx_led"]
    assert ex + "onnx_quantize" in inner[ex + "onnx"] & inner[ex + "onnx_led"]
    assert order.index(ex + "onnx_trace") < order.index(ex + "onnx_led") < order.index(ex + "onnx")
