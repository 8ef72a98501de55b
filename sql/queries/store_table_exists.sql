-- 1 if the table exists in the current database; {{table}} is a checked identifier.
EXISTS TABLE {{table}}
