"""The headless command line: its grammar (parser), the commands (commands),
what they print (output), the terminal chat (chat_repl) and Ctrl+C (interrupt)."""
