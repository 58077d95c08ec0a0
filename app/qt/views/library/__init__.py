"""Models to load or to fetch, wherever the window offers them.

- ``welcome``: ``WelcomePage``, until a model is loaded: a file, or a download.
- ``downloads``: a download's line of text, its row, and the panel of rows.
- ``starter_offer``: ``StarterOfferBar``, the recommended model beside the starter.
- ``model_offer``: ``ModelOfferBar``, the model a conversation was made with.
- ``button_row``: ``ButtonRow``, an offer's buttons, side by side or stacked.
"""
