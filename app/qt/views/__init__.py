"""Widgets and windows of the desktop app."""
