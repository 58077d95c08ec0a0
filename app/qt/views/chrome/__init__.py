"""The main window: what holds the other views, and what surrounds them.

- ``main_window``: ``MainWindow``, which shows what the presenter decides.
- ``window_layout``: the window's widgets and where they sit (``PanelSplitter``).
- ``window_actions``: the ``QAction``s and menus, from ``app.window.actions``.
- ``status_bar``: ``ArborStatusBar``: model, context use, speed, busy state.
- ``download_status``: downloads in the status bar, welcome page and offer bar.
- ``zoom``: ``TextZoom``, the conversation's text size.
- ``exchange_actions``: File → Export and Import conversation.
- ``about``: the text of Help → About.
"""
