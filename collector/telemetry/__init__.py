"""`dyncc collect`: poll sock_diag, filter, encode TcpInfoBatch batches, send them to a sink."""
