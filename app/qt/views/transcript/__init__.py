"""The conversation in the middle of the window: what was said, and the next message.

- ``transcript``: ``TranscriptView``, the active path as message cards.
- ``transcript_layout``: how tall a card will be before it is made.
- ``message_card``: ``MessageCard``, one message with its header and actions.
- ``message_body``: ``MessageBody``, read-only rich text as tall as its content.
- ``streaming_body``: a long reply's text while it streams, part by part.
- ``markdown``: Markdown to rich text, with highlighted code blocks.
- ``thinking``: ``ThinkingSection``, a reply's reasoning, folded.
- ``tool_cards``: a reply's tool calls and a tool's result.
- ``alternatives``: replies generated together, compared and picked.
- ``empty_state``: what a conversation shows before its first message.
- ``attachment_chips``: a message's files, one chip each.
- ``composer``: ``Composer``, where the user writes.
"""
