"""heterospec: heterogeneous speculative inference, reproduced."""
__version__ = "0.1.0"
