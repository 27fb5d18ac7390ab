"""A parent run, never left RUNNING: a command's (`versions`, `bisect`, `history`: `with parent_run(...) as run:`)
or a sweep's (started by `sweep.opening`, closed by `sweep.ending` or `nnbench upload`, in other Hydra callbacks or
processes: a `Parent` by its id). `ending` is the one rule for the status every parent closes with.

In `parent_run` the block may close the run with its answer (`run.finish`), or say how it ends (`run.status`);
leaving the block closes it if the block did not: with `run.status` (FINISHED) on a normal exit, KILLED on an
interrupt (Ctrl-C, SIGTERM: `common.interrupts.Interrupted` is a KeyboardInterrupt), FAILED on any other exception,
which goes on up. A store that fails while closing it is not said: the command's own answer or error comes first,
and `nnbench upload` closes runs left open."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from experiments.store import tracking

FINISHED, FAILED, KILLED = tracking.TERMINAL


def ending(interrupted: bool = False, failed: bool = False) -> str:
    """How a parent run ends, a command's or a sweep's: KILLED where a signal stopped its work (resume goes on from
    it), else FAILED where its work failed or is not all in the store, else FINISHED."""
    return KILLED if interrupted else FAILED if failed else FINISHED


@dataclass
class Parent:
    """An open parent run: its store, its id, and the status it closes with (FINISHED unless its work says
    otherwise: `ending`)."""

    store: tracking.Store
    run_id: str
    status: str = FINISHED
    closed: bool = False

    @classmethod
    def start(cls, store: tracking.Store, experiment_id: str, name: str, params: dict, kind: str,
              nest_under: str | None = None) -> Parent:
        """A parent run `name` tagged `nnbench.<kind>`, with `params`, nested under the run `nest_under`."""
        return cls(store, store.start_parent(experiment_id, name, params, nest_under, kind=kind))

    def finish(self, artifacts: Path, note: str = "", tags: dict[str, str] | None = None,
               metrics: dict[str, float] | None = None) -> None:
        """Close it with its answer (`Store.finish_parent`): the description, metrics, tags and the report's
        artifacts."""
        self.store.finish_parent(self.run_id, artifacts, self.status, note, metrics, tags)
        self.closed = True

    def close(self, status: str, quiet: bool = True) -> None:
        """Close it with `status`, if still open; quietly where the store fails, unless not `quiet`."""
        if not self.closed:
            self.store.set_status(self.run_id, status, quiet=quiet)
            self.closed = True


@contextlib.contextmanager
def parent_run(store: tracking.Store, experiment_id: str, name: str, params: dict, kind: str) -> Iterator[Parent]:
    """A parent run `name` tagged `nnbench.<kind>`, with `params`, open while the block runs, closed when it ends."""
    run = Parent.start(store, experiment_id, name, params, kind)
    try:
        yield run
    except KeyboardInterrupt:
        run.close(ending(interrupted=True))
        raise
    except BaseException:
        run.close(ending(failed=True))
        raise
    run.close(run.status)
