"""Report pages: report.md (PNGs beside it), a self-contained report.html, summary.csv and the plots, for a sweep's
parent run and for `nnbench compare --out`. Parent side."""
from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.common.config import DEFAULT_BASELINE
from experiments.report.regressions import History, overview, regressions_markdown
from experiments.report.plots import plot_breakdown, plot_lines, plot_speedup, plot_trend
from experiments.report.tables import breakdown, breakdown_markdown, differences, markdown, summary


@dataclass(frozen=True)
class Page:
    """A report's page: its title, the table (as a DataFrame for the HTML, and its Markdown), the PNGs, a note under
    the table, (heading, Markdown) sections after it, and `lead`, a line above it (a sweep's answer)."""

    title: str
    table: pd.DataFrame
    table_md: str
    pngs: list[Path]
    note: str = ""
    sections: list[tuple[str, str]] = ()
    lead: str = ""

    def write(self, out: Path) -> None:
        """report.md (PNGs beside it) and a self-contained report.html (PNGs embedded; every text escaped, so a
        title or a value holding `<` cannot break the page)."""
        title, lead, note, pngs, sections = self.title, self.lead, self.note, self.pngs, self.sections
        md = "".join(f"\n## {head}\n\n{text}\n" for head, text in sections)
        top = f"**{lead}**\n\n" if lead else ""
        (out / "report.md").write_text(f"# {title}\n\n{top}{self.table_md}\n{note}\n{md}\n"
                                       + "".join(f"![{p.stem}]({p.name})\n\n" for p in pngs))
        imgs = "".join(f'<h3>{html.escape(p.stem)}</h3><img src="data:image/png;base64,'
                       f'{base64.b64encode(p.read_bytes()).decode()}">' for p in pngs)
        html_table = self.table.to_html(index=False, float_format=lambda v: f"{v:.6g}", escape=True)
        html_table = (f"<p><b>{html.escape(lead)}</b></p>" if lead else "") + html_table
        extra = "".join(f"<h2>{html.escape(head)}</h2><pre>{html.escape(text)}</pre>" for head, text in sections)
        t = html.escape(title)
        (out / "report.html").write_text(f"<html><head><meta charset='utf-8'><title>{t}</title></head><body>"
                                         f"<h1>{t}</h1>{html_table}<pre>{html.escape(note)}</pre>{extra}{imgs}"
                                         "</body></html>")


def write(t: pd.DataFrame, out: Path, baseline: str = DEFAULT_BASELINE, title: str = "nnbench report",
          headline: str = "") -> dict:
    """report.md, report.html, summary.csv and the PNGs, the `headline` (a sweep's answer) above the table; returns
    {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    s = summary(t, baseline)
    s.to_csv(out / "summary.csv", index=False)
    pngs = []
    for (model, op), _ in t.groupby(["model", "op"], sort=True):
        pngs += [plot_lines(t, model, op, out / f"time_{model}_{op}.png"),
                 plot_lines(t, model, op, out / f"throughput_{model}_{op}.png", y="throughput_samples_per_s"),
                 plot_lines(t, model, op, out / f"mfu_{model}_{op}.png", y="mfu")]
    sp = plot_speedup(t, baseline, out / "speedup.png")
    pngs = [p for p in [*pngs, sp] if p]
    note = "" if sp else f"(no speedup chart: the baseline {baseline} is not in this selection)"
    sections = []
    b = breakdown(t, baseline)
    if not b.empty:  # profile=true: where one step's time goes, per variant
        b.to_csv(out / "breakdown.csv", index=False)
        pngs += [plot_breakdown(b, m, op, bs, out / f"breakdown_{m}_{op}_bs{bs}.png")
                 for (m, op, bs), _ in b.groupby(["model", "op", "batch_size"])]
        sections = [("Where one step's time goes (profile=true)", breakdown_markdown(b)),
                    ("What differs most, per pair of variants", "\n".join(f"- {d}" for d in differences(b)))]
    Page(title, s, markdown(s), pngs, note, sections, headline).write(out)
    (out / "summary.json").write_text(json.dumps({"baseline": baseline, "runs": int(t["run_id"].nunique())}))
    return {p.name: p for p in out.iterdir()}


def write_history(h: History, out: Path, title: str, note: str = "") -> list[Path]:
    """report.md/html with the regressions table and the series, a trend plot per (model, op) with its steps marked,
    regressions.csv and series.csv; returns the files written."""
    s, r, values, by = h.series, h.regressions, h.values, h.by
    out.mkdir(parents=True, exist_ok=True)
    r.to_csv(out / "regressions.csv", index=False)
    s.assign(process_medians_s=s["process_medians_s"].map(lambda ms: " ".join(f"{m:.6g}" for m in ms))).to_csv(
        out / "series.csv", index=False)
    pngs = [plot_trend(h, m, op, out / f"trend_{m}_{op}.png")
            for (m, op), _ in s.groupby(["model", "op"])]
    table = regressions_markdown(r) if not r.empty else "No change point: every series holds one level."
    Page(title, r, f"{table}\n\n## Median ms per {by}\n\n{overview(s, r, values)}\n", pngs, note).write(out)
    return sorted(out.iterdir())
