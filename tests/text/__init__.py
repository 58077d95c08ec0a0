"""Tests of app/text: attachments, plain words, quantities."""
