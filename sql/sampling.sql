-- The paper's data-sampler ablation (Ruoss et al. 2024, Appendix B.2):
-- uniform sampling over distinct boards (the default: every board weight 1)
-- against sampling weighted by how often the board occurs in the source
-- games (`boards.occurrences`), which over-represents the opening.
--
-- An "opening board" here is one at full-move 10 or earlier (the FEN's sixth
-- field). Effective sample size = (sum w)^2 / sum w^2: how many distinct
-- boards the weighted sampler is worth. Needs views.sql.

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
-- The boards the weighted sampler draws most often (the start position first).
SELECT split, board_id, fen, occurrences AS weighted_weight,
       round(occurrences / sum(occurrences) OVER (PARTITION BY split), 5) AS p_weighted,
       round(1 / count(*) OVER (PARTITION BY split), 7) AS p_uniform
FROM boards
QUALIFY row_number() OVER (PARTITION BY split ORDER BY occurrences DESC, board_id) <= 5
ORDER BY split, weighted_weight DESC, board_id;

-- @name sampling_weights
-- Per board: the uniform sampler's weight (1 per distinct board) and the
-- weighted sampler's (its occurrence count), normalised to probabilities.
-- (Large: one row per board; with `chessbench sql --only sampling_weights
-- --format csv` it is the input of a custom sampler.)
WITH t AS (
    SELECT split, count(*) AS n, sum(coalesce(occurrences, 1)) AS total
    FROM boards GROUP BY split
)
SELECT b.split, b.board_id,
       1 AS uniform_weight,
       coalesce(b.occurrences, 1) AS weighted_weight,
       1 / t.n AS p_uniform,
       coalesce(b.occurrences, 1) / t.total AS p_weighted
FROM boards AS b JOIN t USING (split)
ORDER BY b.split, b.board_id;
