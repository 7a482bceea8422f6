"""``report.md`` and ``report.json``: the machine, every part's status and figures, and the
speed targets read from them (docs/benchmarks.md states the targets)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import output
from .runner import GROUPS, NOT_REHEARSED, Part


@dataclass(frozen=True)
class Target:
    """A speed or memory target, read from the parts' figures.

    ``measure(parts)`` gives ``(measured text, met)``, or None when its part has no figures.
    """

    what: str
    goal: str
    measure: Callable[[dict], tuple[str, bool] | None]


def _figure(parts: dict, name: str, *keys):
    value = parts.get(name, {})
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _ratios(parts: dict, name: str, limit: float, flip: bool = False):
    """Every length's ``name`` ratio against ``limit`` (at most; at least with ``flip``)."""
    found = {t: r[name] for t, r in (_figure(parts, "attention", "ratios") or {}).items() if name in r}
    if not found:
        return None
    text = ", ".join(f"{r:.2f}x at {int(t):,}" for t, r in found.items())
    met = all((r >= limit) if flip else (r <= limit) for r in found.values())
    return text, met


def _pair(parts: dict, name: str, speed: float, memory: float, row: dict | None = None):
    row = row if row is not None else parts.get(name, {})
    if "speedup" not in row or "memory_ratio" not in row:
        return None
    text = f"{row['speedup']:.2f}x faster, {row['memory_ratio']:.2f}x the memory"
    return text, row["speedup"] >= speed and row["memory_ratio"] <= memory


def _finetune(parts: dict, seq_len: int, speed: float):
    rows = [r for r in _figure(parts, "finetune", "rows") or [] if r.get("seq_len") == seq_len]
    return _pair(parts, "finetune", speed, 0.6, rows[0]) if rows else None


RECIPE_PARTS = ("text8", "mlm_base", "finetune_triviaqa", "summarize_arxiv")


def _recipes_fast(parts: dict):
    """Whether each recipe part trained, and on a fast backend (``fast_backend``, on a GPU)."""
    ran = {name: parts[name] for name in RECIPE_PARTS if name in parts}
    if not ran:
        return None
    cells = []
    for name, part in ran.items():
        backends = ", ".join(part.get("attention_backends") or []) or "no backend named"
        cells.append(f"{name}: {part.get('status')}, {part.get('precision', '?')}, {backends}")
    met = len(ran) == len(RECIPE_PARTS) and all(p.get("status") == "ok" and p.get("fast_backend") for p in ran.values())
    return "; ".join(cells), met


def _fits(parts: dict, name: str):
    fits = _figure(parts, name, "fits")
    if fits is None:
        return None
    peak = _figure(parts, name, "peak_gib")
    return ("fits" + (f", peak {peak:.1f} GiB" if peak is not None else "") if fits else "out of memory"), fits


def _lm(parts: dict):
    speedup = _figure(parts, "lm", "speedup")
    if speedup is None:
        return None
    upper = _figure(parts, "lm", "speedup_vs_causal_sdpa")
    also = f" ({upper:.2f}x those of `transformer_lm` with causal SDPA)" if upper is not None else ""
    return f"{speedup:.2f}x the characters/s{also}", speedup >= 3


TARGETS = (
    Target("`flash` band FLOP/s against dense flash SDPA's, fwd + bwd", "at least 60%",
           lambda p: _ratios(p, "flash band FLOP/s / sdpa FLOP/s", 0.6, flip=True)),
    Target("`flex` against FlexAttention alone, fwd + bwd", "within 1.3x",
           lambda p: _ratios(p, "flex / flexattention", 1.3)),
    Target("`flex` at d = 4 against d = 1", "within 1.3x", lambda p: _ratios(p, "flex d=4 / d=1", 1.3)),
    Target("`longformer_lm` against `transformer_lm` at 16K characters", "at least 3x the characters/s", _lm),
    Target("LED against BART at 16K source tokens", "at least 2x faster, at most half the memory",
           lambda p: _pair(p, "led", 2.0, 0.5)),
    Target("fine-tuning against HF at 4K tokens", "at least 1.5x faster, at most 0.6x the memory",
           lambda p: _finetune(p, 4096, 1.5)),
    Target("fine-tuning against HF at 16K tokens", "at least 2.5x faster, at most 0.6x the memory",
           lambda p: _finetune(p, 16384, 2.5)),
    Target("the four recipes at toy size", "each trains, in its precision, with its dropout, on a fast backend",
           _recipes_fast),
    Target("LED-base training at 64K source tokens", "fits one 80 GB GPU", lambda p: _fits(p, "led_train_64k")),
    Target("LED-base's encoder at 128K tokens (inference)", "fits", lambda p: _fits(p, "encoder_128k")),
)  # fmt: skip


def target_rows(parts: dict, toy: bool, rehearsal: bool = False) -> list[dict]:
    """Each target, what was measured against it and whether it is met (None: not measured,
    measured at toy sizes, which are not the target's, or rehearsed, with nothing measured)."""
    rows = []
    for target in TARGETS:
        found = None if rehearsal else target.measure(parts)
        measured, met = found if found else ("rehearsed: nothing measured" if rehearsal else "not measured", None)
        rows.append({"what": target.what, "target": target.goal, "measured": measured, "met": None if toy else met})
    return rows


def kernel_notes(parts: dict) -> list[str]:
    """Where our CUDA kernel is more than 1.5x slower than FlexAttention alone."""
    notes = []
    for seq_len, ratios in (_figure(parts, "attention", "ratios") or {}).items():
        ratio = ratios.get("kernel / flexattention")
        if ratio is not None and ratio > 1.5:
            notes.append(f"our CUDA kernel is {ratio:.1f}x slower than FlexAttention alone at {int(seq_len):,} tokens")
    return notes


def write_report(out: Path, machine: dict, settings: dict, parts: list[Part], results: dict) -> tuple[Path, Path]:
    """Both files, each written whole or not at all."""
    payload = {
        "machine": machine,
        "settings": settings,
        "parts": results,
        "targets": target_rows(results, settings["toy"], settings.get("rehearsal", False)),
        "notes": [] if settings.get("rehearsal") else kernel_notes(results),
    }
    json_path, md_path = out / "report.json", out / "report.md"
    output.write_json(json_path, payload)
    output.write_text(md_path, markdown(payload, parts))
    return md_path, json_path


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)[:200]
    return str(value)


VERSIONS = ("torch", "cuda", "triton", "fairseq", "transformers")


def markdown(payload: dict, parts: list[Part]) -> str:
    machine, results = payload["machine"], payload["parts"]
    lines = ["# longformer-fs report", ""]
    device = machine.get("gpu") or machine.get("cpu", "CPU")
    versions = [f"{name} {machine[name]}" for name in VERSIONS if machine.get(name)]
    lines += [f"{device}; commit {machine.get('commit', '?')}; " + ", ".join(versions) + "."]
    settings = payload["settings"]
    lines += ["", f"Settings: device {settings['device']}, budget {settings['budget']} s"
              + (", **toy sizes** (not the targets' sizes)" if settings["toy"] else "") + ".", ""]  # fmt: skip
    if settings.get("rehearsal"):
        lines += ["**A rehearsal**: meta tensors stood for an sm90 GPU and took its decisions (docs/gpus.md). "
                  "The parts ran their code, and their times, sizes and errors are not measurements; each "
                  "part's `rehearsal` lists the reads of the device's values it made.", ""]  # fmt: skip
    lines += ["| group | part | status | seconds | what |", "|---|---|---|---|---|"]
    for part in parts:
        result = results.get(part.name, {})
        status = result.get("status", "?")
        shown = status if status == "ok" else f"**{status}**: {result.get('error', '')}"
        lines.append(f"| {part.group} | `{part.name}` | {shown} | {result.get('seconds', 0):.0f} | {part.what} |")
    rest = rest_command(settings, results)
    if rest:
        named = ", ".join(f"`{name}`" for name in budget_left_out(results))
        lines += ["", f"The budget left out {named}; they run with `{rest}`."]
    lines += ["", "## Targets", ""]
    if settings["toy"]:
        lines += ["Measured at toy sizes, which are not the targets' conditions: none is judged.", ""]
    lines += ["| what | target | measured | met |", "|---|---|---|---|"]
    for row in payload["targets"]:
        met = {True: "yes", False: "**no**", None: "-"}[row["met"]]
        lines.append(f"| {row['what']} | {row['target']} | {row['measured']} | {met} |")
    lines += [""] + [f"- {note}" for note in payload["notes"]]
    for group in GROUPS:
        lines += ["", f"## {group.capitalize()}"]
        for part in (p for p in parts if p.group == group):
            lines += ["", f"### `{part.name}`", "", part.what + "."]
            lines += _figures(part.name, results.get(part.name, {}))
    return "\n".join(lines) + "\n"


def not_rehearsed(results: dict) -> list[str]:
    """The parts a rehearsal skipped, as it cannot run them (:attr:`.runner.Part.not_rehearsed`)."""
    return [name for name, result in results.items() if str(result.get("error", "")).startswith(NOT_REHEARSED)]


def budget_left_out(results: dict) -> list[str]:
    """The parts the budget left out (not those a rehearsal cannot run)."""
    skipped = set(not_rehearsed(results))
    return [name for name, result in results.items() if result["status"] == "skipped" and name not in skipped]


def rest_command(settings: dict, results: dict, out: Path | None = None) -> str | None:
    """The command that runs the parts the budget left out (None: it left none out), into
    ``out`` when given."""
    left_out = budget_left_out(results)
    if not left_out:
        return None
    device = "--rehearse" if settings.get("rehearsal") else f"--device {settings['device']}"
    toy = " --toy" if settings["toy"] else ""
    where = f" --out {out}" if out is not None else ""
    return f"longformer-fs report {device}{toy} --parts {','.join(left_out)}{where}"


def _figures(name: str, result: dict) -> list[str]:
    figures = {k: v for k, v in result.items() if k not in ("status", "seconds", "error")}
    if not figures:
        return []
    rows = figures.pop("rows", None)
    profile = figures.pop("profile", None)
    lines = [""]
    if isinstance(profile, dict) and profile.get("models"):
        lines += _profile_lines(profile)
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        lines += _table(rows)
        lines.append("")
    tables = {k: v for k, v in figures.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
    lines += [f"- {key}: {_cell(value)}" for key, value in figures.items() if key not in tables]
    for key, table in tables.items():
        lines += ["", f"{key}:", "", *_table(table)]
    return lines


PROFILE_COLUMNS = {
    "band_attention": "band attention (backend (kind): calls)",
    "sdpa_kernel": "SDPA kernel",
    "host_syncs": "host syncs",
    "h2d_copies": "H2D copies",
    "compiles": "compiles",
    "recompiles": "recompiles",
    "graph_breaks": "graph breaks",
    "peak_gib": "peak GiB",
    "largest_layer_saved_mib": "largest layer's saved MiB",
    "top_kernel": "top kernel",
}


def _profile_lines(profile: dict) -> list[str]:
    """The part's profile of one step per model: a table, and links to its files."""
    files = profile.get("files") or {}
    links = ", ".join(f"[{path}]({path})" for path in files.values())
    lines = ["Profile of one step of each model" + (f" ({links})" if links else "") + ":", ""]
    lines += ["| model | " + " | ".join(PROFILE_COLUMNS.values()) + " |", "|---|" + "---|" * len(PROFILE_COLUMNS)]
    for model, summary in profile["models"].items():
        cells = []
        for key in PROFILE_COLUMNS:
            value = summary.get(key)
            if isinstance(value, dict):
                value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
            cells.append(_cell(value) if value is not None else "-")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines + [""]


def _flatten(row: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key} "))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _table(rows: list[dict]) -> list[str]:
    flat = [_flatten(r) for r in rows]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |" for r in flat]
    return lines
