"""Upstream report drafts (`--issue DIR` of `versions` and `ab`): for each cell a paired comparison judged slower, a
folder with a Markdown draft to paste into the framework's tracker (the numbers, the two sides' environments as the
workers recorded them, nnbench's command) and a standalone script that shows the change with the framework alone:
each side's step exported in its own environment (`measure.step_export`), timed taking turns by `standalone.py`. Parent
side."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.common.config import BACKENDS, ROOT
from experiments.common.frameworks import traits
from experiments.common.protocol import Export, Setup
from experiments.compare.paired import CellVerdict
from experiments.harness import manager
from experiments.harness.envs import Manifest, clean_environ
from experiments.stats.verdicts import Verdict
from experiments.store.records import META, Record
from experiments.store.sweepdir import saved

SCRIPT = Path(__file__).with_name("standalone.py")  # the script's driver; each side's loader comes from its backend
LOADERS = "# the loaders of the sides' frameworks go here\n"  # where in the driver they are written
# What the draft shows of each side's environment, from what the workers record (measure.environment and the
# backends' `environment`, allow-listed: no other variable): its name in the draft, the tag.
ENVIRONMENT = (("Python", "python_version"), ("platform", "platform"), ("CPU", "cpu_model"),
               ("device", "device_name"), ("torch", "torch_version"), ("jax", "jax_version"),
               ("jaxlib", "jaxlib_version"), ("flax", "flax_version"), ("optax", "optax_version"),
               ("numpy", "numpy_version"), ("CUDA", "cuda_version"), ("cuDNN", "cudnn_version"),
               ("torch threads", "torch_num_threads"), ("torch.compile backend", "torch_compile_backend"),
               ("precision", "precision_policy"), ("XLA_FLAGS", "xla_flags"), ("allocator", "allocator"))
# The environment's own tags: what it is, not a variable of it.
SPEC_TAGS = ("env_spec", "env_changes", "env_packages", "env_fingerprint")


@dataclass(frozen=True)
class Side:
    """One side of a slower cell: its point's record, its interpreter, its exported step's files (or why not)."""

    record: Record
    python: str
    files: tuple[str, ...] = ()
    failed: str = ""

    @property
    def label(self) -> str:
        return self.record.tags.get("env_spec") or self.record.tags["variant"]

    @property
    def framework(self) -> str:
        return self.record.config["framework"]["name"]


def drafts(rows: list[CellVerdict], sweep: Path, out: Path, command: str) -> list[Path]:
    """Each slower cell's folder under `out` (draft.md, repro.py, repro.json, the two exported steps); the drafts."""
    written = []
    for r in (r for r in rows if r.verdict == Verdict.SLOWER):
        ra, rb = point(sweep, r, r.baseline), point(sweep, r, r.variant)
        label = f"{rb.params.get('framework', '')}-{rb.tags['env_spec']}" if "env_spec" in rb.tags else r.variant
        folder = out / re.sub(r"[^A-Za-z0-9.=-]+", "-", f"{r.model}-{r.op}-bs{r.batch_size}-{label}")
        folder.mkdir(parents=True, exist_ok=True)
        a, b = exported(ra, r, folder / "a"), exported(rb, r, folder / "b")
        (folder / "repro.py").write_text(script([a.framework, b.framework]))
        (folder / "repro.json").write_text(json.dumps({"sides": {"a": side_config(a, r), "b": side_config(b, r)}},
                                                      indent=1))
        printed = rehearsed(folder, a, b)
        (folder / "draft.md").write_text(draft(r, a, b, command, printed))
        written.append(folder / "draft.md")
    return written


def script(frameworks: list[str]) -> str:
    """repro.py: the driver with the loader of each framework named (`backends/<name>_script.py`), one file that
    needs the framework alone."""
    loaders = "\n\n".join((BACKENDS / f"{fw}_script.py").read_text() for fw in sorted(set(frameworks)))
    return SCRIPT.read_text().replace(LOADERS, loaders)


def written(paths: list[Path], out: Path) -> None:
    """Says where the drafts are, or that there is none."""
    for path in paths:
        print(f"upstream draft: {path}", file=sys.stderr)
    if not paths:
        print(f"no cell was judged slower: no upstream draft in {out}", file=sys.stderr)


def point(sweep: Path, r: CellVerdict, label: str) -> Record:
    """The record of the point whose variant is `label` in the cell of `r`."""
    for d in saved(sweep):
        rec = Record.load(d)
        p = rec.params
        if (rec.tags.get("variant") == label and p.get("model") == r.model and int(p.get("batch_size", -1)) ==
                r.batch_size and r.op in p.get("ops", "").split(",")):
            return rec
    raise LookupError(f"no point of {label} for {r.model} {r.op} bs{r.batch_size} under {sweep}")


def exported(rec: Record, r: CellVerdict, out: Path) -> Side:
    """The cell's step built and exported in the point's own environment, as its workers built it."""
    c, fw = rec.config, rec.config["framework"]
    setup = Setup(str(c["precision"]["name"]), str(c["device"]), bool(c["precision"]["tf32"]), bool(fw["compile"]),
                  str(fw["compile_mode"]), str(fw["memory_format"] or "n/a"), fw["threads"])
    request = Export(str(fw["name"]), setup, dict(c["model"]), int(c["seed"]), r.op, r.batch_size, str(out))
    python = c["runtime"]["python"] or sys.executable
    done = subprocess.run([python, "-m", "experiments.measure.step_export", request.to_json()], cwd=ROOT,
                          env=manager.environ(), capture_output=True, text=True, timeout=900)
    if done.returncode:
        why = (done.stderr.strip() or f"exit {done.returncode}").splitlines()[-1]
        return Side(rec, python, failed=why)
    return Side(rec, python, tuple(Path(f).name for f in done.stdout.split()))


def side_config(s: Side, r: CellVerdict) -> dict:
    """What the script needs of a side: its exported program, op and set-up."""
    fw = s.record.config["framework"]
    return {"label": s.label, "framework": s.framework, "file": next(iter(s.files), ""), "op": r.op,
            "compile": bool(fw["compile"]) and traits(s.framework).script_compiles, "threads": fw["threads"]}


def rehearsed(folder: Path, a: Side, b: Side) -> str:
    """What the script printed here, each side in its own environment (which holds more than the framework); or
    why it didn't run."""
    if a.failed or b.failed:
        return ""
    done = subprocess.run([sys.executable, "repro.py", "--python-a", a.python, "--python-b", b.python], cwd=folder,
                          capture_output=True, text=True, timeout=900, env=clean_environ())
    return done.stdout if done.returncode == 0 else f"(it failed: {(done.stderr.strip() or '?').splitlines()[-1]})"


def differing(a: Side, b: Side) -> dict[str, tuple[str | None, str | None]]:
    """The package versions the two sides differ in: from their environments' manifests (each against the same
    base), else from the versions their workers recorded."""
    ma, mb = (Manifest.read(Path(s.python).parent.parent) for s in (a, b))
    if ma and mb and ma.base == mb.base:
        def version(m: Manifest, n: str) -> str | None:
            return m.changes[n][1] if n in m.changes else (ma.changes.get(n) or mb.changes[n])[0]
        names = sorted(ma.changes.keys() | mb.changes.keys())
        return {n: (version(ma, n), version(mb, n)) for n in names if version(ma, n) != version(mb, n)}
    ta, tb = a.record.tags, b.record.tags
    keys = sorted(k for k in ta.keys() | tb.keys() if k.endswith("_version") and ta.get(k) != tb.get(k))
    return {k.removesuffix("_version"): (ta.get(k), tb.get(k)) for k in keys}



def draft(r: CellVerdict, a: Side, b: Side, command: str, printed: str) -> str:
    """The draft: a title and summary with the numbers, the environments, the standalone script, nnbench's own."""
    low, high = r.interval()
    c = b.record.config
    where = f"batch size {r.batch_size}, {c['precision']['name']}, {b.record.tags.get('device_name', '?')}"
    title = f"{b.framework} {r.op} step {r.ratio:.2f}x slower with {b.label} than with {a.label} ({where})"
    medians = [s.record.metrics.get(f"{r.op}_median_s") for s in (a, b)]
    summary = (f"The {r.op} step of a {r.model} network ({b.record.params.get('mode', b.framework)}, {where}) "
               f"takes **{r.ratio:.2f}x** the time with {b.label} as with {a.label} (95% interval [{low:.2f}, "
               f"{high:.2f}]; {r.trials} fresh pairs of processes, the two sides taking turns on one machine)"
               + (f"; median step {medians[0] * 1e3:.4g} ms against {medians[1] * 1e3:.4g} ms." if all(medians)
                  else "."))
    return "\n".join([f"# {title}", "", summary, "", "## Environment", "", *environment(a, b), "",
                       "## Reproduce with the framework alone", "", *standalone(a, b, printed), "",
                       "## How it was measured", "", *measured(r, command)]) + "\n"


def environment(a: Side, b: Side) -> list[str]:
    """The packages that differ, then each side's recorded environment, differences in bold."""
    moved = differing(a, b)
    out = ["Packages that differ: " + (", ".join(f"{n} {va or '(none)'} (A) / {vb or '(none)'} (B)"
                                                for n, (va, vb) in moved.items()) or "none") + ".", "",
           f"| | A: {a.label} | B: {b.label} |", "|---|---|---|"]
    ta, tb = a.record.tags, b.record.tags
    names = [*ENVIRONMENT, *((k.removeprefix("env_"), k) for k in sorted(ta.keys() | tb.keys())
                             if k.startswith("env_") and k not in SPEC_TAGS)]
    for name, key in names:
        if key in ta or key in tb:
            va, vb = ta.get(key, ""), tb.get(key, "")
            out.append(f"| {name} | {va} | {vb} |" if va == vb else f"| **{name}** | **{va}** | **{vb}** |")
    return out


def standalone(a: Side, b: Side, printed: str) -> list[str]:
    """How to run the script: which venvs, which command; what it printed here."""
    if a.failed or b.failed:
        return [f"The step could not be exported: {a.failed or b.failed}."]
    frameworks = sorted({a.framework, b.framework})
    venv_a, venv_b = (" ".join(f"{n}=={v.split('+')[0]}" if (v := s.record.tags.get(f"{n}_version")) else n
                               for fw in frameworks for n in traits(fw).script) for s in (a, b))
    out = ["`repro.py` (beside this file) loads each side's step as nnbench measured it, exported in its own "
           f"environment ({', '.join(a.files + b.files)}: the network, its weights and its batch), runs each side in "
           "a process of its own and times them taking turns with `time.perf_counter`, then prints each side's "
           "median and the ratio B/A. It needs the framework alone, in a venv of its own:", "", "```bash"]
    if venv_a == venv_b:
        out += [f"python3 -m venv venv && venv/bin/pip install {venv_a}", "venv/bin/python repro.py"]
    else:
        out += [f"python3 -m venv venv-a && venv-a/bin/pip install {venv_a}",
                f"python3 -m venv venv-b && venv-b/bin/pip install {venv_b}",
                "python3 repro.py --python-a venv-a/bin/python --python-b venv-b/bin/python"]
    out += ["```"]
    if printed:
        out += ["", "What it printed on the machine that measured it (each side in its own environment):", "",
                "```", printed.strip(), "```"]
    return out


def measured(r: CellVerdict, command: str) -> list[str]:
    """nnbench's command and numbers."""
    low, high = r.interval()
    return [f"Measured with nnbench, `{command}`: the ratio B/A {r.ratio:.3f}, 95% interval "
            f"[{low:.3f}, {high:.3f}], verdict {r.verdict}, over {r.trials} pairs. To measure this cell again (in "
            "nnbench's checkout, with its environments):", "", "```bash", r.repro, "```"]
