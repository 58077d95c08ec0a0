"""Tests of app/window: the presenter without a window."""
