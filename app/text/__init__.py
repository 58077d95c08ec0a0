"""Message text helpers shared by the window and the conversation code:
attached files, and Markdown reduced to plain words."""
