-- Fraction of distinct test boards that also occur in train (the paper
-- reports 14.7% for its 1e3 test games against 1e7 train games).
--
-- DuckDB CLI:  SET VARIABLE run_dir = 'runs/demo'; .read sql/test_in_train.sql
WITH b AS (
    SELECT split, fen
    FROM read_parquet(getvariable('run_dir') || '/boards/*/*.parquet', hive_partitioning = true)
)
SELECT count(*) FILTER (WHERE train.fen IS NOT NULL) / count(*) AS test_in_train
FROM (SELECT fen FROM b WHERE split = 'test') AS test
LEFT JOIN (SELECT fen FROM b WHERE split = 'train') AS train USING (fen);
