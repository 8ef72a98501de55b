"""The contract between the edge and the centre: the `.proto` messages and the code both sides use.

Submodules: tcpinfo_pb2 and congestion_pb2 (generated), tcpinfo_columns (the TcpInfoBatch column
table), tcpinfo_encode (numpy columns -> TcpInfoBatch bytes, without the protobuf runtime),
tcpinfo_decode (the one decoder), signing (Ed25519 on CongestionConfig), addresses (the address
and prefix forms), framing (the length-prefixed records of collector files), wire (the wire
facts both sides write: batch caps, header limits, topic names, config keys) and prefix_rules
(which prefixes may ever be routed).  This module imports nothing, so the collector never loads
protobuf through it.
"""
