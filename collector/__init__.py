"""dyncc edge side: netlink socket dump, protobuf batches, Kafka sink, route agent."""

__version__ = "0.1.0"
