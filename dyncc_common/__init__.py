"""dyncc's process plumbing, shared by the edge and the central side; imports nothing else of dyncc.

errors (the exception tree), units (durations, sizes), runtime (logging, metrics endpoint,
stop flag), files (atomic write), heap, names (POP / broker / topic checks), kafka_log.
This module itself stays empty but for the version: `dyncc collect --once` imports it first.
"""

__version__ = "0.1.0"
