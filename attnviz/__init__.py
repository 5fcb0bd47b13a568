"""attnviz: see and debug what multi-head attention does to the text you type."""

__version__ = "0.1.0"
