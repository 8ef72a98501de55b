"""Route-change notifications for the edge agent (netlink multicast, read-only).

A daemon thread listens on RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE in the target
namespace and sets `changed` whenever a main-table route that is NOT ours
appears or goes (our own writes are ignored, so applying never re-triggers
itself).  The agent's loop reconciles when it sees the flag.  A receive
overflow (ENOBUFS) also sets the flag: events were lost, so reconcile.
"""

from __future__ import annotations

import errno
import logging
import select
import threading

from collector.agent.routes import open_netlink
from collector.netlink.rtnetlink import (
    RT_TABLE_MAIN,
    RTM_DELROUTE,
    RTM_F_CLONED,
    RTM_NEWROUTE,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_ROUTE,
    iter_messages,
    parse_route,
)

log = logging.getLogger("dyncc.agent.events")


class RouteEventWatcher:
    def __init__(self, netns: str | None, proto: int, table: int = RT_TABLE_MAIN) -> None:
        self.proto = proto
        self.table = table
        self.changed = threading.Event()
        self.events = 0
        self._stop = threading.Event()
        self._sock = open_netlink(netns, groups=RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE)
        self._thread = threading.Thread(target=self._run, name="dyncc-agent-route-events", daemon=True)

    def start(self) -> RouteEventWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def relevant(self, data: memoryview) -> bool:
        for msg_type, _flags, _seq, payload in iter_messages(data):
            if msg_type not in (RTM_NEWROUTE, RTM_DELROUTE):
                continue
            rec = parse_route(payload)
            if rec is None or rec.table != self.table or rec.flags & RTM_F_CLONED:
                continue
            if rec.proto != self.proto:
                return True
        return False

    def _run(self) -> None:
        buf = bytearray(1 << 16)
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._sock], [], [], 0.5)
                if not ready:
                    continue
                size = self._sock.recv_into(buf)
            except OSError as exc:
                if self._stop.is_set():
                    return
                if exc.errno == errno.ENOBUFS:
                    self.changed.set()  # lost events: reconcile to be safe
                    continue
                log.warning("route event socket error: %s", exc)
                self._stop.wait(1.0)
                continue
            if self.relevant(memoryview(buf)[:size]):
                self.events += 1
                self.changed.set()
