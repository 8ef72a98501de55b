-- Every trial in the stored decisions (table trial_rounds, controller/evidence/load.py
-- `stored_trials`): per (pop, prefix, trial start) the round that ended it or its latest round,
-- how it ended and why, and the prefix's latest decision of all (selections): a prefix kept by
-- its trial is in force while that is still 'keep' (a later revert for no traffic or a denial
-- ends it without ending the trial's record).  Only rounds whose decisions count (their latest
-- round_outcomes row is published, unchanged, legacy or recorded), as for the controller's state.
-- A prefix selected with trials off is watched under its selection's start (trial_since, the key
-- of its holdback's asked arms) but had no trial: a start without a 'trial' round is none.
--   since_ts    trial start (Unix s): the round that selected the prefix
--   end_ts      the round that ended it (keep or revert), or the last trial round when it goes on
--   outcome     'keep', 'revert' or 'trial' (still running at %(end)s)
--   latest      the prefix's latest decision before %(end)s
-- Parameters: %(pop)s ('' = all), %(end)s (DateTime).
SELECT
    pop,
    prefix,
    since_ts,
    end_ts,
    outcome,
    reason,
    trial_rounds,
    latest
FROM
(
    SELECT
        pop,
        prefix,
        toUnixTimestamp(trial_since) AS since_ts,
        if(countIf(decision IN ('keep', 'revert')) > 0,
           toUnixTimestamp(minIf(round_time, decision IN ('keep', 'revert'))),
           toUnixTimestamp(max(round_time))) AS end_ts,
        if(countIf(decision IN ('keep', 'revert')) > 0,
           argMinIf(decision, round_time, decision IN ('keep', 'revert')),
           'trial') AS outcome,
        if(countIf(decision IN ('keep', 'revert')) > 0,
           argMinIf(reason, round_time, decision IN ('keep', 'revert')),
           argMax(reason, round_time)) AS reason,
        countIf(decision = 'trial') AS trial_rounds
    FROM trial_rounds
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND round_time < %(end)s
      AND decision IN ('trial', 'keep', 'revert')
      AND (pop, round_id) IN
      (
          SELECT pop, round_id
          FROM round_outcomes
          WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time < %(end)s
          GROUP BY pop, round_id
          HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy', 'recorded')
      )
    GROUP BY pop, prefix, trial_since
    HAVING countIf(decision = 'trial') > 0
) AS t
ANY LEFT JOIN
(
    SELECT pop, prefix, argMax(decision, round_time) AS latest
    FROM selections
    WHERE (%(pop)s = '' OR pop = %(pop)s)
      AND round_time < %(end)s
      AND (pop, prefix) IN (SELECT pop, prefix FROM trial_rounds WHERE round_time < %(end)s)
      AND (pop, round_id) IN
      (
          SELECT pop, round_id
          FROM round_outcomes
          WHERE (%(pop)s = '' OR pop = %(pop)s) AND round_time < %(end)s
          GROUP BY pop, round_id
          HAVING argMax(status, recorded_ns) IN ('published', 'unchanged', 'legacy', 'recorded')
      )
    GROUP BY pop, prefix
) AS s USING (pop, prefix)
ORDER BY pop, prefix, since_ts
