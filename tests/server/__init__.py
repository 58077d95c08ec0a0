"""Tests of app/server: ``arbor serve`` through real clients."""
