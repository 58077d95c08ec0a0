"""Qt item models over the conversation data, and the Qt-free snapshots behind them."""
