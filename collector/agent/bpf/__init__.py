"""`dyncc agent --enforce bpf` (docs/enforce.md): the sock_ops program and the modules around it.

cc_switch.c is the program (package data); build compiles it with clang (`make bpf`), plan holds
the pure map contents, prog loads, pins, attaches and detaches it through bpftool, maps is the
only module that reads or writes BPF maps (libbpf through ctypes), apply (`BpfApplier`) applies a
config to the maps all or nothing.  This module imports nothing, so `dyncc agent` without
`--enforce bpf` never loads them.
"""
