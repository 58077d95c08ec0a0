"""Tests of app/platform."""
