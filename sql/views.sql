-- chessbench views over one run directory's Parquet tables (schema v1).
--
-- Set the run directory first, then read this file; every other file in sql/
-- queries these views.
--
--   chessbench:  chessbench sql runs/demo table_a1        (views preloaded)
--   DuckDB CLI:  duckdb -c "SET VARIABLE run_dir = 'runs/demo'; .read sql/views.sql; .read sql/table_a1.sql"
--   Python:      con = duckdb.connect()
--                con.execute("SET VARIABLE run_dir = 'runs/demo'")
--                con.execute(open('sql/views.sql').read())
--
-- Tables (one view each, all splits, with a `split` column from the hive
-- partition `TABLE/split=NAME/`): games, rejects, boards, legal_moves
-- (ingest), state_values, action_values, failures (annotate). Columns are
-- documented in schemas/v1/*.json.
--
-- state_values and action_values have a `source` column: 'stockfish'
-- (chessbench annotate), 'lichess_evals' (chessbench annotate --evals, the
-- Lichess evaluation database) or 'bag' (imported .bag files); files
-- written before the column existed read as 'stockfish'. A board may have
-- a row of each source.
--
-- The values consumers use, one source per board, chosen by the variable
-- label_source (unset: 'stockfish'):
--   'stockfish'      every source but the evaluation database
--   'lichess_evals'  the evaluation database only
--   'both'           the evaluation database where it labels a board, Stockfish elsewhere
--   sv_chosen, av_chosen                                      state_values, action_values rows so chosen
--
-- ChessBench's three record sets (Ruoss et al. 2024, Table A1), as views of
-- the chosen values:
--   sv_records(split, board_id, fen, win_prob)                state-value records
--   bc_records(split, board_id, fen, move)                    behavioural cloning: the best action
--   av_records(split, board_id, action, fen, move, win_prob)  action-value records
-- They hold the annotated boards only; an unannotated run has none.
--
-- A table with no Parquet files at all becomes a view that fails with a
-- message naming the table and the run (rejects and failures, which are
-- legitimately empty, become empty views instead). Views are bound when this
-- file is read: re-read it after a stage adds tables.

SET VARIABLE cb_run = rtrim(getvariable('run_dir'), '/');

-- Committed Parquet files per table (temporary `.tmp` files never match).
SET VARIABLE cb_n_games = (SELECT count(*) FROM glob(getvariable('cb_run') || '/games/split=*/*.parquet'));
SET VARIABLE cb_n_rejects = (SELECT count(*) FROM glob(getvariable('cb_run') || '/rejects/split=*/*.parquet'));
SET VARIABLE cb_n_boards = (SELECT count(*) FROM glob(getvariable('cb_run') || '/boards/split=*/*.parquet'));
SET VARIABLE cb_n_legal_moves = (SELECT count(*) FROM glob(getvariable('cb_run') || '/legal_moves/split=*/*.parquet'));
SET VARIABLE cb_n_state_values = (SELECT count(*) FROM glob(getvariable('cb_run') || '/state_values/split=*/*.parquet'));
SET VARIABLE cb_n_action_values = (SELECT count(*) FROM glob(getvariable('cb_run') || '/action_values/split=*/*.parquet'));
SET VARIABLE cb_n_failures = (SELECT count(*) FROM glob(getvariable('cb_run') || '/failures/split=*/*.parquet'));
SET VARIABLE cb_n_ablations = (SELECT count(*) FROM glob(getvariable('cb_run') || '/ablate/*/results/*.parquet'));

-- The query text of a table's view: a scan of its files when there are any;
-- otherwise a relation with the table's columns that is empty (`hint` NULL)
-- or raises an error naming the table, the run and what to do (`hint`).
CREATE OR REPLACE TEMP MACRO cb_view_sql(tbl, n_files, columns, hint) AS
    CASE
        WHEN n_files > 0 THEN
            'SELECT * FROM read_parquet(''' || replace(getvariable('cb_run'), '''', '''''') || '/' || tbl
            || '/split=*/*.parquet'', hive_partitioning = true, hive_types = {''split'': VARCHAR})'
        WHEN hint IS NULL THEN
            'SELECT ' || columns || ', NULL::VARCHAR AS split FROM range(0)'
        ELSE
            'SELECT ' || columns || ', NULL::VARCHAR AS split FROM range(1) WHERE error('''
            || replace('chessbench: table ' || tbl || ' has no Parquet files in run '
                       || getvariable('cb_run') || ' (' || hint || ')', '''', '''''')
            || ''')'
    END;

CREATE OR REPLACE VIEW games AS SELECT * FROM query(cb_view_sql('games', getvariable('cb_n_games'),
    'NULL::UBIGINT AS game_no, NULL::VARCHAR AS id, NULL::VARCHAR AS event, NULL::USMALLINT AS white_elo, '
    || 'NULL::USMALLINT AS black_elo, NULL::VARCHAR AS time_control, NULL::UINTEGER AS base_seconds, '
    || 'NULL::UINTEGER AS increment_seconds, NULL::VARCHAR AS speed, NULL::VARCHAR AS result, '
    || 'NULL::VARCHAR AS termination, NULL::DATE AS utc_date, NULL::INTEGER AS utc_time, NULL::VARCHAR AS eco, '
    || 'NULL::VARCHAR AS opening, NULL::UINTEGER AS plies, NULL::VARCHAR AS source, NULL::UBIGINT AS game_index, '
    || 'NULL::UBIGINT AS byte_offset, NULL::UBIGINT AS line',
    'not ingested: run `chessbench ingest RUN INPUT` first'));

CREATE OR REPLACE VIEW rejects AS SELECT * FROM query(cb_view_sql('rejects', getvariable('cb_n_rejects'),
    'NULL::UBIGINT AS game_no, NULL::VARCHAR AS source, NULL::UBIGINT AS game_index, NULL::UBIGINT AS byte_offset, '
    || 'NULL::UBIGINT AS line, NULL::VARCHAR AS reason, NULL::VARCHAR AS detail, NULL::UINTEGER AS ply, '
    || 'NULL::VARCHAR AS id',
    NULL));

CREATE OR REPLACE VIEW boards AS SELECT * FROM query(cb_view_sql('boards', getvariable('cb_n_boards'),
    'NULL::UBIGINT AS board_id, NULL::VARCHAR AS fen, NULL::VARCHAR AS side_to_move, NULL::UBIGINT AS occurrences, '
    || 'NULL::UTINYINT AS num_legal_moves, NULL::VARCHAR AS terminal, NULL::UBIGINT AS first_game_no, '
    || 'NULL::UINTEGER AS first_ply',
    'not ingested: run `chessbench ingest RUN INPUT` first'));

CREATE OR REPLACE VIEW legal_moves AS SELECT * FROM query(cb_view_sql('legal_moves', getvariable('cb_n_legal_moves'),
    'NULL::UBIGINT AS board_id, NULL::USMALLINT AS action, NULL::VARCHAR AS uci',
    'not ingested: run `chessbench ingest RUN INPUT` first'));

-- The label sources (src/store/source.rs; a test holds these macros against
-- it). A value file's name gives its `source`: the stem of a source's chunk
-- files (`chunk-*` Stockfish, `evals-*` the evaluation database), `part-*`
-- imported .bag files. A source's rows are read under the `label_source` of
-- cb_label_of(source); under 'both' each board takes the values of the
-- source of highest cb_precedence that labels it.
CREATE OR REPLACE TEMP MACRO cb_source_of_file(name) AS
    CASE WHEN name LIKE 'evals-%' THEN 'lichess_evals' WHEN name LIKE 'part-%' THEN 'bag' ELSE 'stockfish' END;
CREATE OR REPLACE TEMP MACRO cb_label_of(source) AS
    CASE source WHEN 'lichess_evals' THEN 'lichess_evals' ELSE 'stockfish' END;
CREATE OR REPLACE TEMP MACRO cb_precedence(source) AS
    CASE source WHEN 'lichess_evals' THEN 1 ELSE 0 END;
CREATE OR REPLACE TEMP MACRO cb_label_choices() AS 'stockfish, lichess_evals or both';

-- The value tables' `source` comes from each file's name, which the writers
-- keep in step with the stored column. Files from before the stored column
-- existed lack it, so it is never read: a run mixing old and new files
-- reads as one table, at the cost of a plain scan.
CREATE OR REPLACE TEMP MACRO cb_values_sql(tbl, n_files, columns, hint) AS
    CASE
        WHEN n_files > 0 THEN
            'SELECT COLUMNS(c -> c NOT IN (''source'', ''filename'', ''split'')), '
            || 'cb_source_of_file(parse_filename(filename)) AS source, split '
            || 'FROM read_parquet(''' || replace(getvariable('cb_run'), '''', '''''') || '/' || tbl
            || '/split=*/*.parquet'', hive_partitioning = true, hive_types = {''split'': VARCHAR}, filename = true)'
        ELSE cb_view_sql(tbl, n_files, columns, hint)
    END;

CREATE OR REPLACE VIEW state_values AS SELECT * FROM query(cb_values_sql('state_values', getvariable('cb_n_state_values'),
    'NULL::UBIGINT AS board_id, NULL::VARCHAR AS kind, NULL::DOUBLE AS win_prob, NULL::INTEGER AS cp, '
    || 'NULL::INTEGER AS mate, NULL::USMALLINT AS depth, NULL::UBIGINT AS nodes, NULL::UINTEGER AS time_ms, '
    || 'NULL::USMALLINT AS best_action, NULL::VARCHAR AS source',
    'not annotated: run `chessbench annotate RUN` first'));

CREATE OR REPLACE VIEW action_values AS SELECT * FROM query(cb_values_sql('action_values', getvariable('cb_n_action_values'),
    'NULL::UBIGINT AS board_id, NULL::USMALLINT AS action, NULL::DOUBLE AS win_prob, NULL::INTEGER AS cp, '
    || 'NULL::INTEGER AS mate, NULL::USMALLINT AS depth, NULL::UBIGINT AS nodes, NULL::UINTEGER AS time_ms, '
    || 'NULL::VARCHAR AS source',
    'not annotated: run `chessbench annotate RUN` first'));

CREATE OR REPLACE VIEW failures AS SELECT * FROM query(cb_view_sql('failures', getvariable('cb_n_failures'),
    'NULL::UBIGINT AS board_id, NULL::VARCHAR AS fen, NULL::VARCHAR AS reason, NULL::UINTEGER AS attempts, '
    || 'NULL::VARCHAR AS detail',
    NULL));

-- `chessbench ablate` results (every grid of the run): one row per variant,
-- seed and metric, or one `error` row for a variant that failed. Columns
-- are documented in src/ablate/results.rs; sql/ablations.sql shapes them
-- as the paper's tables.
CREATE OR REPLACE VIEW ablations AS SELECT * FROM query(
    CASE WHEN getvariable('cb_n_ablations') > 0 THEN
        'SELECT * FROM read_parquet(''' || replace(getvariable('cb_run'), '''', '''''')
        || '/ablate/*/results/*.parquet'')'
    ELSE
        'SELECT NULL::VARCHAR AS grid, NULL::VARCHAR AS variant, NULL::VARCHAR AS axis, '
        || 'NULL::VARCHAR AS setting, NULL::VARCHAR AS level, NULL::UBIGINT AS seed, '
        || 'NULL::VARCHAR AS train_name, NULL::VARCHAR AS metric, NULL::DOUBLE AS value, '
        || 'NULL::UBIGINT AS step, NULL::VARCHAR AS checkpoint, NULL::VARCHAR AS recipe, '
        || 'NULL::VARCHAR AS error, NULL::DOUBLE AS seconds FROM range(0)'
    END);

-- ChessBench record sets. Board identity is the full FEN; win_prob is the
-- side to move's win probability (state values) or the mover's after the
-- move (action values), both from Stockfish's score (Ruoss et al. 2024, §2).

-- The chosen label source (see above); any other value is an error.
CREATE OR REPLACE TEMP MACRO cb_label_source() AS coalesce(getvariable('label_source'), 'stockfish');

-- Boards a source of precedence above Stockfish's labels, with the highest
-- precedence among their sources: under 'both' a row of a lower source is
-- left out.
CREATE OR REPLACE VIEW cb_overriding AS
SELECT split, board_id, max(cb_precedence(source)) AS precedence
FROM state_values WHERE cb_precedence(source) > 0 GROUP BY split, board_id;

CREATE OR REPLACE VIEW sv_chosen AS
SELECT * FROM state_values
WHERE cb_label_source() <> 'both' AND cb_label_of(source) = cb_label_source()
UNION ALL
SELECT s.* FROM state_values AS s ANTI JOIN cb_overriding AS o
    ON s.split = o.split AND s.board_id = o.board_id AND o.precedence > cb_precedence(s.source)
WHERE cb_label_source() = 'both'
UNION ALL
SELECT * FROM state_values
WHERE cb_label_source() <> 'both' AND cb_label_of(cb_label_source()) <> cb_label_source()
  AND error('label_source must be ' || cb_label_choices() || ', not ' || cb_label_source());

CREATE OR REPLACE VIEW av_chosen AS
SELECT * FROM action_values
WHERE cb_label_source() <> 'both' AND cb_label_of(source) = cb_label_source()
UNION ALL
SELECT a.* FROM action_values AS a ANTI JOIN cb_overriding AS o
    ON a.split = o.split AND a.board_id = o.board_id AND o.precedence > cb_precedence(a.source)
WHERE cb_label_source() = 'both'
UNION ALL
SELECT * FROM action_values
WHERE cb_label_source() <> 'both' AND cb_label_of(cb_label_source()) <> cb_label_source()
  AND error('label_source must be ' || cb_label_choices() || ', not ' || cb_label_source());

-- A board's game phase: the endgame once at most six pieces besides kings
-- and pawns are left, else the opening before ply 20 of the game it first
-- occurred in, else the middlegame (`chessbench annotate --evals --plan`
-- uses the same rule).
CREATE OR REPLACE VIEW board_phases AS
SELECT split, board_id,
       CASE WHEN length(regexp_replace(split_part(fen, ' ', 1), '[^nbrqNBRQ]', '', 'g')) <= 6 THEN 'endgame'
            WHEN first_ply < 20 THEN 'opening'
            ELSE 'middlegame' END AS phase
FROM boards;

CREATE OR REPLACE VIEW sv_records AS
SELECT s.split, s.board_id, b.fen, s.win_prob
FROM sv_chosen AS s
JOIN boards AS b USING (split, board_id);

CREATE OR REPLACE VIEW bc_records AS
SELECT s.split, s.board_id, b.fen, m.uci AS move
FROM sv_chosen AS s
JOIN boards AS b USING (split, board_id)
JOIN legal_moves AS m ON m.split = s.split AND m.board_id = s.board_id AND m.action = s.best_action;

CREATE OR REPLACE VIEW av_records AS
SELECT a.split, a.board_id, a.action, b.fen, m.uci AS move, a.win_prob
FROM av_chosen AS a
JOIN boards AS b USING (split, board_id)
JOIN legal_moves AS m USING (split, board_id, action);
