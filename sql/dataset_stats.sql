-- Dataset statistics: the paper's Figure A1 (Ruoss et al. 2024: histograms
-- of action-value and state-value win% and the distribution of legal-move
-- counts) and what an analyst asks next, of the values the variable
-- label_source chooses (sv_chosen, av_chosen; unset: Stockfish's). Needs
-- views.sql.

-- @name figure_a1_action_values
-- Action-value win% in 50 equal buckets of [0, 1] (bucket i holds
-- [i/50, (i+1)/50), the last one includes 1).
SELECT split,
       least(floor(win_prob * 50), 49)::INTEGER AS bucket,
       round(bucket / 50, 2) AS win_prob_from,
       count(*) AS records,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 5) AS share
FROM av_chosen
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name figure_a1_state_values
SELECT split,
       least(floor(win_prob * 50), 49)::INTEGER AS bucket,
       round(bucket / 50, 2) AS win_prob_from,
       count(*) AS records,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 5) AS share
FROM sv_chosen
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name figure_a1_legal_moves
-- Legal moves per distinct board (0 = checkmate or stalemate).
SELECT split, num_legal_moves, count(*) AS boards,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 5) AS share
FROM boards
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name legal_moves_summary
SELECT split, count(*) AS boards,
       round(avg(num_legal_moves), 2) AS mean_legal_moves,
       median(num_legal_moves) AS median_legal_moves,
       max(num_legal_moves) AS max_legal_moves,
       count(*) FILTER (WHERE terminal = 'checkmate') AS checkmates,
       count(*) FILTER (WHERE terminal = 'stalemate') AS stalemates
FROM boards
GROUP BY 1 ORDER BY 1;

-- @name boards_by_phase
-- Game phase of each distinct board: opening up to full-move 10, endgame at
-- 12 or fewer pieces (kings included), middlegame otherwise. Pieces: the
-- letters of the FEN's placement field (digits and '/' deleted).
WITH b AS (
    SELECT split,
           CAST(split_part(fen, ' ', 6) AS INTEGER) AS fullmove,
           strlen(translate(split_part(fen, ' ', 1), '12345678/', '')) AS pieces
    FROM boards
)
SELECT split,
       CASE WHEN fullmove <= 10 THEN 'opening' WHEN pieces <= 12 THEN 'endgame' ELSE 'middlegame' END AS phase,
       count(*) AS boards,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 4) AS share
FROM b
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name boards_by_piece_count
SELECT split,
       strlen(translate(split_part(fen, ' ', 1), '12345678/', '')) AS pieces,
       count(*) AS boards
FROM boards
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name games_by_elo
-- Mean rating of the two players, in 200-point bands (unrated: a tag missing).
SELECT split,
       CASE WHEN white_elo IS NULL OR black_elo IS NULL THEN 'unrated'
            ELSE lpad(CAST((floor((white_elo + black_elo) / 2 / 200) * 200)::INTEGER AS VARCHAR), 4, '0') || '+'
       END AS mean_elo,
       count(*) AS games,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 4) AS share
FROM games
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name games_by_speed
-- Lichess speed class (from TimeControl) and the most common time controls.
SELECT split, coalesce(speed, 'unknown') AS speed, count(*) AS games,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split), 4) AS share,
       mode(time_control) AS top_time_control
FROM games
GROUP BY 1, 2 ORDER BY 1, 3 DESC;

-- @name games_by_result
SELECT split, coalesce(result, '?') AS result, count(*) AS games,
       round(avg(plies), 1) AS mean_plies
FROM games
GROUP BY 1, 2 ORDER BY 1, 2;

-- @name mate_scores
-- Share of engine values that are mate scores (and of terminal boards).
-- Aggregates per table, then joins the per-split rows: no join of the
-- value tables themselves, so it runs in bounded memory at any size.
WITH s AS (
    SELECT split,
           count(*) AS state_values,
           count(*) FILTER (WHERE mate IS NOT NULL) AS sv_mates,
           count(*) FILTER (WHERE kind <> 'search') AS terminal_boards
    FROM sv_chosen GROUP BY split
), a AS (
    SELECT split, count(*) AS action_values, count(*) FILTER (WHERE mate IS NOT NULL) AS av_mates
    FROM av_chosen GROUP BY split
)
SELECT s.split,
       s.state_values,
       round(s.sv_mates / s.state_values, 4) AS sv_mate_share,
       s.terminal_boards,
       a.action_values,
       round(a.av_mates / a.action_values, 4) AS av_mate_share
FROM s LEFT JOIN a USING (split)
ORDER BY 1;

-- @name annotation_coverage
-- Annotated boards of each split, engine effort, and failures by reason
-- (Stockfish's; sql/label_sources.sql counts the evaluation database's).
-- (Every state value belongs to a board of its split, so the counts need
-- no join of boards with state_values.)
WITH b AS (
    SELECT split, count(*) AS boards FROM boards GROUP BY split
), s AS (
    SELECT split, count(*) AS annotated, avg(depth) AS depth, avg(nodes) AS nodes
    FROM state_values WHERE cb_label_of(source) = 'stockfish' GROUP BY split
), f AS (
    SELECT split, count(*) AS failures FROM failures GROUP BY split
)
SELECT b.split,
       b.boards,
       coalesce(s.annotated, 0) AS annotated,
       round(coalesce(s.annotated, 0) / b.boards, 4) AS annotated_share,
       round(s.depth, 1) AS mean_sv_depth,
       round(s.nodes, 0) AS mean_sv_nodes,
       coalesce(f.failures, 0) AS failures
FROM b LEFT JOIN s USING (split) LEFT JOIN f USING (split)
ORDER BY 1;

-- @name failures_by_reason
SELECT split, reason, count(*) AS boards, max(attempts) AS max_attempts
FROM failures
GROUP BY 1, 2 ORDER BY 1, 2;
