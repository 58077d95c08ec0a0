"""Tests of app/jobs: the jobs' contract."""
