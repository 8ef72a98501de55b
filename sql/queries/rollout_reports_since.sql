-- Every ApplyStatus of a POP received since since_ns, oldest first (wave gates).
SELECT
    host, version, applied_version, result, errors, mem_available_bytes, load1, available_cc,
    reported_ns, received_ns
FROM apply_status
WHERE pop = %(pop)s AND received_ns >= %(since_ns)s
ORDER BY received_ns
