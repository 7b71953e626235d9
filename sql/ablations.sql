-- `chessbench ablate` results in the shape of the paper's ablation tables
-- (Ruoss et al. 2024, Table 2 and Table A2): one row per grid, axis and
-- setting, the base first in each grid; the paper's three metrics (puzzle
-- and action accuracy in %, Kendall's tau) and log-loss as the mean over
-- seeds with the range [min, max]. `chessbench ablate GRID --report` prints
-- the same with the published values beside them. Needs views.sql.
--
--   chessbench sql runs/demo ablations
--   chessbench sql runs/demo ablations --only ablation_failures

-- @name ablations
WITH per_seed AS (
    SELECT grid, coalesce(axis, '(base)') AS ax, coalesce(setting, 'base') AS setting_or_base,
           seed, metric, value
    FROM ablations
    WHERE error IS NULL
)
SELECT
    grid,
    ax AS axis,
    setting_or_base AS setting,
    count(DISTINCT seed) AS seeds,
    round(100 * avg(value) FILTER (WHERE metric = 'puzzle_accuracy'), 1) AS puzzles_pct,
    round(100 * min(value) FILTER (WHERE metric = 'puzzle_accuracy'), 1) AS puzzles_min,
    round(100 * max(value) FILTER (WHERE metric = 'puzzle_accuracy'), 1) AS puzzles_max,
    round(100 * avg(value) FILTER (WHERE metric = 'action_accuracy'), 1) AS actions_pct,
    round(100 * min(value) FILTER (WHERE metric = 'action_accuracy'), 1) AS actions_min,
    round(100 * max(value) FILTER (WHERE metric = 'action_accuracy'), 1) AS actions_max,
    round(avg(value) FILTER (WHERE metric = 'kendall_tau'), 3) AS kendall_tau,
    round(min(value) FILTER (WHERE metric = 'kendall_tau'), 3) AS kendall_tau_min,
    round(max(value) FILTER (WHERE metric = 'kendall_tau'), 3) AS kendall_tau_max,
    round(avg(value) FILTER (WHERE metric = 'log_loss'), 4) AS log_loss
FROM per_seed
GROUP BY grid, ax, setting_or_base
ORDER BY grid, ax <> '(base)', ax, TRY_CAST(setting_or_base AS DOUBLE) NULLS LAST, setting_or_base;

-- @name ablation_failures
-- Variants whose last attempt failed (a rerun of the grid tries them again).
SELECT grid, variant, seed, train_name, error
FROM ablations
WHERE error IS NOT NULL
ORDER BY grid, variant, seed;
