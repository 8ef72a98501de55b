-- The config versions of a POP, newest first, at most %(limit)s.
SELECT version, status, kind, entries, target_hosts, reasons, created_ns FROM config_versions
WHERE pop = %(pop)s ORDER BY created_ns DESC LIMIT %(limit)s
