-- The prefix filter of rollout_p10.sql: only the prefixes of the data table (column prefix),
-- sent along with the query (Store.query_rows_with), so the statement does not grow with them.
AND prefix IN (SELECT prefix FROM {{data}})
