-- Table A1 of Ruoss et al. (2024) per split, in Spark SQL: the numbers of
-- sql/table_a1.sql (`chessbench sql RUN table_a1`), the same columns, as
-- BIGINT. pipeline/spark/table_a1.py registers the three views it reads and
-- runs it; tests/spark/run.sh checks that the two agree.
--
--   state_value        = distinct boards
--   behavioral_cloning = distinct boards with at least one legal move
--   action_value       = the legal moves of those boards (rows of legal_moves)
--   state_values, action_values, failures = rows annotated so far
--   lichess_evals_state_values, lichess_evals_action_values = rows from the Lichess evaluation
--                        database (evals-*.parquet)
--   *_bytes            = Parquet bytes on disk of the table's split
--
-- The views, over committed files only (RUN/TABLE/split=NAME/*.parquet; a
-- commit in progress leaves *.parquet.tmp files, which never match):
--   boards           the boards table, every split; `split` is the hive
--                    partition, a string
--   cb_listing       one row per committed Parquet file of the run: path,
--                    length (bytes), from the file system's listing (Spark's
--                    binaryFile source; no file is opened)
--   cb_parquet_rows  one row per row of every committed Parquet file: path
--                    (its _metadata.file_path; no column is read)
-- Rows are counted rather than taken from footers; bytes come from
-- cb_listing, so a file with no rows still counts its bytes.

-- @name table_a1
WITH listed AS (
    -- Every committed Parquet file of the run, named relative to the run:
    -- TABLE/split=NAME/FILE.parquet.
    SELECT regexp_extract(path, '[^/]+/split=[^/]+/[^/]+$', 0) AS file,
           length AS file_size_bytes
    FROM cb_listing
), counted AS (
    -- Rows per file. _metadata.file_path is URL-encoded and the listing's
    -- path is not; the run-relative names agree (table, split and file
    -- names need no encoding).
    SELECT regexp_extract(path, '[^/]+/split=[^/]+/[^/]+$', 0) AS file,
           count(*) AS num_rows
    FROM cb_parquet_rows GROUP BY 1
), files AS (
    SELECT regexp_extract(file, '^([^/]+)/split=([^/]+)/([^/]+)$', 1) AS tbl,
           regexp_extract(file, '^([^/]+)/split=([^/]+)/([^/]+)$', 2) AS split,
           regexp_extract(file, '^([^/]+)/split=([^/]+)/([^/]+)$', 3) LIKE 'evals-%' AS evals,
           coalesce(num_rows, 0) AS num_rows,
           file_size_bytes
    FROM listed LEFT JOIN counted USING (file)
), per_split AS (
    SELECT split,
           sum(num_rows) FILTER (WHERE tbl = 'games') AS games,
           sum(num_rows) FILTER (WHERE tbl = 'boards') AS state_value,
           sum(num_rows) FILTER (WHERE tbl = 'legal_moves') AS action_value,
           sum(num_rows) FILTER (WHERE tbl = 'rejects') AS rejected,
           sum(num_rows) FILTER (WHERE tbl = 'state_values' AND NOT evals) AS state_values,
           sum(num_rows) FILTER (WHERE tbl = 'action_values' AND NOT evals) AS action_values,
           sum(num_rows) FILTER (WHERE tbl = 'state_values' AND evals) AS lichess_evals_state_values,
           sum(num_rows) FILTER (WHERE tbl = 'action_values' AND evals) AS lichess_evals_action_values,
           sum(num_rows) FILTER (WHERE tbl = 'failures') AS failures,
           sum(file_size_bytes) FILTER (WHERE tbl = 'games') AS games_bytes,
           sum(file_size_bytes) FILTER (WHERE tbl = 'boards') AS boards_bytes,
           sum(file_size_bytes) FILTER (WHERE tbl = 'legal_moves') AS legal_moves_bytes,
           sum(file_size_bytes) FILTER (WHERE tbl = 'state_values') AS state_values_bytes,
           sum(file_size_bytes) FILTER (WHERE tbl = 'action_values') AS action_values_bytes
    FROM files GROUP BY split
), bc AS (
    SELECT split, count(*) FILTER (WHERE num_legal_moves > 0) AS behavioral_cloning
    FROM boards GROUP BY split
)
SELECT split,
       CAST(coalesce(games, 0) AS BIGINT) AS games,
       CAST(coalesce(state_value, 0) AS BIGINT) AS state_value,
       CAST(behavioral_cloning AS BIGINT) AS behavioral_cloning,
       CAST(coalesce(action_value, 0) AS BIGINT) AS action_value,
       CAST(coalesce(rejected, 0) AS BIGINT) AS rejected,
       CAST(coalesce(state_values, 0) AS BIGINT) AS state_values,
       CAST(coalesce(action_values, 0) AS BIGINT) AS action_values,
       CAST(coalesce(failures, 0) AS BIGINT) AS failures,
       CAST(coalesce(lichess_evals_state_values, 0) AS BIGINT) AS lichess_evals_state_values,
       CAST(coalesce(lichess_evals_action_values, 0) AS BIGINT) AS lichess_evals_action_values,
       CAST(coalesce(games_bytes, 0) AS BIGINT) AS games_bytes,
       CAST(coalesce(boards_bytes, 0) AS BIGINT) AS boards_bytes,
       CAST(coalesce(legal_moves_bytes, 0) AS BIGINT) AS legal_moves_bytes,
       CAST(coalesce(state_values_bytes, 0) AS BIGINT) AS state_values_bytes,
       CAST(coalesce(action_values_bytes, 0) AS BIGINT) AS action_values_bytes
FROM bc JOIN per_split USING (split)
ORDER BY split
