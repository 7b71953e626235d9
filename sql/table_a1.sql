-- Table A1 of Ruoss et al. (2024) for a chessbench run directory, computed by
-- DuckDB straight from the Parquet tables (the same numbers as
-- `chessbench stats RUN_DIR --json`).
--
-- DuckDB CLI:  SET VARIABLE run_dir = 'runs/demo'; .read sql/table_a1.sql
--
-- state_value        = distinct boards
-- behavioral_cloning = distinct boards with at least one legal move
-- action_value       = legal moves of those boards (rows of legal_moves)
WITH games AS (
    SELECT split, count(*) AS games
    FROM read_parquet(getvariable('run_dir') || '/games/*/*.parquet', hive_partitioning = true)
    GROUP BY split
), boards AS (
    SELECT split,
           count(*) AS state_value,
           count(*) FILTER (WHERE num_legal_moves > 0) AS behavioral_cloning
    FROM read_parquet(getvariable('run_dir') || '/boards/*/*.parquet', hive_partitioning = true)
    GROUP BY split
), moves AS (
    SELECT split, count(*) AS action_value
    FROM read_parquet(getvariable('run_dir') || '/legal_moves/*/*.parquet', hive_partitioning = true)
    GROUP BY split
)
SELECT split, games, state_value, behavioral_cloning, action_value
FROM games JOIN boards USING (split) JOIN moves USING (split)
ORDER BY split;
