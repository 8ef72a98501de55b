-- The POPs that have rollout waves.
SELECT DISTINCT pop FROM rollout_waves
