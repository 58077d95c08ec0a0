"""Tests of app/runner: jobs run in a child process."""
