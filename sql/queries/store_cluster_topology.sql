-- The shards and replicas of cluster %(cluster)s as the query node knows them
-- (controller/store/topology.py topology_from_rows).
SELECT shard_num, shard_weight, replica_num, host_address, port
FROM system.clusters
WHERE cluster = %(cluster)s
ORDER BY shard_num, replica_num
