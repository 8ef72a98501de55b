// SPDX-License-Identifier: GPL-2.0
// dyncc per-flow congestion-control switch: a cgroup sock_ops program for `dyncc agent --enforce bpf`.
//
// When a TCP connection of the cgroup is established (either side), its peer address is looked
// up in two LPM tries filled by the agent: dyncc_v4 (IPv4, and IPv4-mapped IPv6 peers as IPv4)
// and dyncc_v6.  A connection whose peer is in a selected prefix is set to the prefix's start
// algorithm (cubic) and watched through the per-RTT callback; once it has more than the prefix's
// `threshold` bytes acknowledged it is switched to the prefix's algorithm (bbr) with
// bpf_setsockopt(TCP_CONGESTION) and no longer watched.  An entry with a network-namespace
// cookie applies only to connections of that namespace, so several agents (one per edge
// namespace) can share one cgroup.  A peer that leaves the selection while watched (config
// change, kill switch) stops being watched and keeps its algorithm.  Unselected connections are
// never touched.
// Built by collector/agent/bpf/build.py (clang -target bpf -g); loaded, pinned and attached by
// collector/agent/bpf/prog.py (bpftool); the maps are written by collector/agent/bpf/maps.py.
// The map names, key/value layouts and counter indexes are mirrored in collector/agent/bpf/plan.py.
#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#define AF_INET6 10
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define CC_NAME_LEN 16

#ifndef MAX_PREFIXES
#define MAX_PREFIXES 65536
#endif

struct v4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct v6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct target {
	__u64 threshold;           // switch once bytes_acked > threshold
	__u64 netns;               // act only in the network namespace with this cookie (0 = any)
	char algorithm[CC_NAME_LEN]; // switch to this congestion control (NUL-padded name)
	char start[CC_NAME_LEN];     // set at establish ("" = keep the one the connection has)
};

// Counters (per CPU, summed by the agent): the indexes are part of the agent's contract.
enum {
	STAT_SELECTED = 0,   // established connections whose peer is selected
	STAT_SWITCHED = 1,   // connections switched to the prefix's algorithm
	STAT_FAILED = 2,     // bpf_setsockopt(TCP_CONGESTION) refused the switch
	STAT_RELEASED = 3,   // watched connections whose prefix left the selection before the threshold
	STAT_START_FAILED = 4, // bpf_setsockopt refused the start algorithm at establish
	STAT_OTHER_NETNS = 5, // selected peer, but a connection of another network namespace
	STAT_COUNT = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PREFIXES);
	__type(key, struct v4_key);
	__type(value, struct target);
} dyncc_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PREFIXES);
	__type(key, struct v6_key);
	__type(value, struct target);
} dyncc_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} dyncc_stats SEC(".maps");

static __always_inline void count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&dyncc_stats, &index);

	if (value)
		*value += 1;
}

static __always_inline struct target *selected(struct bpf_sock_ops *skops)
{
	struct v4_key k4 = { .prefixlen = 32 };
	struct v6_key k6 = { .prefixlen = 128 };
	__u32 w0, w1, w2, w3;

	if (skops->family == AF_INET) {
		w3 = skops->remote_ip4;
		__builtin_memcpy(k4.addr, &w3, 4);
		return bpf_map_lookup_elem(&dyncc_v4, &k4);
	}
	if (skops->family != AF_INET6)
		return 0;
	w0 = skops->remote_ip6[0];
	w1 = skops->remote_ip6[1];
	w2 = skops->remote_ip6[2];
	w3 = skops->remote_ip6[3];
	if (w0 == 0 && w1 == 0 && w2 == bpf_htonl(0xffff)) { // ::ffff:a.b.c.d is the IPv4 peer a.b.c.d
		__builtin_memcpy(k4.addr, &w3, 4);
		return bpf_map_lookup_elem(&dyncc_v4, &k4);
	}
	__builtin_memcpy(&k6.addr[0], &w0, 4);
	__builtin_memcpy(&k6.addr[4], &w1, 4);
	__builtin_memcpy(&k6.addr[8], &w2, 4);
	__builtin_memcpy(&k6.addr[12], &w3, 4);
	return bpf_map_lookup_elem(&dyncc_v6, &k6);
}

// The selection entry for the connection's peer, if any and if it applies to its namespace.
static __always_inline struct target *applies(struct bpf_sock_ops *skops)
{
	struct target *target = selected(skops);

	if (target && target->netns && target->netns != bpf_get_netns_cookie(skops)) {
		count(STAT_OTHER_NETNS);
		return 0;
	}
	return target;
}

static __always_inline void unwatch(struct bpf_sock_ops *skops)
{
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags & ~BPF_SOCK_OPS_RTT_CB_FLAG);
}

SEC("sockops")
int dyncc_cc_switch(struct bpf_sock_ops *skops)
{
	char algorithm[CC_NAME_LEN];
	struct target *target;

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		target = applies(skops);
		if (!target)
			break;
		count(STAT_SELECTED);
		if (target->start[0] && bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, target->start, CC_NAME_LEN))
			count(STAT_START_FAILED);
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		// Not ours (no entry, or another namespace's): leave the callback on. The callback
		// flags belong to the socket, not to a program: when several agents' programs share a
		// cgroup (one per edge namespace, as in the lab), clearing them here would stop the
		// program that selected this connection from ever seeing it pass the threshold.
		target = applies(skops);
		if (!target) {
			count(STAT_RELEASED);
			break;
		}
		if (skops->bytes_acked <= target->threshold)
			break;
		__builtin_memcpy(algorithm, target->algorithm, CC_NAME_LEN);
		algorithm[CC_NAME_LEN - 1] = 0;
		if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, algorithm, CC_NAME_LEN))
			count(STAT_FAILED);
		else
			count(STAT_SWITCHED);
		unwatch(skops);
		break;
	}
	return 1;
}

char _license[] SEC("license") = "GPL";
