-- Share of the test split's distinct boards that also occur in the train
-- split (Ruoss et al. 2024 report 14.7% for 1e3 test games against 1e7 train
-- games, mostly opening boards). `test_in_train` is the number
-- `chessbench stats` prints. The weighted share counts every occurrence of a
-- test board in the test games, and `by_phase` shows where the overlap sits.
--
-- Other split names: set the variables train_split and test_split first.
-- Needs views.sql (chessbench sql preloads it).
--
-- Train is 20x test and more: joining FEN strings directly builds a hash
-- table of test's FENs that past ~10^6 games no longer fits the memory
-- budget (10^7 games: 315 s, against 5.9 s at 10^6). So train is first cut
-- down to its boards whose 64-bit FEN hash some test board has (a semi-join
-- on integers), and each test board is then looked up among those by its
-- FEN (`IN`, whose hash table holds the few train boards left): exact, and
-- the same result. (`test` is not named twice: DuckDB would materialize
-- it, 26M FENs at 10^7 games, and spill them.)

-- Every test board, marked with whether train has it: one pass over train
-- for both results below.
CREATE OR REPLACE TEMP TABLE overlap_marked AS
WITH test AS (
    SELECT fen, occurrences FROM boards WHERE split = coalesce(getvariable('test_split'), 'test')
), train AS (
    SELECT fen FROM boards WHERE split = coalesce(getvariable('train_split'), 'train')
        AND hash(fen) IN (SELECT hash(fen) FROM boards
                          WHERE split = coalesce(getvariable('test_split'), 'test'))
)
SELECT occurrences,
       CAST(split_part(fen, ' ', 6) AS INTEGER) AS fullmove,
       fen IN (SELECT fen FROM train) AS in_train
FROM test;

-- @name overlap
SELECT count(*) AS test_boards,
       count(*) FILTER (WHERE in_train) AS also_in_train,
       count(*) FILTER (WHERE in_train) / count(*) AS test_in_train,
       sum(occurrences) FILTER (WHERE in_train) / sum(occurrences) AS test_in_train_weighted
FROM overlap_marked;

-- @name overlap_by_move
-- Overlap by full-move number of the test board (the FEN's sixth field).
SELECT CASE WHEN fullmove <= 10 THEN '01-10' WHEN fullmove <= 20 THEN '11-20'
            WHEN fullmove <= 40 THEN '21-40' ELSE '41+' END AS fullmove,
       count(*) AS test_boards,
       count(*) FILTER (WHERE in_train) AS also_in_train,
       round(count(*) FILTER (WHERE in_train) / count(*), 4) AS share
FROM overlap_marked
GROUP BY 1 ORDER BY 1;
