-- Latest ApplyStatus per host of a POP received since since_ns (controller clock).
-- received_ns is unique per row (the ingester adds the row's index), so argMax has no ties.
SELECT
    host,
    argMax(version, received_ns) AS version,
    argMax(applied_version, received_ns) AS applied_version,
    argMax(result, received_ns) AS result,
    argMax(errors, received_ns) AS errors,
    argMax(mem_available_bytes, received_ns) AS mem_available_bytes,
    argMax(load1, received_ns) AS load1,
    argMax(available_cc, received_ns) AS available_cc,
    argMax(reported_ns, received_ns) AS reported_ns,
    max(received_ns) AS last_received_ns
FROM apply_status
WHERE pop = %(pop)s AND received_ns >= %(since_ns)s
GROUP BY host
ORDER BY host
