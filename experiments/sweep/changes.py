"""Where the time went in a paired sweep's judged cells: each point compared with another (its record's
`compared_with`) and the point it was compared with, read from their dirs, and their profiles of an op side by side
(`report.profile_change`; both sides are profiled where report.profile_changed or profile=true). The sweep's end
prints them; `compare.paired` reads them into its rows for ab, versions and bisect. Parent side."""
from __future__ import annotations

import json
from pathlib import Path

from experiments.common.config import VARIANT_KEYS
from experiments.common.protocol import OpProfile
from experiments.stats.verdicts import Verdict
from experiments.report.profile_change import ProfileChange
from experiments.store import sweepdir
from experiments.store.records import PROFILE, Record

CHANGED = tuple(str(v) for v in Verdict if v.changed)


def points(directory: Path) -> dict[Path, Record]:
    """Every point the sweep under `directory` saved, by its dir."""
    return {d: Record.load(d) for d in sweepdir.saved(directory)}


def bases(loaded: dict[Path, Record]) -> dict[Path, Path]:
    """Each compared point's dir, to the dir of the point it was compared with (same cell, its variant)."""
    by_label = {(cell_of(rec), rec.tags.get("variant")): d for d, rec in loaded.items()}
    return {d: by_label[key] for d, rec in loaded.items()
            if (key := (cell_of(rec), rec.tags.get("compared_with"))) in by_label and rec.tags.get("compared_with")}


def cell_of(rec: Record) -> str:
    """What a point's cell holds fixed: its batch size and its config without the keys a comparison spans."""
    fixed = {k: v for k, v in rec.config.items() if k not in VARIANT_KEYS}
    return json.dumps([rec.params.get("batch_size"), fixed], sort_keys=True, default=str)


def change(a: Path | None, b: Path, op: str) -> ProfileChange | None:
    """A's and B's profiles of the op side by side, each scaled to its side's timed median where both records have
    one; None unless both were profiled (a sweep from before report.profile_changed, or one without it, has none)."""
    dirs = [d for d in (a, b) if d is not None]
    files = [d / PROFILE / op / "profile.json" for d in dirs]
    if len(files) < 2 or not all(f.exists() for f in files):
        return None
    timed = [Record.load(d).metrics.get(f"{op}_median_s") for d in dirs]
    return ProfileChange.of(*(OpProfile.from_json(f.read_text()) for f in files),
                            tuple(timed) if all(timed) else None)


def said(directory: Path) -> list[str]:
    """One line per cell judged slower or faster whose two sides were profiled: the cell, B against A, where the
    time went."""
    loaded = points(directory)
    out = []
    for b, a in bases(loaded).items():
        rec = loaded[b]
        for op in rec.params["ops"].split(","):
            verdict = rec.tags.get(f"{op}_verdict")
            if verdict in CHANGED and (c := change(a, b, op)):
                out.append(f"{rec.params['model']} {op} bs{rec.params['batch_size']} {rec.tags['variant']} against "
                           f"{rec.tags['compared_with']} ({verdict}): {c.said()}")
    return out
