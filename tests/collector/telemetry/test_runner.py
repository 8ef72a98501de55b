"""The collect loop, its config and its sinks (own namespace, no servers needed)."""

from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from collector.telemetry.metrics import CollectMetrics
from collector.telemetry.poller import PollerConfig
from collector.telemetry.runner import CollectLoop
from collector.telemetry.settings import CollectSettings
from collector.telemetry.sinks import FileSink, KafkaSink, KafkaStart, StdoutSink
from dyncc.cli import main as cli_main
from dyncc_common.errors import ConfigError
from dyncc_common.runtime import StopFlag
from schemas.framing import split_frames
from schemas.tcpinfo_decode import decode_batch


def load_config(*argv: str) -> CollectSettings:
    """The settings `dyncc collect ARGV` runs with (the CLI's path: flags, then --config)."""
    p = argparse.ArgumentParser()
    CollectSettings.add_arguments(p)
    flags = vars(p.parse_args(list(argv)))
    return CollectSettings.from_sources(flags, flags.get("config"))


class SlowSink:
    """Wraps a sink: sleeps on each poll, stops the loop after `polls` polls."""

    def __init__(self, inner: FileSink, stop: StopFlag, delay: float, polls: int) -> None:
        self.inner, self.stop, self.delay, self.polls, self.seen = inner, stop, delay, polls, 0

    def begin_poll(self) -> None:
        self.inner.begin_poll()

    def send(self, data: bytes) -> None:
        self.inner.send(data)

    def end_poll(self) -> None:
        time.sleep(self.delay)
        self.inner.end_poll()
        self.seen += 1
        if self.seen >= self.polls:
            self.stop.set("test")

    def send_poll(self, batches: list[bytes]) -> None:
        raise AssertionError("the loop sends batch by batch")

    def service(self, timeout: float = 0.0) -> None:
        self.inner.service(timeout)

    def close(self, timeout: float) -> int:
        return self.inner.close(timeout)


def run_loop(tmp_path: Path, *argv: str, delay: float = 0.0, polls: int = 3) -> tuple[CollectMetrics, Path]:
    out = tmp_path / "out.bin"
    cfg = load_config("--sink", "file", "--out", str(out), "--no-default-excludes", *argv)
    metrics = CollectMetrics(prometheus=True)
    stop = StopFlag()
    sink = SlowSink(FileSink(out, metrics), stop, delay, polls)
    assert CollectLoop(cfg, sink, metrics, stop).run() == 0
    return metrics, out


def test_overrun_is_counted(tmp_path: Path) -> None:
    metrics, out = run_loop(tmp_path, "--interval", "50ms", "--jitter", "0s", delay=0.08, polls=3)
    assert metrics.value("dyncc_collect_polls_total") == 3
    assert metrics.value("dyncc_collect_overruns_total") == 3
    batches = [decode_batch(r) for r in split_frames(out.read_bytes())]
    assert [b.sequence for b in batches] == list(range(len(batches)))
    assert len({b.poll_start_ns for b in batches}) == 3


def test_poll_within_its_period_is_not_an_overrun(tmp_path: Path) -> None:
    metrics, _ = run_loop(tmp_path, "--interval", "1s", "--jitter", "0s", polls=2)
    assert metrics.value("dyncc_collect_polls_total") == 2
    assert metrics.value("dyncc_collect_overruns_total") == 0
    assert metrics.value("dyncc_collect_poll_duration_seconds_count") == 2


def test_poll_timeout_is_counted(tmp_path: Path) -> None:
    out = tmp_path / "out.bin"
    cfg = load_config("--sink", "file", "--out", str(out), "--once", "--timeout", "0.000001")
    metrics = CollectMetrics(prometheus=False)
    assert CollectLoop(cfg, FileSink(out, metrics), metrics, StopFlag()).run() == 0
    assert metrics.value("dyncc_collect_poll_timeouts_total") == 1
    assert out.read_bytes() == b""


def test_toml_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        '[collect]\ninterval = "5m"\nsink = "file"\nout = "/tmp/x"\nport = [443, 80]\n'
        'exclude = ["10.0.0.0/8"]\nsample = 4\nstate = ["established"]\nmin-bytes-acked = "1KiB"\n'
    )
    cfg = load_config("--config", str(conf), "--sample", "2", "--interval", "30s")
    assert cfg.interval == 30 and cfg.jitter == 3.0
    assert cfg.sink == "file" and cfg.out == "/tmp/x"
    assert PollerConfig.from_settings(cfg).filters.local_ports == {443, 80}
    assert PollerConfig.from_settings(cfg).filters.sample_n == 2
    assert PollerConfig.from_settings(cfg).filters.min_bytes_acked == 1024
    assert PollerConfig.from_settings(cfg).states == (1,)
    assert "10.0.0.0/8" in {str(n) for n in PollerConfig.from_settings(cfg).filters.exclude}
    assert "127.0.0.0/8" in {str(n) for n in PollerConfig.from_settings(cfg).filters.exclude}


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--interval", "soon"], "bad --interval"),
        (["--interval", "1s", "--jitter", "2s"], "bad jitter"),
        (["--sink", "file"], "needs --out"),
        (["--port", "70000"], "bad --port"),
        (["--state", "listening"], "bad state"),
        (["--exclude", "10.0.0.0/33"], "bad CIDR"),
        (["--sample", "0"], "bad --sample"),
        (["--netns", "dcol-does-not-exist"], "does not exist"),
        (["--topic", "a b"], "bad topic"),
        (["--max-bytes", "12"], "bad --max-bytes"),
        (["--config", "/nonexistent/c.toml"], "cannot read config"),
    ],
)
def test_bad_values_exit_2_with_one_line(argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["collect", "--once", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and reason in err and err.startswith("dyncc collect:")


def test_unknown_toml_key(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text("intervall = '5s'\n")
    with pytest.raises(ConfigError, match="unknown key 'intervall'"):
        load_config("--config", str(conf))


def test_file_sink_rotates_by_size(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    sink = FileSink(path, CollectMetrics(prometheus=False), rotate_bytes=1000, keep=2)
    for i in range(8):  # 404-byte records: two per file
        sink.send_poll([bytes([i]) * 400])
    sink.close(1)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["b.bin", "b.bin.1", "b.bin.2"]  # records 0 and 1 went with the oldest file
    assert split_frames(path.read_bytes()) == [bytes([6]) * 400, bytes([7]) * 400]
    assert split_frames((tmp_path / "b.bin.1").read_bytes()) == [bytes([4]) * 400, bytes([5]) * 400]
    assert split_frames((tmp_path / "b.bin.2").read_bytes()) == [bytes([2]) * 400, bytes([3]) * 400]


def test_stdout_sink_one_json_line_per_socket(tmp_path: Path) -> None:
    from collector.netlink.sockdiag import DEFAULT_STATES
    from collector.telemetry.poller import Poller

    cfg = load_config("--no-default-excludes", "--max-rows", "2")
    batches = Poller(PollerConfig.from_settings(cfg)).poll().batches
    rows = sum(decode_batch(b).row_count for b in batches)
    lines: list[str] = []
    StdoutSink(CollectMetrics(prometheus=False), write=lambda s: lines.extend(s.splitlines())).send_poll(batches)
    assert len(lines) == rows
    for line in lines:
        obj = json.loads(line)
        assert obj["state_name"] in DEFAULT_STATES  # the host's own sockets: any state the collector dumps
        assert "." in obj["src"] or ":" in obj["src"]
        assert obj["prefix"].endswith(("/24", "/56"))


def _unreachable_kafka_sink(metrics: CollectMetrics, queue_max_bytes: int, librdkafka_messages: int) -> KafkaSink:
    """A Kafka sink whose broker never answers (nothing listens on 127.0.0.1:9): its queues fill up."""
    start = KafkaStart(
        "127.0.0.1:9", "h", extra={"queue.buffering.max.messages": librdkafka_messages, "message.timeout.ms": 1000}
    )
    return KafkaSink(start, "t", metrics, queue_max_bytes=queue_max_bytes)


def test_kafka_queue_drops_oldest_whole_poll() -> None:
    metrics = CollectMetrics(prometheus=False)
    # librdkafka's own queue holds 2 messages, ours 2.5 kB (2 polls)
    sink = _unreachable_kafka_sink(metrics, queue_max_bytes=2500, librdkafka_messages=2)
    for i in range(4):
        sink.send_poll([bytes([i]) * 500, bytes([i]) * 500])
        assert sink.queue_bytes <= 2500
    # poll 0 went to librdkafka; poll 1 waited in our queue and was dropped whole for poll 3
    assert metrics.value("dyncc_collect_dropped_polls_total") == 1
    assert metrics.value("dyncc_collect_dropped_batches_total") == 2
    assert [p.batches[0][:1] for p in sink.queue] == [b"\x02", b"\x03"]
    assert sink.close(5) > 0  # undeliverable: reported, not hidden
    assert metrics.value("dyncc_collect_delivery_failures_total") >= 2


@contextmanager
def loopback_connections(n: int) -> Iterator[None]:
    """n established TCP connections on 127.0.0.1 (both ends open) for the duration."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(n)
    ends: list[socket.socket] = []
    try:
        for _ in range(n):
            c = socket.create_connection(lst.getsockname())
            s, _ = lst.accept()
            ends += [c, s]
        yield
    finally:
        for e in ends:
            e.close()
        lst.close()


def test_poll_hands_batches_on_while_it_runs() -> None:
    from collector.telemetry.filters import FilterSpec
    from collector.telemetry.poller import Poller, PollerConfig

    sent: list[tuple[int, bytes]] = []
    with loopback_connections(30):
        cfg = PollerConfig(host="t", filters=FilterSpec(), max_rows=7)
        result = Poller(cfg).poll(emit=lambda data: sent.append((time.time_ns(), data)))
    assert result.batches == []  # handed on, not kept
    got = [decode_batch(data) for _, data in sent]
    n = len(got)
    assert n >= 9 and result.sent_batches == n and result.sent_bytes == sum(len(d) for _, d in sent)
    assert [b.sequence for b in got] == list(range(n))
    assert [b.batch_index for b in got] == list(range(n))
    assert [b.batch_count for b in got] == [0] * (n - 1) + [n]
    last = got[-1]
    assert last.sockets_exported == sum(b.row_count for b in got) == result.exported >= 60
    assert max(b.row_count for b in got) <= 7
    # the first batches left before the dump had finished
    assert sent[0][0] < last.poll_end_ns


def test_kafka_queue_drops_the_rest_of_a_poll_that_alone_overflows_it() -> None:
    metrics = CollectMetrics(prometheus=False)
    sink = _unreachable_kafka_sink(metrics, queue_max_bytes=1200, librdkafka_messages=1)
    sink.begin_poll()
    for i in range(5):  # one goes to librdkafka, two wait, the third overflows: the poll is dropped
        sink.send(bytes([i]) * 500)
        assert sink.queue_bytes <= 1200
    sink.end_poll()
    assert metrics.value("dyncc_collect_dropped_polls_total") == 1
    assert metrics.value("dyncc_collect_dropped_batches_total") == 4
    assert sink.queue_bytes == 0 and not sink.queue
    sink.send_poll([b"n" * 500])  # the next poll is queued normally
    assert sink.queue_bytes == 500 and [p.batches for p in sink.queue] == [[b"n" * 500]]
    assert sink.close(3) > 0


def test_retried_dump_leaves_out_sockets_already_sent() -> None:
    from collector.netlink.sockdiag_parse import Parsed
    from collector.telemetry.filters import FilterSpec
    from collector.telemetry.poller import Encoder, PollerConfig
    from schemas.tcpinfo_decode import empty_columns

    def chunk(cookies: list[int]) -> Parsed:
        cols = empty_columns(len(cookies))
        del cols["client_prefix"], cols["client_prefix_len"]
        cols["cookie"] = np.array(cookies, dtype=np.uint64)
        cols["state"][:] = 1
        cols["dst_addr"][:, 10:12] = 0xFF
        cols["dst_addr"][:, 12:] = (198, 51, 100, 7)
        return Parsed(columns=cols, cc_names=[""], rows=len(cookies))

    cfg = PollerConfig(host="t", filters=FilterSpec(), max_rows=4)
    first: list[int] = []
    enc = Encoder(cfg, [""], lambda rows, body: first.append(rows))
    enc(chunk([1, 2, 3, 4, 5]))  # 4+ rows: flushed (sent) at once
    assert sum(first) == 5 and enc.sent_rows == 5
    retry: list[int] = []
    again = Encoder(cfg, [""], lambda rows, body: retry.append(rows), np.concatenate(enc.sent_cookies))
    again(chunk([1, 2, 3, 4, 5, 6, 7]))
    again.flush()
    assert sum(retry) == 2 and again.exported == 2 and again.seen == 7
