"""collector.telemetry.kafka_producer: the Producer without confluent_kafka's Python layer, and nothing broken after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_producer_loads_without_the_package_layer_and_the_package_still_imports_after() -> None:
    code = (
        "import sys\n"
        "from collector.telemetry.kafka_producer import producer_class\n"
        "P = producer_class()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('confluent_kafka', 'asyncio'))\n"
        "print(','.join(loaded))\n"
        "p = P({'bootstrap.servers': '127.0.0.1:1', 'enable.idempotence': True, 'compression.type': 'zstd'})\n"
        "print(type(p) is P)\n"
        "import confluent_kafka\n"
        "from confluent_kafka import KafkaException, TopicPartition\n"
        "from confluent_kafka.admin import AdminClient\n"
        "print(confluent_kafka.Producer is P, producer_class() is P)\n"
    )
    assert _run(code) == ["confluent_kafka.cimpl", "True", "True", "True"]


def test_an_imported_package_or_other_threads_mean_a_plain_import() -> None:
    code = (
        "import sys, threading\n"
        "import confluent_kafka\n"
        "from collector.telemetry.kafka_producer import producer_class\n"
        "print(producer_class() is confluent_kafka.Producer)\n"
    )
    assert _run(code) == ["True"]
    code = (
        "import sys, threading\n"
        "stop = threading.Event(); t = threading.Thread(target=stop.wait); t.start()\n"
        "from collector.telemetry.kafka_producer import producer_class\n"
        "P = producer_class()\n"
        "print('confluent_kafka.deserializing_consumer' in sys.modules)\n"
        "stop.set(); t.join()\n"
        "import confluent_kafka\n"
        "print(P is confluent_kafka.Producer)\n"
    )
    assert _run(code) == ["True", "True"]


def test_an_extension_that_needs_its_package_falls_back_to_the_plain_import() -> None:
    code = (
        "import importlib, sys\n"
        "real = importlib.import_module\n"
        "def failing(name, *a):\n"
        "    if name == 'confluent_kafka.cimpl' and type(sys.modules.get('confluent_kafka')).__name__ == 'module' \\\n"
        "            and not hasattr(sys.modules['confluent_kafka'], 'Producer'):\n"
        "        raise ImportError('needs the package')\n"
        "    return real(name, *a)\n"
        "importlib.import_module = failing\n"
        "from collector.telemetry.kafka_producer import producer_class\n"
        "P = producer_class()\n"
        "import confluent_kafka\n"
        "print(P is confluent_kafka.Producer, 'confluent_kafka.deserializing_consumer' in sys.modules)\n"
    )
    assert _run(code) == ["True", "True"]
