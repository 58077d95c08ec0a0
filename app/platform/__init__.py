"""Where Arbor stands on this machine: its data folder, its version, its
bundled resources and starter model, the system libraries Qt needs."""
