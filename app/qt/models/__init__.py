"""Qt item models over the conversation data: the list, the tree, search results."""
