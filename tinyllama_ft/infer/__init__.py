"""Answers from a model. ``core`` is the one generation core (left-padded batches, the pad and stop tokens, the
decoder choice, streaming); Alpaca prompts (``generation``), conversations (``chat_generation``) and the try-out box
render their prompts and call it; ``fast/`` holds the CUDA-graph decoder and its kernels. Imports the
layers below (``data`` for prompts and formats).
"""
