// SPDX-License-Identifier: GPL-2.0
// Random loss for the dyncc lab: a tc classifier in direct-action mode (clsact egress) that drops
// an IPv4 or IPv6 packet when a fresh random u32 is below DROP_THRESHOLD (loss fraction * 2^32).
// IPv6 neighbour discovery (ICMPv6 types 133-137 right after the fixed header) and non-IP frames
// (ARP) always pass.  Built by dyncc/lab/bpf_build.py; DROP_THRESHOLD comes as a -D define.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef DROP_THRESHOLD
#define DROP_THRESHOLD 0U
#endif

#define ICMPV6_NEXTHDR 58
#define IPV6_HLEN 40

SEC("tc")
int random_drop(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;

	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		unsigned char *ip6 = data + ETH_HLEN;
		if (ip6 + IPV6_HLEN + 1 <= (unsigned char *)data_end && ip6[6] == ICMPV6_NEXTHDR) {
			unsigned char type = ip6[IPV6_HLEN];
			if (type >= 133 && type <= 137)
				return TC_ACT_OK;
		}
	} else if (skb->protocol != bpf_htons(ETH_P_IP)) {
		return TC_ACT_OK;
	}
	if (bpf_get_prandom_u32() < (__u32)DROP_THRESHOLD)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
