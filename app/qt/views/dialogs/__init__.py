"""Dialogs: settings, storage, new conversation, errors and crashes."""
