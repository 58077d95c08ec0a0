"""Helpers the tests share: tiny models, stand-in servers, harnesses. No tests."""
