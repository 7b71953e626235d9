-- Where a run's values come from, and how far the sources agree: Stockfish
-- (`chessbench annotate`, or imported .bag files) and the Lichess evaluation
-- database (`chessbench annotate --evals FILE`, source 'lichess_evals').
-- Phases are board_phases' (views.sql). Needs views.sql (chessbench sql
-- preloads it).

-- Coverage: per split, game phase ('all': the whole split) and source, the
-- boards labelled and the action-value records they get, against the
-- split's boards and legal moves (the action-value records a full
-- annotation has). The evaluation database labels only the moves that begin
-- one of its principal variations, so its share of the action values is far
-- below its share of the boards.
-- @name label_source_coverage
WITH b AS (
    SELECT p.split, p.board_id, p.phase, bo.num_legal_moves
    FROM board_phases AS p JOIN boards AS bo USING (split, board_id)
), totals AS (
    SELECT split, coalesce(phase, 'all') AS phase, count(*) AS boards,
           sum(num_legal_moves)::UBIGINT AS legal_moves
    FROM b GROUP BY GROUPING SETS ((split, phase), (split))
), av AS (
    SELECT split, board_id, source, count(*) AS n FROM action_values GROUP BY ALL
), labelled AS (
    SELECT b.split, b.phase, s.source, coalesce(av.n, 0) AS action_values
    FROM state_values AS s
    JOIN b USING (split, board_id)
    LEFT JOIN av USING (split, board_id, source)
), per_source AS (
    SELECT split, coalesce(phase, 'all') AS phase, source,
           count(*) AS boards_labelled, sum(action_values)::UBIGINT AS action_values
    FROM labelled GROUP BY GROUPING SETS ((split, phase, source), (split, source))
)
SELECT t.split, t.phase, p.source, t.boards, p.boards_labelled,
       round(p.boards_labelled / t.boards, 4) AS board_share,
       t.legal_moves, p.action_values,
       round(p.action_values / t.legal_moves, 4) AS action_value_share
FROM totals AS t JOIN per_source AS p USING (split, phase)
ORDER BY t.split, array_position(['all', 'opening', 'middlegame', 'endgame'], t.phase), p.source;

-- Agreement on the boards both sources label: the mean and 95th percentile
-- of the absolute difference of the state values' win probabilities, the
-- share of boards whose best move is the same, and Kendall's tau-b between
-- the two sources' win probabilities of the moves both value, per board
-- with at least two such moves, averaged (as `chessbench eval` averages
-- its per-board tau).
-- @name label_source_agreement
WITH sf AS (
    SELECT * FROM state_values WHERE source <> 'lichess_evals'
), ev AS (
    SELECT * FROM state_values WHERE source = 'lichess_evals'
), boards_both AS (
    SELECT ev.split, ev.board_id, p.phase,
           abs(ev.win_prob - sf.win_prob) AS win_prob_diff,
           (ev.best_action = sf.best_action) AS same_best
    FROM ev JOIN sf USING (split, board_id)
    JOIN board_phases AS p USING (split, board_id)
), moves AS (
    SELECT e.split, e.board_id, e.action, e.win_prob AS ew, s.win_prob AS sw
    FROM action_values AS e
    JOIN action_values AS s
      ON s.split = e.split AND s.board_id = e.board_id AND s.action = e.action
     AND s.source <> 'lichess_evals'
    WHERE e.source = 'lichess_evals'
), tau AS (
    SELECT x.split, x.board_id,
           sum(sign(x.ew - y.ew) * sign(x.sw - y.sw))
             / nullif(sqrt(count(*) FILTER (WHERE x.ew <> y.ew)
                           * count(*) FILTER (WHERE x.sw <> y.sw)), 0) AS tau_b
    FROM moves AS x JOIN moves AS y
      ON x.split = y.split AND x.board_id = y.board_id AND x.action < y.action
    GROUP BY ALL
)
SELECT split, coalesce(phase, 'all') AS phase,
       count(*) AS boards_both,
       round(avg(win_prob_diff), 4) AS mean_abs_win_prob_diff,
       round(quantile_cont(win_prob_diff, 0.95), 4) AS p95_abs_win_prob_diff,
       round(avg(same_best::INTEGER), 4) AS same_best_move,
       count(tau_b) AS boards_with_tau,
       round(avg(tau_b), 4) AS mean_kendall_tau_b
FROM boards_both LEFT JOIN tau USING (split, board_id)
GROUP BY GROUPING SETS ((split, phase), (split))
ORDER BY split, array_position(['all', 'opening', 'middlegame', 'endgame'], coalesce(phase, 'all'));
