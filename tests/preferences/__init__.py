"""Tests of app/preferences.py."""
