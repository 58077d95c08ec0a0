"""The jobs' contract (app/jobs): every job is in the ``Job`` union that the
runner's and the presenter's ``match`` statements check for exhaustiveness,
and each says its own words and result type."""

from __future__ import annotations

import pickle
import typing
from pathlib import Path

import pytest

from app import jobs
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.jobs.base import BaseJob
from app.jobs.results import Done, Succeeded


def _leaves(cls: type) -> set[type]:
    below = set(cls.__subclasses__())
    return {c for c in below if not c.__subclasses__()} | {
        leaf for c in below for leaf in _leaves(c)
    }


def test_every_job_is_in_the_union():
    # A job left out of ``Job`` would escape mypy's exhaustiveness checks.
    assert set(typing.get_args(jobs.Job)) == _leaves(BaseJob)
    assert len(typing.get_args(jobs.Job)) >= 28


@pytest.mark.parametrize("cls", typing.get_args(jobs.Job), ids=lambda c: c.__name__)
def test_each_job_names_its_title_and_result(cls):
    assert cls.failure.startswith(("Could not", "Cannot"))
    assert cls.result_type in typing.get_args(Succeeded)


def test_a_job_without_a_title_is_refused_where_it_is_defined():
    with pytest.raises(TypeError, match="failure"):

        class Untitled(BaseJob):
            result_type = Done


def test_the_words_and_who_generates():
    params = SamplingParams()
    load = jobs.LoadModel(Path("m.gguf"), BackendSettings())
    assert (load.busy, load.progress(1, 4)) == (
        "Loading the model…",
        "Loading the model… 25%",
    )
    send = jobs.Send(1, "hi", params)
    assert isinstance(send, jobs.Generating)
    assert send.progress(1500, 2000) == "Reading the prompt… 1,500 of 2,000 tokens"
    answer = jobs.AnswerCalls(1, (("c", "run"),), params)
    assert (answer.busy, answer.failure) == (
        "Running the tool…",
        "Could not go on with the tools",
    )
    assert jobs.Regenerate(1, params).failure == "Could not generate a reply"
    assert not isinstance(jobs.ContinueWithSummary(1, params), jobs.Generating)
    assert jobs.SaveToolServers(()).busy is None
    assert jobs.RenameConversation(1, "t").progress(1, 2) is None
    assert jobs.EvictCheckpoints(10).progress(2_000_000, 5_000_000) == (
        "Freeing space… 2.0 MB of 5.0 MB"
    )


def test_jobs_cross_to_a_child_process():
    # Pickled to the runner's child process: the words stay on the class.
    job = jobs.Send(3, "hello", SamplingParams(), budget_bytes=10)
    again = pickle.loads(pickle.dumps(job))
    assert again == job
    assert again.busy == "Generating…"
