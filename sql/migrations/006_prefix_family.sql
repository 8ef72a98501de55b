-- 006: a client network is one prefix, whichever socket family saw it.
-- An IPv4 client reached on an IPv6 socket (::ffff:a.b.c.d) gets its IPv4 prefix string
-- from the collector, but `family` in tcpinfo and in the tcpinfo_5m rollup is the raw
-- socket family (2 = AF_INET, 10 = AF_INET6), so such a /24 has rows under both.  Those
-- tables stay as they are (the socket family is kept for diagnosis): every scoring and
-- rollup read groups by prefix and derives the prefix's family from the prefix text
-- (10 when it contains ':', else 2), which merges old and new rows alike.
-- What older code derived per (prefix, socket family) is repaired here:
--   * the scoring_buckets cache held one row per socket family, each half judged
--     alone: the cache is emptied (scoring_versions first, so a half-done run leaves
--     no version pointing at stale rows) and the next round recomputes the window;
--   * selections.family was the family of whichever half came first (0 for rows
--     carried without data): it is set from the prefix (a background mutation;
--     family is not in the sorting key, so ALTER UPDATE works on 18.16).
-- Every statement is safe to run again.

TRUNCATE TABLE IF EXISTS scoring_versions;

TRUNCATE TABLE IF EXISTS scoring_buckets;

ALTER TABLE selections
    UPDATE family = if(position(prefix, ':') > 0, 10, 2)
    WHERE family != if(position(prefix, ':') > 0, 10, 2);
