"""The side panels that choose what the transcript shows.

- ``sidebar``: ``Sidebar``, the conversations, most recent first.
- ``conversation_delegate``: a conversation in that list, title over figures.
- ``tree_panel``: ``TreePanel``, the conversation's tree as a list or a graph.
- ``tree_graph``: ``TreeGraphView``, the tree drawn as a graph.
- ``tree_layout``: where the graph puts each node (Qt-free).
"""
