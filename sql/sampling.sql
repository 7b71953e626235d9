-- The paper's data-sampler ablation (Ruoss et al. 2024, Appendix B.2):
-- uniform sampling over distinct boards (the default: every board weight 1)
-- against sampling weighted by how often the board occurs in the source
-- games (`boards.occurrences`), which over-represents the opening.
--
-- An "opening board" here is one at full-move 10 or earlier (the FEN's sixth
-- field). Effective sample size = (sum w)^2 / sum w^2: how many distinct
-- boards the weighted sampler is worth. Needs views.sql.

-- Per split: distinct boards, positions, and the sum of known occurrence
-- counts (the weights' normalisers), for the queries below: a variable rather
-- than a join or a window, so that those stay streaming scans instead of
-- sorts of every board (530M at the paper's scale).
SET VARIABLE cb_split_totals = (
    SELECT map(list(split), list({'n': n, 'total': total, 'occurrences': occurrences}))
    FROM (SELECT split, count(*) AS n, sum(coalesce(occurrences, 1)) AS total,
                 sum(occurrences) AS occurrences
          FROM boards GROUP BY split)
);

-- @name sampling_summary
WITH w AS (
    SELECT split,
           CAST(split_part(fen, ' ', 6) AS INTEGER) <= 10 AS opening,
           1 AS uniform_weight,
           coalesce(occurrences, 1) AS weighted_weight
    FROM boards
)
SELECT split,
       count(*) AS boards,
       sum(weighted_weight)::UBIGINT AS positions,
       round(count(*) FILTER (WHERE opening) / count(*), 4) AS opening_share_uniform,
       round(sum(weighted_weight) FILTER (WHERE opening) / sum(weighted_weight), 4) AS opening_share_weighted,
       round(max(weighted_weight) / sum(weighted_weight), 4) AS top_board_share_weighted,
       round(sum(weighted_weight) ^ 2 / sum(weighted_weight ^ 2), 1) AS effective_boards_weighted
FROM w
GROUP BY split ORDER BY split;

-- @name sampling_by_move
-- Probability mass per full-move bucket under each sampler.
WITH w AS (
    SELECT split,
           CAST(split_part(fen, ' ', 6) AS INTEGER) AS fullmove,
           coalesce(occurrences, 1) AS weighted_weight
    FROM boards
)
SELECT split,
       CASE WHEN fullmove <= 5 THEN '01-05' WHEN fullmove <= 10 THEN '06-10'
            WHEN fullmove <= 20 THEN '11-20' WHEN fullmove <= 40 THEN '21-40' ELSE '41+' END AS moves,
       count(*) AS boards,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 4) AS p_uniform,
       round(sum(weighted_weight) / sum(sum(weighted_weight)) OVER (PARTITION BY split), 4) AS p_weighted
FROM w
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name sampling_top_boards
-- The boards the weighted sampler draws most often (the start position first):
-- the 5 largest by (occurrences, known first; lowest board_id on ties) kept
-- per split as the boards stream past, not a sort of all of them.
WITH top AS (
    SELECT split,
           unnest(max_by({'board_id': board_id, 'fen': fen, 'occurrences': occurrences},
                         {'known': occurrences IS NOT NULL, 'occurrences': coalesce(occurrences, 0),
                          'earlier': -(board_id::BIGINT)},
                         5)) AS b
    FROM boards GROUP BY split
)
SELECT split, b.board_id AS board_id, b.fen AS fen, b.occurrences AS weighted_weight,
       round(b.occurrences / getvariable('cb_split_totals')[split].occurrences, 5) AS p_weighted,
       round(1 / getvariable('cb_split_totals')[split].n, 7) AS p_uniform
FROM top
ORDER BY split, weighted_weight DESC, board_id;

-- @name sampling_weights
-- Per board: the uniform sampler's weight (1 per distinct board) and the
-- weighted sampler's (its occurrence count), normalised to probabilities.
-- (Large: one row per board; with `chessbench sql --only sampling_weights
-- --format csv` it is the input of a custom sampler.) Rows come in the run's
-- file order, which is split by split and board_id order within a split
-- (DuckDB preserves the order of a single-table SELECT; no ORDER BY, whose
-- sort of 530M boards would be most of the query's time and memory).
SELECT split, board_id,
       1 AS uniform_weight,
       coalesce(occurrences, 1) AS weighted_weight,
       1 / getvariable('cb_split_totals')[split].n AS p_uniform,
       coalesce(occurrences, 1) / getvariable('cb_split_totals')[split].total AS p_weighted
FROM boards;
