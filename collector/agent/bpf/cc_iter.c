// SPDX-License-Identifier: GPL-2.0
// dyncc open-connection switch: a BPF TCP iterator (`iter/tcp`) run once by the agent when a config
// changes which prefixes are on BBR (docs/enforce.md, "Open connections").
//
// The agent loads this object, fills two LPM tries (dyncc_it_v4, and dyncc_it_v6 for IPv6 peers;
// an IPv4-mapped peer is looked up as IPv4) and reads the iterator once from the network
// namespace it manages: the kernel then calls the program for every TCP socket of that namespace.
// For a full socket that can still send (ESTABLISHED, FIN_WAIT1, CLOSE_WAIT, LAST_ACK, CLOSING)
// whose peer is in a trie, the entry says what to do:
//   - no algorithm: nothing (an entry that only shadows a shorter one);
//   - fewer than `min_acked` bytes acknowledged: nothing, but with ENTRY_WATCH the socket's per-RTT
//     sock_ops callback is turned on (bpf_setsockopt(TCP_BPF_SOCK_OPS_CB_FLAGS)), so that the
//     sock_ops program (cc_switch.c) switches it once it passes its prefix's threshold;
//   - `from` set and the socket's algorithm is another one: nothing;
//   - the socket already on `algorithm`: nothing;
//   - otherwise bpf_setsockopt(TCP_CONGESTION, algorithm); the connection goes on, nothing is
//     reset.
// Listeners, request and TIME_WAIT sockets are never touched.  Every outcome is counted in
// dyncc_it_stats (per CPU; the indexes are mirrored in collector/agent/bpf/iter_plan.py).
// Kernel structures are declared here with only the fields read (CO-RE: libbpf relocates them
// against the running kernel's BTF), so the build needs no vmlinux.h.
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#define AF_INET6 10
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define TCP_BPF_SOCK_OPS_CB_FLAGS 1008 // uapi/linux/bpf.h, Linux 6.10+ (Debian's headers may predate it)
#define CC_NAME_LEN 16

#ifndef MAX_PREFIXES
#define MAX_PREFIXES 65536
#endif

// include/net/tcp_states.h
#define TCP_ESTABLISHED 1
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9
#define TCP_CLOSING 11
#define SENDING_STATES ((1 << TCP_ESTABLISHED) | (1 << TCP_FIN_WAIT1) | (1 << TCP_CLOSE_WAIT) | \
			(1 << TCP_LAST_ACK) | (1 << TCP_CLOSING))

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u64 bytes_acked;
	__u8 bpf_sock_ops_cb_flags;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	void *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
} __attribute__((preserve_access_index));

static struct tcp_sock *(*skc_to_tcp_sock)(void *sk) = (void *)BPF_FUNC_skc_to_tcp_sock;

struct v4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct v6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

#define ENTRY_WATCH 1 // below min_acked: turn the sock_ops per-RTT callback on

struct entry {
	__u64 min_acked;             // act only on connections with at least this many bytes acknowledged
	__u64 flags;                 // ENTRY_WATCH
	char algorithm[CC_NAME_LEN]; // switch to this congestion control ("" = leave the prefix alone)
	char from[CC_NAME_LEN];      // only connections on this one ("" = on any other)
};

enum {
	STAT_MATCHED = 0,  // sending sockets whose peer has an entry with an algorithm
	STAT_SWITCHED = 1, // switched to the entry's algorithm
	STAT_FAILED = 2,   // bpf_getsockopt or bpf_setsockopt refused (a switch or a watch)
	STAT_ALREADY = 3,  // already on the entry's algorithm
	STAT_BELOW = 4,    // fewer than min_acked bytes acknowledged
	STAT_OTHER = 5,    // on an algorithm other than the entry's `from`
	STAT_VISITED = 6,  // full TCP sockets visited (every state, every peer)
	STAT_WATCHED = 7,  // below min_acked, per-RTT sock_ops callback turned on (ENTRY_WATCH)
	STAT_COUNT = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PREFIXES);
	__type(key, struct v4_key);
	__type(value, struct entry);
} dyncc_it_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PREFIXES);
	__type(key, struct v6_key);
	__type(value, struct entry);
} dyncc_it_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} dyncc_it_stats SEC(".maps");

static __always_inline void count(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&dyncc_it_stats, &index);

	if (value)
		*value += 1;
}

static __always_inline int same_name(const char *a, const char *b)
{
	int i;

#pragma unroll
	for (i = 0; i < CC_NAME_LEN; i++) {
		if (a[i] != b[i])
			return 0;
		if (!a[i])
			return 1;
	}
	return 1;
}

static __always_inline struct entry *entry_of(struct sock_common *skc)
{
	struct v4_key k4 = { .prefixlen = 32 };
	struct v6_key k6 = { .prefixlen = 128 };
	__u32 w0, w1, w2, w3;

	if (skc->skc_family == AF_INET) {
		w3 = skc->skc_daddr;
		__builtin_memcpy(k4.addr, &w3, 4);
		return bpf_map_lookup_elem(&dyncc_it_v4, &k4);
	}
	if (skc->skc_family != AF_INET6)
		return 0;
	w0 = skc->skc_v6_daddr.in6_u.u6_addr32[0];
	w1 = skc->skc_v6_daddr.in6_u.u6_addr32[1];
	w2 = skc->skc_v6_daddr.in6_u.u6_addr32[2];
	w3 = skc->skc_v6_daddr.in6_u.u6_addr32[3];
	if (w0 == 0 && w1 == 0 && w2 == bpf_htonl(0xffff)) { // ::ffff:a.b.c.d is the IPv4 peer a.b.c.d
		__builtin_memcpy(k4.addr, &w3, 4);
		return bpf_map_lookup_elem(&dyncc_it_v4, &k4);
	}
	__builtin_memcpy(&k6.addr[0], &w0, 4);
	__builtin_memcpy(&k6.addr[4], &w1, 4);
	__builtin_memcpy(&k6.addr[8], &w2, 4);
	__builtin_memcpy(&k6.addr[12], &w3, 4);
	return bpf_map_lookup_elem(&dyncc_it_v6, &k6);
}

SEC("iter/tcp")
int dyncc_cc_iter(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	char current[CC_NAME_LEN] = {};
	char algorithm[CC_NAME_LEN];
	struct tcp_sock *tp;
	struct entry *entry;
	int cb_flags;
	__u32 state;

	if (!skc)
		return 0;
	tp = skc_to_tcp_sock(skc); // NULL for request and TIME_WAIT sockets
	if (!tp)
		return 0;
	count(STAT_VISITED);
	state = skc->skc_state;
	if (state > 31 || !((1U << state) & SENDING_STATES))
		return 0;
	entry = entry_of(skc);
	if (!entry || !entry->algorithm[0])
		return 0;
	count(STAT_MATCHED);
	if (tp->bytes_acked < entry->min_acked) {
		count(STAT_BELOW);
		if (entry->flags & ENTRY_WATCH) {
			cb_flags = tp->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG;
			if (bpf_setsockopt(tp, SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS, &cb_flags, sizeof(cb_flags)))
				count(STAT_FAILED);
			else
				count(STAT_WATCHED);
		}
		return 0;
	}
	if (bpf_getsockopt(tp, SOL_TCP, TCP_CONGESTION, current, CC_NAME_LEN)) {
		count(STAT_FAILED);
		return 0;
	}
	if (same_name(current, entry->algorithm)) {
		count(STAT_ALREADY);
		return 0;
	}
	if (entry->from[0] && !same_name(current, entry->from)) {
		count(STAT_OTHER);
		return 0;
	}
	__builtin_memcpy(algorithm, entry->algorithm, CC_NAME_LEN);
	algorithm[CC_NAME_LEN - 1] = 0;
	if (bpf_setsockopt(tp, SOL_TCP, TCP_CONGESTION, algorithm, CC_NAME_LEN))
		count(STAT_FAILED);
	else
		count(STAT_SWITCHED);
	return 0;
}

char _license[] SEC("license") = "GPL";
