"""Tests of app/conversation: the service, its spans, batches and tree."""
