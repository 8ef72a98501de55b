-- The highest config version of a POP that was ever published (or attempted), and the
-- highest version agents of the POP report in force; the next version is above both.
SELECT
    (SELECT max(version) FROM config_versions WHERE pop = %(pop)s AND status != 'rejected') AS published,
    (SELECT max(applied_version) FROM apply_status
        WHERE pop = %(pop)s AND result IN ('APPLIED', 'UNCHANGED')) AS applied
