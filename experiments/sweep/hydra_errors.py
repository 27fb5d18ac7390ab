"""Hydra's and OmegaConf's composition errors as one line that names the valid choices or the fix.

Hydra prints 4-13 lines for a misspelled option or key (with a search path and a HYDRA_FULL_ERROR hint), and for
`batchsize=32` advises `+batchsize=32`, which would add a key nothing reads. `explain` turns each of them into
the line that follows `nnbench: error:`.
"""
from __future__ import annotations

import difflib
import re

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

from experiments.common.config import CONF
from experiments.common.errors import first_line

GRAMMAR = "https://hydra.cc/docs/1.3/advanced/override_grammar/basic/"
KINDS = (  # OmegaConf's words for a value of the wrong type -> what the value must be
    ("could not be converted to Integer", "an integer"),
    ("could not be converted to Float", "a number"),
    ("is not a valid bool", "true or false"),
)
# The fix for the keys users set most; another number gets "e.g. key=<the value it had>".
HINTS = {
    "batch_size": "use e.g. batch_size=32, or batch_size=null for the model's batch lists",
    "ops": "use e.g. ops=[inference,training] (ops: inference, training, grad)",
    "seed": "use e.g. seed=0",
    "repeat": "use e.g. repeat=0,1,2 with -m",
}


def options(group: str) -> list[str]:
    """The options of a config group, from conf/<group>/*.yaml."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=2, cutoff=0.75)
    return f"did you mean {' or '.join(close)}? " if close else ""


def explain(e: BaseException) -> str:
    """One line for any error raised while composing the config."""
    cause = e.__cause__ or e.__context__
    if isinstance(e, MissingConfigException):
        return missing_option(e.missing_cfg_file or "", list(e.options or []))
    if isinstance(e, OverrideParseException):
        return parse_error(e.override, str(cause or e))
    if isinstance(e, ConfigCompositionException) and str(e).startswith("Ambiguous value for argument"):
        arg = re.search(r"argument '([^']*)'", str(e))
        return (f"{arg.group(1) if arg else 'an override'} sweeps several values: add -m to run a sweep "
                "(python -m experiments.run -m ...), or write a list as key=[a,b]")
    if isinstance(e, MissingMandatoryValue) or isinstance(cause, MissingMandatoryValue):
        err = e if isinstance(e, MissingMandatoryValue) else cause
        group = (err.full_key or "").split(".")[0]
        choose = f" (choose {', '.join(options(group))})" if options(group) else ""
        return f"{group if choose else err.full_key} needs a value{choose}"
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):  # a key that doesn't exist
        return unknown_key(cause.full_key or "", list(getattr(cause.parent_node, "keys", lambda: [])()))
    if isinstance(cause, ValidationError):
        return bad_value(cause)
    return first_line(e)


# Config groups whose options a Hydra plugin brings (conf/hydra/launcher/slurm.yaml extends submitit_slurm)
PLUGINS = {"hydra/launcher": "pip install -e '.[launchers]' in the checkout (hydra-submitit-launcher for submitit_* "
                             "and slurm, hydra-joblib-launcher for joblib)"}


def missing_option(missing: str, choices: list[str]) -> str:
    if "/" not in missing:
        return f"no primary config {missing!r} in {CONF} (--config-name): use config"
    group, _, option = missing.rpartition("/")
    if not choices and group in PLUGINS:  # the group's options come with a Hydra plugin that is not installed
        return f"{group}={option} needs its Hydra plugin: {PLUGINS[group]}"
    if not option:
        return f"{group} needs a value (choose {', '.join(choices)})"
    return f"unknown {group} {option!r} ({did_you_mean(option, choices)}choose {', '.join(choices)})"


def parse_error(override: str, reason: str) -> str:
    reason = re.sub(r"\s*expecting \{.*\}", "", first_line(Exception(reason)))  # drop the token list
    hint = "a sweep is key=a,b,c with no empty item" if ",," in override or override.endswith(",") else (
        f"see {GRAMMAR}")
    return f"cannot parse {override!r} ({reason}): {hint}"


def unknown_key(full_key: str, here: list[str]) -> str:
    parent, _, key = full_key.rpartition(".")
    here = [k for k in here if k != "hydra"]
    if parent == "model":
        return f"this model has no key {key!r} (its keys: {', '.join(k for k in here if k != 'name') or 'none'})"
    close = difflib.get_close_matches(key, here, n=1, cutoff=0.6)
    fix = f"did you mean {'.'.join(filter(None, [parent, close[0]]))}?" if close else (
        f"keys{' in ' + parent if parent else ''}: {', '.join(here)}")
    return f"unknown key {full_key!r}: {fix}"


def bad_value(err) -> str:
    """A value of the wrong type or outside an enum, named with its key and the fix."""
    key, msg = re.sub(r"\[\d+\]$", "", err.full_key or ""), first_line(err)
    got = re.search(r"[Vv]alue '(.*?)'", msg)
    got = f" (got {got.group(1)!r})" if got else ""
    if "is not a ListConfig" in msg:
        return f"{key} must be a list: {HINTS.get(key, f'use e.g. {key}=[a,b]')}"
    if "is not a subclass of" in msg:
        return f"{key} is a group of keys ({key}.<key>=...), not a value"
    if m := re.search(r"expected one of \[(.*)\]", msg):
        return f"ops holds unknown op{got}: {HINTS['ops']}" if key == "ops" else f"{key} must be one of {m[1]}{got}"
    what = next((w for pattern, w in KINDS if pattern in msg), None)
    if what is None:
        return f"{key}: {msg}"
    hint = HINTS.get(key) or example(err, key)
    return f"{key} must be {what}{got}" + (f": {hint}" if hint else "")


def example(err, key: str) -> str:
    """`use e.g. key=<the value it had>`, for a number."""
    try:
        value = err.parent_node[err.key]
    except Exception:
        return ""
    return f"use e.g. {key}={value}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
