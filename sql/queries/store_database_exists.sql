-- 1 if the URL's database exists on the server (a read-only command checks it instead of creating it).
SELECT count() FROM system.databases WHERE name = %(database)s
