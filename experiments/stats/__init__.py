"""The statistics room: every judgement the parent makes on measured times, for the paired and the unpaired engine
and the reports alike. A worker measures (`measure/`); these modules judge, on the parent's side.

- `verdicts`: `Verdict`, the rule that calls a change, Benjamini-Hochberg q-values, an error rate's interval
- `unpaired`: Welch's test on per-process medians (`judge`), for history, bisect and calibrate
- `paired`: a paired cell's trials judged (`judge_pairs`): its ratio, interval, p and q, verdict
- `looks`: the sequential looks' level (Pocock's boundary)
- `geomean`: the geometric mean over paired cells, with its interval
- `ratios`: a trial's log ratio from its bursts
- `outliers`: processes and trials read far off under load; points not measurable here
- `changepoints`: change points in a point's series along an axis
"""
