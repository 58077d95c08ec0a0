"""Arbor's persistence layer: SQLAlchemy 2.0 on SQLite.

Never imports Qt or llama_cpp. Holds conversations as trees of nodes, the backend
profiles that made checkpoints, and the checkpoint blobs themselves (in their own
table, so listing a tree never loads them).
"""
