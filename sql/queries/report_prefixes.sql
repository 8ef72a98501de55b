-- dyncc report: prefixes seen in the window with their qualifying sample counts (for the
-- per-ISP mapping, done client-side by longest-prefix match).
-- Parameters: %(pop)s ('' = all), %(start)s, %(end)s.
SELECT
    prefix,
    countIfMerge(qualifying) AS qualifying
FROM tcpinfo_5m
WHERE (%(pop)s = '' OR pop = %(pop)s)
  AND bucket >= %(start)s AND bucket < %(end)s
GROUP BY prefix
ORDER BY qualifying DESC
