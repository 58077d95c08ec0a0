"""What every job says of itself: its words and the result it makes.

The floor of ``app.jobs``: the results (``app.jobs.results``) name the job
they answer as a ``BaseJob``, and the jobs (``app.jobs``) name their result
types, so this class stands below both and the two need not import each
other both ways.
"""

from __future__ import annotations

from typing import Any, ClassVar


class BaseJob:
    """A job's words and result type, read by the window and the runner.

    A subclass names ``failure`` and ``result_type`` (checked when it is
    defined: a job without a title for its error dialog cannot be made);
    ``busy`` and ``progress`` default to saying nothing.
    """

    # The status bar's text while the job runs; None: nothing is said.
    busy: ClassVar[str | None] = None
    # The title of the message that says the job failed.
    failure: ClassVar[str]
    # The result the job makes when it succeeds (``Failed`` when it does not):
    # one of ``app.jobs.results.Succeeded``, which cannot be named here.
    result_type: ClassVar[type[object]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [n for n in ("failure", "result_type") if not hasattr(cls, n)]
        if missing:
            raise TypeError(f"The job {cls.__name__} does not name {missing}.")

    def progress(self, done: int, total: int) -> str | None:
        """What the status bar says when the job has done ``done`` of
        ``total`` (None: it reports no progress)."""
        return None
