"""The docs' commands as the product reads them: every shell line in README.md and docs/*.md that runs `nnbench ...`,
`python -m experiments ...` or `python -m experiments.run ...` is parsed by that command's own argparse (or Hydra's
command line), its overrides by Hydra's override parser and composed with the real config; an inline `nnbench CMD
--flag` names a flag CMD has; the reference.md's config table names keys and defaults the config has; every relative link
and anchor resolves. A renamed flag, key or heading fails here, naming the doc line. Nothing runs: no subprocess, no
framework."""
import argparse
import contextlib
import dataclasses
import functools
import io
import itertools
import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from experiments.cli import COMMANDS, parser
from tests.helpers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "runners" / "README.md"]
SHELLS = {"", "bash", "sh", "shell", "console", "zsh"}
SEPARATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", ">&", "<<"}
SPEC = re.compile(r"[=!<>~]=")  # a version spec (jax==0.10.1), told from an override as `nnbench versions` does


def where(path: Path, number: int) -> str:
    return f"{path.relative_to(ROOT)}:{number}"


def fenced(path: Path):
    """(line number, command line) for every shell command in the file's fenced blocks: a block without a language
    holds output too, so only its `$ ` lines; continued lines (`\\`, an open quote) joined."""
    lines, lang, pending, start = path.read_text().splitlines(), None, "", 0
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            if pending:
                raise ValueError(f"{where(path, start)}: a shell line whose quote never closes")
            lang = line[3:].strip() if lang is None else None
            continue
        if lang not in SHELLS:
            continue
        if not pending:
            if lang == "" and not line.startswith("$ "):
                continue
            start, line = n, line.removeprefix("$ ")
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the next line continues it
            pending += "\n"
            continue
        yield start, pending
        pending = ""


def commands(line: str) -> list[list[str]]:
    """The commands of a shell line, as words: split at && | ; without redirections, comments or VAR= prefixes."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out, words, skip = [], [], False
    for token in lex:
        if skip:
            skip = False
        elif token in SEPARATORS:
            out, words = out + [words], []
        elif token in REDIRECTS:
            skip = True
        else:
            words.append(token)
    out.append(words)
    for words in out:
        while words and re.match(r"[A-Z_][A-Z0-9_]*=", words[0]):
            words.pop(0)
    return [w for w in out if w]


def ours(words: list[str]) -> tuple[str, list[str]] | None:
    """(`run` or the nnbench command, its arguments) where the words run nnbench; None for any other program."""
    if words[0] == "nnbench":
        return (words[1], words[2:]) if len(words) > 1 else ("", [])
    if words[0].split("/")[-1] in ("python", "python3") and words[1:2] == ["-m"] and len(words) > 2:
        if words[2] == "experiments.run":
            return "run", words[3:]
        if words[2] == "experiments":
            return (words[3], words[4:]) if len(words) > 3 else ("", [])
        if words[2].startswith("experiments."):
            return words[2], words[3:]
    return None


DOC_COMMANDS = [pytest.param(line, found, id=where(path, n))
                for path in DOCS for n, line in fenced(path) for words in commands(line)
                if (found := ours(words)) is not None]


def test_the_docs_show_commands():
    """The extraction finds what the docs show (the README's sweep, ab, versions, bisect, history, compare)."""
    shown = {name for _, (name, _) in (p.values for p in DOC_COMMANDS)}
    assert {"run", "ab", "versions", "bisect", "history", "compare", "export", "import", "sciml", "ui"} <= shown
    readme = [args for p in DOC_COMMANDS if p.id.startswith("README.md") for name, args in [p.values[1]]
              if name == "run"]
    assert ["-m", "framework=jax,torch", "model=lenet"] in readme


@pytest.fixture(scope="module", autouse=True)
def packaged_network():
    """`model=mymlp`: own-network.md's network of an installed package (entry point `mypkg.nets:build`, whose build
    takes `width: int = 256`), registered as `config.installed_models` registers one; gone again after."""
    model = dataclasses.make_dataclass("mymlp_model", [("name", str, "mymlp"), ("width", int, 256)])
    ConfigStore.instance().store(group="model", name="mymlp", node=model)
    composed.cache_clear()
    yield
    ConfigStore.instance().repo["model"].pop("mymlp.yaml", None)
    composed.cache_clear()


@functools.cache
def composed(overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def compose_each(overrides: list[str], line: str) -> None:
    """Parse the overrides as Hydra does, then compose the real config with each value of each swept key (the other
    keys at their first value): a key or option the config doesn't have fails, naming the line."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:  # Hydra's parse error
        pytest.fail(f"{line}\nHydra's override parser refuses it: {str(e).splitlines()[0]}")
    choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
               else [o.input_line] for o in parsed]
    first = [c[0] for c in choices]
    for i, values in enumerate(choices):
        for value in values[1:] or values[:1]:
            combo = tuple(first[:i] + [value] + first[i + 1:])
            try:
                composed(combo)
            except Exception as e:  # Hydra's composition error: the key or option is unknown
                pytest.fail(f"{line}\ndoes not compose with the config ({' '.join(combo)}): {str(e).splitlines()[0]}")


def parse(name: str, args: list[str], line: str) -> argparse.Namespace:
    """The command's arguments as `experiments.cli.dispatch` reads them (overrides anywhere, `--` optional); a
    refusal fails, naming the line."""
    assert name in COMMANDS and name != "run", f"{line}\nnbench has no command {name!r}"
    argv, rest = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    top, _ = parser(name)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            a, extra = top.parse_known_args([name, *argv])
    except SystemExit as e:
        if e.code:
            pytest.fail(f"{line}\nnbench {name} refuses it: {err.getvalue().strip()}")
        return argparse.Namespace()  # --help
    if "overrides" in vars(a):
        a.overrides += [x for x in extra if not x.startswith("-")] + rest
        extra = [x for x in extra if x.startswith("-")]
    elif rest:
        extra.append("-- " + " ".join(rest))
    assert not extra, f"{line}\nnbench {name}: unrecognized arguments: {' '.join(extra)}"
    return a


def check_sweep(args: list[str], line: str) -> None:
    from hydra._internal.utils import get_args_parser  # Hydra's own command line, as experiments.run reads it

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            ns = get_args_parser().parse_args(args)
    except SystemExit as e:
        if e.code:
            pytest.fail(f"{line}\nHydra's command line refuses it: {err.getvalue().strip()}")
        return
    compose_each(ns.overrides, line)


def check_command(name: str, a: argparse.Namespace, line: str) -> None:
    """What each command makes of its words before it measures: the axis, the specs and range, the sweep's
    overrides, the selection."""
    from experiments.common.errors import BadInput  # the commands' one-line refusal

    try:
        if name == "ab":
            from experiments.compare import paired  # the axis and the design, as `nnbench ab` checks them

            key, _ = paired.axis(a.axis)
            paired.Design(a.pairs, a.max_pairs, a.bursts, a.burst_ms, a.threshold, a.alpha)
            compose_each([a.axis, *a.overrides, f"report.along={key}"], line)
        elif name == "versions":
            from experiments.harness import envs  # the specs, as `nnbench versions` parses them

            specs = [s for s in a.specs if not ("=" in s and not SPEC.search(s))]
            envs.parse(specs) if specs else None
            compose_each([s for s in a.specs if s not in specs] + a.overrides, line)
        elif name == "bisect":
            from experiments.harness import installers  # the range's form, as `nnbench bisect` checks it first

            installers.in_range([], a.range)
            compose_each(a.overrides, line)
        elif name in ("calibrate", "overhead"):
            compose_each(a.overrides, line)
        elif "filters" in vars(a):
            from experiments.store.select import pairs_of  # the selection, as compare, history and export read it

            pairs_of(a.filters)
    except (BadInput, ValueError) as e:
        pytest.fail(f"{line}\nnbench {name} refuses it: {e}")


@pytest.mark.parametrize("line,found", DOC_COMMANDS)
def test_every_command_the_docs_show_parses(line, found):
    name, args = found
    if name == "run":
        check_sweep(args, line)
    elif name.startswith("-") or not name:  # nnbench --help, --version
        with pytest.raises(SystemExit) as e, contextlib.redirect_stdout(io.StringIO()):
            parser()[0].parse_args([name] if name else [])
        assert e.value.code == 0, f"{line}\nnbench refuses it"
    elif name.startswith("experiments."):
        import importlib.util  # a module the docs run with python -m

        assert importlib.util.find_spec(name) is not None, f"{line}\nno module {name}"
    else:
        a = parse(name, args, line)
        if vars(a):
            check_command(name, a, line)


def flags(words: list[str]) -> set[str]:
    """The options a command's words name: `--readme`, `[--sweep]`, `--by=X`."""
    return {w.strip("[],.;:)").split("=")[0] for w in words if w.startswith(("--", "[--"))} - {"--"}


def inline(path: Path):
    """(line number, words) of every inline `nnbench COMMAND --flag ...` outside the fenced blocks."""
    fence = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fence ^= line.startswith("```")
        if not fence:
            for span in re.findall(r"`(nnbench [^`]+)`", line):
                words = span.split()
                if words[1] in COMMANDS and words[1] != "run" and flags(words[2:]):
                    yield n, words


INLINE = [pytest.param(words, id=f"{where(path, n)} {' '.join(words[:2])}") for path in DOCS
          for n, words in inline(path)]


@pytest.mark.parametrize("words", INLINE)
def test_every_flag_the_docs_name_is_the_commands(words):
    """`nnbench overhead --readme` in a sentence: the flags are ones the command has (placeholders aside)."""
    _, mine = parser(words[1])
    have = {s for action in mine._actions for s in action.option_strings}
    named = flags(words[2:])
    assert named <= have, f"{' '.join(words)}: nnbench {words[1]} has no {', '.join(sorted(named - have))}"


def table(path: Path, header: str) -> list[list[str]]:
    """The rows of the first Markdown table whose header line starts with `header`."""
    lines = path.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(header))
    rows = itertools.takewhile(lambda l: l.startswith("|"), lines[start + 2:])
    return [[c.strip() for c in r.strip("|").split(" | ")] for r in rows]


def value(node) -> str:
    """A composed value as the reference writes it: true, null, [a,b], 0.2."""
    if isinstance(node, bool):
        return str(node).lower()
    if node is None:
        return "null"
    if isinstance(node, (list, tuple)):
        return "[" + ",".join(map(str, node)) + "]"
    return str(node)


def lookup(config: dict, key: str):
    """The value at a dotted key (a group's: its option's `name`, where it has one); KeyError where there is none."""
    for part in key.split("."):
        if not isinstance(config, dict) or part not in config:
            return KeyError
        config = config[part]
    return config.get("name", config) if isinstance(config, dict) else config


def same(said: str, found: str) -> bool:
    """The reference's default and the config's, as text or as numbers (300 and 300.0)."""
    try:
        return float(said) == float(found)
    except ValueError:
        return said == found


def test_the_reference_config_table_is_the_config():
    """Every key the reference's table names exists, with the default it says (jax's or torch's, before any
    parenthesis: the other presets)."""
    configs = [OmegaConf.to_container(composed(o), resolve=False) for o in ((), ("framework=torch",))]
    rows = table(ROOT / "docs" / "reference.md", "| key | options | default |")
    assert len(rows) > 40
    for key_cell, _, default_cell in rows:
        keys = re.findall(r"`([a-z0-9_.]+)`", key_cell)
        defaults = re.findall(r"`([^`]+)`", default_cell.split("(")[0])
        for key in keys:
            assert any(lookup(c, key) is not KeyError for c in configs), f"reference.md's config table: no key {key}"
        if len(defaults) == len(keys):
            for key, said in zip(keys, defaults):
                found = {value(lookup(c, key)) for c in configs if not isinstance(lookup(c, key), dict)}
                assert not found or any(same(said, f) for f in found), \
                    f"reference.md's config table: {key} defaults to {' or '.join(found)}, not {said}"


def leaves(config: dict, prefix: str = "") -> set[str]:
    return {k for key, v in config.items() for k in (leaves(v, f"{prefix}{key}.") if isinstance(v, dict) else
                                                     {prefix + key})}


def test_the_reference_config_table_has_every_key():
    """Every key of the config is a row of the reference's table (a group's `name` is its row; a model's keys are the
    models table's)."""
    rows = table(ROOT / "docs" / "reference.md", "| key | options | default |")
    documented = {k for row in rows for k in re.findall(r"`([a-z0-9_.]+)`", row[0])}
    keys = set().union(*(leaves(OmegaConf.to_container(composed(o), resolve=False))
                         for o in ((), ("framework=torch",))))
    missing = {k for k in keys if not k.startswith("model.") and k not in documented
               and k.removesuffix(".name") not in documented}
    assert not missing, f"reference.md's config table lacks {', '.join(sorted(missing))}"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    fence, out = False, set()
    for line in path.read_text().splitlines():
        fence ^= line.startswith("```")
        if not fence and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


LINKS = [pytest.param(path, target, id=f"{path.relative_to(ROOT)} {target}") for path in DOCS
         for target in sorted(set(re.findall(r"\]\(([^)\s]+)\)", path.read_text())))
         if not target.startswith(("http:", "https:", "mailto:"))]


@pytest.mark.parametrize("path,target", LINKS)
def test_every_link_and_anchor_resolves(path, target):
    file, _, anchor = target.partition("#")
    resolved = (path.parent / file).resolve() if file else path
    assert resolved.exists(), f"{path.relative_to(ROOT)}: {target} is no file"
    if anchor and resolved.suffix == ".md":
        assert anchor in anchors(resolved), f"{path.relative_to(ROOT)}: {target}: no such heading"


def options(name: str) -> set[str]:
    """The long options `nnbench NAME --help` lists."""
    _, mine = parser(name)
    return {s for action in mine._actions for s in action.option_strings if s.startswith("--")} - {"--help"}


def test_every_commands_options_are_the_ones_commands_md_lists():
    """commands.md's table of each command's options and each command's parser agree both ways: a flag added,
    renamed or removed on one side fails here, naming the command."""
    rows = table(ROOT / "docs" / "commands.md", "| command | options |")
    listed = {name: set(re.findall(r"`(--[a-z0-9-]+)`", cell)) for names, cell in rows
              for name in re.findall(r"`([a-z]+)`", names)}
    assert set(listed) == set(COMMANDS) - {"run"}, "commands.md's options table lists other commands than nnbench has"
    for name, flags_listed in listed.items():
        have = options(name)
        assert flags_listed == have, (f"nnbench {name}: commands.md lists {sorted(flags_listed - have)} it lacks, "
                                      f"and lacks {sorted(have - flags_listed)}")


def logged_names() -> tuple[set[str], set[str]]:
    """The params and the per-op metric names (`median_s`, `speedup`, ...) a point's run carries, from the code."""
    from experiments.common.columns import DERIVED, PARAMS
    from experiments.stats.paired import PAIRED
    from experiments.common.protocol import METRICS, STATS

    return set(PARAMS), {*STATS, *METRICS, *DERIVED, *PAIRED}


def test_the_reference_names_every_param_and_metric_a_point_logs():
    """reference.md's tables of a point's run name each param and per-op metric the code logs."""
    text = (ROOT / "docs" / "reference.md").read_text()
    params, metrics = logged_names()
    missing = sorted(n for n in params | metrics if f"`{n}`" not in text)
    assert not missing, f"reference.md does not document {', '.join(missing)}"


def python_blocks(path: Path):
    """(line number, source) of every fenced python block."""
    lines, start, block = path.read_text().splitlines(), None, []
    for n, line in enumerate(lines, 1):
        if start is None and line.strip() == "```python":
            start, block = n, []
        elif start is not None and line.startswith("```"):
            yield start, "\n".join(block)
            start = None
        elif start is not None:
            block.append(line)


@pytest.mark.parametrize("path,n,source", [pytest.param(path, n, source, id=where(path, n)) for path in DOCS
                                           for n, source in python_blocks(path)])
def test_every_python_block_compiles_and_names_logged_fields(path, n, source):
    """A Python recipe (pandas over `mlflow.search_runs`, a network's build()) is valid Python, and every
    `params.X` and `metrics.<op>_X` column it reads is one a point's run carries."""
    compile(source, where(path, n), "exec")
    params, metrics = logged_names()
    from experiments.common.config import OPS

    for kind, name in re.findall(r"\b(params|metrics)\.([a-z0-9_]+)", source):
        if kind == "params":
            assert name in params, f"{where(path, n)}: no point logs the param {name}"
        else:
            op, _, metric = name.partition("_")
            assert op in OPS and metric in metrics, f"{where(path, n)}: no point logs the metric {name}"
