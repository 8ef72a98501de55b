"""The agent's eBPF programs (docs/enforce.md) and the modules around them.

cc_switch.c is the sock_ops program of `dyncc agent --enforce bpf` and cc_iter.c the TCP iterator
that moves open connections after a config change (both modes); both are package data.  build
compiles them with clang (`make bpf`), plan holds the sock_ops program's pure map contents and
iter_plan the iterator's (which open connections move), prog loads, pins, attaches and detaches
the sock_ops program through bpftool, maps is the only module that reads or writes BPF maps
(libbpf through ctypes), apply (`BpfApplier`) applies a config to the maps all or nothing, and
iterate (`OpenConnections`) runs the iterator once per change.  This module imports nothing;
the route mode loads only iterate and what it needs (iter_plan, plan, maps, build).
"""
