"""A command's parent run (`versions`, `bisect`, `history`), never left RUNNING: `with parent_run(...) as run:` opens
it; the block may close it with its answer (`run.finish`), or say how it ends (`run.status`); leaving the block
closes it if the block did not: with `run.status` (FINISHED) on a normal exit, KILLED on an interrupt (Ctrl-C,
SIGTERM: `common.interrupts.Interrupted` is a KeyboardInterrupt), FAILED on any other exception, which goes on up.
A store that fails while closing it is not said: the command's own answer or error comes first, and `nnbench
upload` closes runs left open."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from experiments.store import tracking


@dataclass
class Parent:
    """An open parent run: its store, its id, and the status it closes with (FINISHED unless its work says KILLED,
    a sweep stopped by a signal, or FAILED, a sweep that failed)."""

    store: tracking.Store
    run_id: str
    status: str = "FINISHED"
    closed: bool = False

    def finish(self, artifacts: Path, note: str = "", tags: dict[str, str] | None = None) -> None:
        """Close it with its answer (`Store.finish_parent`): the description, tags and the report's artifacts."""
        self.store.finish_parent(self.run_id, artifacts, self.status, note=note, tags=tags)
        self.closed = True

    def close(self, status: str) -> None:
        """Close it with `status`, if still open; quietly where the store fails."""
        if not self.closed:
            self.store.set_status(self.run_id, status, quiet=True)
            self.closed = True


@contextlib.contextmanager
def parent_run(store: tracking.Store, experiment_id: str, name: str, params: dict, kind: str) -> Iterator[Parent]:
    """A parent run `name` tagged `nnbench.<kind>`, with `params`, open while the block runs, closed when it ends."""
    run = Parent(store, store.start_parent(experiment_id, name, params, kind=kind))
    try:
        yield run
    except KeyboardInterrupt:
        run.close("KILLED")
        raise
    except BaseException:
        run.close("FAILED")
        raise
    run.close(run.status)
