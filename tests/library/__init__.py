"""Tests of app/library: the catalog, the Hub, downloads, model names."""
