-- Share of the test split's distinct boards that also occur in the train
-- split (Ruoss et al. 2024 report 14.7% for 1e3 test games against 1e7 train
-- games, mostly opening boards). `test_in_train` is the number
-- `chessbench stats` prints. The weighted share counts every occurrence of a
-- test board in the test games, and `by_phase` shows where the overlap sits.
--
-- Other split names: set the variables train_split and test_split first.
-- Needs views.sql (chessbench sql preloads it).

-- @name overlap
WITH test AS (
    SELECT fen, occurrences FROM boards WHERE split = coalesce(getvariable('test_split'), 'test')
), train AS (
    SELECT fen FROM boards WHERE split = coalesce(getvariable('train_split'), 'train')
), joined AS (
    SELECT test.fen, test.occurrences, train.fen IS NOT NULL AS in_train
    FROM test LEFT JOIN train USING (fen)
)
SELECT count(*) AS test_boards,
       count(*) FILTER (WHERE in_train) AS also_in_train,
       count(*) FILTER (WHERE in_train) / count(*) AS test_in_train,
       sum(occurrences) FILTER (WHERE in_train) / sum(occurrences) AS test_in_train_weighted
FROM joined;

-- @name overlap_by_move
-- Overlap by full-move number of the test board (the FEN's sixth field).
WITH test AS (
    SELECT fen, CAST(split_part(fen, ' ', 6) AS INTEGER) AS fullmove
    FROM boards WHERE split = coalesce(getvariable('test_split'), 'test')
), train AS (
    SELECT fen FROM boards WHERE split = coalesce(getvariable('train_split'), 'train')
)
SELECT CASE WHEN fullmove <= 10 THEN '01-10' WHEN fullmove <= 20 THEN '11-20'
            WHEN fullmove <= 40 THEN '21-40' ELSE '41+' END AS fullmove,
       count(*) AS test_boards,
       count(train.fen) AS also_in_train,
       round(count(train.fen) / count(*), 4) AS share
FROM test LEFT JOIN train USING (fen)
GROUP BY 1 ORDER BY 1;
