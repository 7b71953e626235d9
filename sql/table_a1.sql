-- Table A1 of Ruoss et al. (2024) per split: games, the three record sets and
-- bytes on disk, plus annotation progress. The same numbers as
-- `chessbench stats RUN --json` (tests/it/sql.rs checks that they agree).
--
--   state_value        = distinct boards
--   behavioral_cloning = distinct boards with at least one legal move
--   action_value       = the legal moves of those boards (rows of legal_moves)
--   state_values, action_values, failures = rows annotated so far (Stockfish's,
--                        or imported .bag files')
--   lichess_evals_state_values, lichess_evals_action_values = rows from the Lichess evaluation
--                        database (chessbench annotate --evals: evals-*.parquet)
--   *_bytes            = Parquet bytes on disk of the table's split
--
-- Row counts and sizes come from the Parquet footers (no data is scanned but
-- boards.num_legal_moves), so this is fast on any run, annotated or not.
-- Needs views.sql (chessbench sql preloads it).

-- @name table_a1
WITH files AS (
    -- Every committed Parquet file of the run: TABLE/split=NAME/FILE.parquet.
    SELECT regexp_extract(file_name, '([^/]+)/split=([^/]+)/[^/]+$', ['tbl', 'split']) AS p,
           -- The file's label source, by views.sql's macros (src/store/source.rs).
           cb_label_of(cb_source_of_file(parse_filename(file_name))) = 'lichess_evals' AS evals,
           num_rows, file_size_bytes
    FROM parquet_file_metadata(getvariable('cb_run') || '/*/split=*/*.parquet')
), per_split AS (
    SELECT p.split AS split,
           sum(num_rows) FILTER (WHERE p.tbl = 'games') AS games,
           sum(num_rows) FILTER (WHERE p.tbl = 'boards') AS state_value,
           sum(num_rows) FILTER (WHERE p.tbl = 'legal_moves') AS action_value,
           sum(num_rows) FILTER (WHERE p.tbl = 'rejects') AS rejected,
           sum(num_rows) FILTER (WHERE p.tbl = 'state_values' AND NOT evals) AS state_values,
           sum(num_rows) FILTER (WHERE p.tbl = 'action_values' AND NOT evals) AS action_values,
           sum(num_rows) FILTER (WHERE p.tbl = 'state_values' AND evals) AS lichess_evals_state_values,
           sum(num_rows) FILTER (WHERE p.tbl = 'action_values' AND evals) AS lichess_evals_action_values,
           sum(num_rows) FILTER (WHERE p.tbl = 'failures') AS failures,
           sum(file_size_bytes) FILTER (WHERE p.tbl = 'games') AS games_bytes,
           sum(file_size_bytes) FILTER (WHERE p.tbl = 'boards') AS boards_bytes,
           sum(file_size_bytes) FILTER (WHERE p.tbl = 'legal_moves') AS legal_moves_bytes,
           sum(file_size_bytes) FILTER (WHERE p.tbl = 'state_values') AS state_values_bytes,
           sum(file_size_bytes) FILTER (WHERE p.tbl = 'action_values') AS action_values_bytes
    FROM files GROUP BY p.split
), bc AS (
    SELECT split, count(*) FILTER (WHERE num_legal_moves > 0) AS behavioral_cloning
    FROM boards GROUP BY split
)
SELECT split,
       coalesce(games, 0)::UBIGINT AS games,
       coalesce(state_value, 0)::UBIGINT AS state_value,
       behavioral_cloning::UBIGINT AS behavioral_cloning,
       coalesce(action_value, 0)::UBIGINT AS action_value,
       coalesce(rejected, 0)::UBIGINT AS rejected,
       coalesce(state_values, 0)::UBIGINT AS state_values,
       coalesce(action_values, 0)::UBIGINT AS action_values,
       coalesce(failures, 0)::UBIGINT AS failures,
       coalesce(lichess_evals_state_values, 0)::UBIGINT AS lichess_evals_state_values,
       coalesce(lichess_evals_action_values, 0)::UBIGINT AS lichess_evals_action_values,
       coalesce(games_bytes, 0)::UBIGINT AS games_bytes,
       coalesce(boards_bytes, 0)::UBIGINT AS boards_bytes,
       coalesce(legal_moves_bytes, 0)::UBIGINT AS legal_moves_bytes,
       coalesce(state_values_bytes, 0)::UBIGINT AS state_values_bytes,
       coalesce(action_values_bytes, 0)::UBIGINT AS action_values_bytes
FROM bc JOIN per_split USING (split)
ORDER BY split;
