"""confluent-kafka's Producer without the package's Python layer, for a fast collector start.

`import confluent_kafka` runs the package's `__init__`, which imports its
serializer and schema-registry helpers and through them asyncio, ssl, typing
and enum, on the critical path of every `dyncc collect --once` (docs/performance.md,
start-up).  The collector needs only the
C extension (`confluent_kafka.cimpl`: Producer, KafkaError, KafkaException),
which imports nothing at load time.

producer_class() loads `confluent_kafka.cimpl` under a placeholder parent
package that is removed again at once, so a later `import confluent_kafka`
(by this process or a library) runs the real `__init__` and finds the same
`cimpl` module already loaded: `confluent_kafka.Producer is producer_class()`.
The placeholder is used only while this is the process's sole thread (no
other thread can import the package halfway through); otherwise, or when the
package is already imported, this is a plain `from confluent_kafka import Producer`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

PACKAGE = "confluent_kafka"
EXTENSION = "confluent_kafka.cimpl"


def producer_class() -> Any:
    """confluent_kafka's Producer class, loading as little of the package as possible."""
    loaded = sys.modules.get(EXTENSION)
    if loaded is None and PACKAGE not in sys.modules and threading.active_count() == 1:
        loaded = _load_extension_alone()
    if loaded is not None:
        return loaded.Producer
    from confluent_kafka import Producer

    return Producer


def _load_extension_alone() -> types.ModuleType | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None  # not installed: the plain import raises the usual error
    placeholder = types.ModuleType(PACKAGE)
    placeholder.__path__ = list(spec.submodule_search_locations)
    placeholder.__spec__ = spec
    sys.modules[PACKAGE] = placeholder
    try:
        return importlib.import_module(EXTENSION)
    except Exception:  # a release whose extension needs its package: import it the usual way
        for name in [m for m in sys.modules if m.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        return None
    finally:
        if sys.modules.get(PACKAGE) is placeholder:
            del sys.modules[PACKAGE]
