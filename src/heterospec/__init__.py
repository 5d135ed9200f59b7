"""heterospec: heterogeneous speculative inference, reproduced."""
from heterospec.progress import quiet_library_bars

__version__ = "0.1.0"

quiet_library_bars()   # before any stage imports transformers: its bars would fill a log with \r-updates
