"""The conversation service: trees of messages driven through the backend (no Qt)."""
