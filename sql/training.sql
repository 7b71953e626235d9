-- Training runs of `chessbench train`: RUN/train/NAME/{metrics,eval}.csv and
-- summary.json. Needs at least one training run (`make train`).

-- @name training_runs
-- One row per training run: where it stands and its last evaluation.
SELECT
    s.name,
    s.policy,
    s.params,
    s.step,
    s.samples,
    -- TRY_CAST: figures that are null in every summary (a run trained
    -- with no step logged) read as JSON, which round refuses.
    round(TRY_CAST(s.last_loss AS DOUBLE), 4) AS last_loss,
    round(TRY_CAST(s.samples_per_s AS DOUBLE)) AS samples_per_s,
    s.eval.split AS eval_split,
    s.eval.records AS eval_records,
    round(s.eval.log_loss, 4) AS log_loss,
    round(s.eval.marginal_log_loss, 4) AS marginal_log_loss,
    round(s.eval.accuracy, 4) AS accuracy
FROM read_json(getvariable('run_dir') || '/train/*/summary.json') AS s
ORDER BY s.name;

-- @name training_curve
-- The loss curve of every run, one row per logged step.
SELECT
    regexp_extract(filename, '[/\\]train[/\\]([^/\\]+)[/\\]metrics\.csv$', 1) AS name,
    step,
    epoch,
    samples,
    loss,
    grad_norm,
    learning_rate,
    samples_per_s,
    data_wait_share,
    elapsed_s
FROM read_csv(getvariable('run_dir') || '/train/*/metrics.csv', filename = true, union_by_name = true)
ORDER BY name, step;

-- @name training_eval
-- Every evaluation of the EMA parameters, next to the marginal baseline.
SELECT
    regexp_extract(filename, '[/\\]train[/\\]([^/\\]+)[/\\]eval\.csv$', 1) AS name,
    step,
    split,
    records,
    log_loss,
    marginal_log_loss,
    log_loss < marginal_log_loss AS beats_marginal,
    accuracy,
    value_mse
FROM read_csv(getvariable('run_dir') || '/train/*/eval.csv', filename = true, union_by_name = true)
ORDER BY name, step;
