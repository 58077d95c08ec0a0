"""Widgets and windows of the desktop app, grouped by what the user looks at.

- ``chrome/``: the main window itself: its layout, actions and menus, status
  bar, text zoom, About text, export and import.
- ``transcript/``: the conversation in the middle: message cards and their
  bodies (Markdown, reasoning, tool calls, alternatives), and the composer.
- ``tree/``: the side panels that choose what the transcript shows: the
  conversation list (left) and the conversation's tree (right).
- ``library/``: models to load or fetch: the welcome page, downloads, and the
  offer bars above the conversation.
- ``dialogs/``: every dialog and its parts.
- ``theme`` (palette, style sheet, icons) and ``elided_label`` are shared by all.

Imports run one way: ``chrome`` imports the other groups, the dialogs import
``library``, any may import ``theme`` and ``elided_label``, and nothing
below ``chrome`` imports it.
"""
