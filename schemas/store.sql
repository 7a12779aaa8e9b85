-- amptune results database: schema migrations, compiled into the binary (src/store/store.cpp).
--
-- Each section below a line "-- migration: N" is applied once, in its own transaction, to a
-- database whose schema_version is below N; N counts 1, 2, 3, ... without gaps. Migrations are
-- forward-only: never edit a released section, append a new one (ALTER TABLE ... ADD COLUMN,
-- DROP VIEW IF EXISTS + CREATE VIEW for views that change). The table schema_version itself is
-- created by the code. docs/DATABASE.md describes every table and view with example queries.
--
-- Conventions: timestamps are ISO-8601 UTC text with milliseconds ("2024-05-01T12:00:00.123Z");
-- JSON columns hold valid JSON (checked); a REAL that was NaN (a diverged loss) is stored as NULL.

-- migration: 1

-- One row per sweep file (experiments/x.yaml), found again by its name.
CREATE TABLE sweeps (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE CHECK (name <> ''),
  description TEXT NOT NULL DEFAULT '',
  yaml        TEXT NOT NULL DEFAULT '',   -- the sweep file as last run
  source_path TEXT NOT NULL DEFAULT '',
  created_at  TEXT NOT NULL,
  updated_at  TEXT NOT NULL
);

-- One row per grid cell: a fully resolved configuration, identified by its sha256.
CREATE TABLE runs (
  id           INTEGER PRIMARY KEY,
  sweep_id     INTEGER NOT NULL REFERENCES sweeps(id),
  name         TEXT NOT NULL UNIQUE,         -- "<sweep>/<cell_index>-<hash8>"
  cell_index   INTEGER NOT NULL CHECK (cell_index >= 0),
  label        TEXT NOT NULL DEFAULT '',     -- "optim.lr=0.1 seed=1"
  status       TEXT NOT NULL DEFAULT 'pending'
               CHECK (status IN ('pending', 'running', 'done', 'failed', 'diverged')),
  config_json  TEXT NOT NULL CHECK (json_valid(config_json)),
  config_hash  TEXT NOT NULL CHECK (length(config_hash) >= 8),
  axes_json    TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(axes_json)),
  message      TEXT NOT NULL DEFAULT '',     -- why it failed / diverged
  summary_json TEXT CHECK (summary_json IS NULL OR json_valid(summary_json)),
  started_at   TEXT,
  finished_at  TEXT,
  heartbeat_at TEXT,
  created_at   TEXT NOT NULL,
  -- provenance of the process that ran it last
  amptune_version TEXT,
  git_commit      TEXT,
  git_dirty       INTEGER CHECK (git_dirty IN (0, 1)),
  torch_version   TEXT,
  host            TEXT,
  threads         INTEGER,
  device          TEXT,
  command_line    TEXT,
  -- readable copies of settings from config_json (filled by column name from RunSpec::columns)
  model        TEXT,
  dataset      TEXT,      -- "<data.format>:<data.root>"
  optimizer    TEXT,
  lr           REAL,
  batch_size   INTEGER,
  epochs       INTEGER,
  lr_dec_epoch JSON,      -- JSON text, e.g. [17, 21]
  seed         INTEGER,
  UNIQUE (sweep_id, config_hash)
);
CREATE INDEX runs_by_sweep ON runs(sweep_id, cell_index);
CREATE INDEX runs_by_status ON runs(status);

-- Every swept axis of a run in long form (key "optim.lr", value_json "0.1").
CREATE TABLE run_params (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key        TEXT NOT NULL,
  value_json TEXT NOT NULL CHECK (json_valid(value_json)),
  PRIMARY KEY (run_id, key)
);
CREATE INDEX run_params_by_key ON run_params(key, value_json);

-- One row per finished epoch (0-based) of a run, with the checkpoint written at its end.
CREATE TABLE epochs (
  run_id          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  epoch           INTEGER NOT NULL CHECK (epoch >= 0),
  global_step     INTEGER NOT NULL CHECK (global_step >= 0),
  lr              REAL,
  train_loss      REAL,
  train_fps_mean  REAL,
  train_fps_min   REAL,
  train_fps_max   REAL,
  epoch_seconds   REAL,
  skipped_samples INTEGER NOT NULL DEFAULT 0 CHECK (skipped_samples >= 0),
  checkpoint_path       TEXT,
  checkpoint_bytes      INTEGER CHECK (checkpoint_bytes >= 0),
  checkpoint_sha256     TEXT,
  checkpoint_deleted_at TEXT,   -- set when retention deleted the file; the metrics stay
  recorded_at     TEXT NOT NULL,
  PRIMARY KEY (run_id, epoch),
  CHECK (checkpoint_path IS NOT NULL OR (checkpoint_bytes IS NULL AND
         checkpoint_sha256 IS NULL AND checkpoint_deleted_at IS NULL))
);

-- Evaluation and scaler values of an epoch by name (acc1, acc5, val_loss, loss_scale, ...).
-- Values that have a column in epochs (lr, train_loss, ...) are not repeated here.
CREATE TABLE metrics (
  run_id INTEGER NOT NULL,
  epoch  INTEGER NOT NULL,
  name   TEXT NOT NULL
         CONSTRAINT metric_name_is_identifier_not_epochs_column
         CHECK (name GLOB '[a-z]*' AND name NOT GLOB '*[^a-z0-9_]*' AND
                name NOT IN ('epoch', 'global_step', 'lr', 'train_loss', 'train_fps_mean',
                             'train_fps_min', 'train_fps_max', 'epoch_seconds',
                             'skipped_samples')),
  value  REAL,
  PRIMARY KEY (run_id, epoch, name),
  FOREIGN KEY (run_id, epoch) REFERENCES epochs(run_id, epoch) ON DELETE CASCADE
);

-- migration: 2

-- Which way each metric improves; best_epoch and the leaderboards read it (unknown names
-- count as higher-is-better).
CREATE TABLE metric_info (
  name             TEXT PRIMARY KEY,
  higher_is_better INTEGER NOT NULL CHECK (higher_is_better IN (0, 1)),
  description      TEXT NOT NULL DEFAULT ''
);
INSERT INTO metric_info (name, higher_is_better, description) VALUES
  ('acc1', 1, 'top-1 accuracy on the evaluation split, percent'),
  ('acc5', 1, 'top-5 accuracy on the evaluation split, percent'),
  ('val_loss', 0, 'mean loss on the evaluation split'),
  ('train_loss', 0, 'mean training loss of the epoch'),
  ('mrpe', 0, 'mean root position error, mm'),
  ('mrpe_x', 0, 'mean root position error along x, mm'),
  ('mrpe_y', 0, 'mean root position error along y, mm'),
  ('mrpe_z', 0, 'mean root position error along z (depth), mm'),
  ('ap_root_25', 1, 'average precision of roots within 25 cm, percent'),
  ('train_fps_mean', 1, 'training throughput, samples per second'),
  ('epoch_seconds', 0, 'wall time of the epoch, seconds');

-- The metric a run is judged by (a name in metrics, or a column of epochs such as train_loss).
ALTER TABLE runs ADD COLUMN primary_metric TEXT NOT NULL DEFAULT 'acc1';

-- Every per-epoch value in long form: metrics plus the numeric columns of epochs.
CREATE VIEW epoch_values AS
  SELECT run_id, epoch, name, value FROM metrics
  UNION ALL SELECT run_id, epoch, 'train_loss', train_loss FROM epochs
  UNION ALL SELECT run_id, epoch, 'lr', lr FROM epochs
  UNION ALL SELECT run_id, epoch, 'train_fps_mean', train_fps_mean FROM epochs
  UNION ALL SELECT run_id, epoch, 'epoch_seconds', epoch_seconds FROM epochs;

-- One row per run that has a value of its primary metric: the best value and its epoch (the
-- earliest on ties), in the direction metric_info gives.
CREATE VIEW best_epoch AS
  WITH scored AS (
    SELECT r.id AS run_id, v.epoch, v.value,
           COALESCE(mi.higher_is_better, 1) AS higher_is_better,
           ROW_NUMBER() OVER (
             PARTITION BY r.id
             ORDER BY CASE WHEN COALESCE(mi.higher_is_better, 1) THEN -v.value ELSE v.value END,
                      v.epoch) AS position
    FROM runs r
    JOIN epoch_values v ON v.run_id = r.id AND v.name = r.primary_metric
    LEFT JOIN metric_info mi ON mi.name = r.primary_metric
    WHERE v.value IS NOT NULL)
  SELECT r.id AS run_id, r.name AS run, s.name AS sweep, r.label, r.primary_metric AS metric,
         scored.higher_is_better, scored.value AS best_value, scored.epoch AS best_epoch
  FROM scored
  JOIN runs r ON r.id = scored.run_id
  JOIN sweeps s ON s.id = r.sweep_id
  WHERE scored.position = 1;

-- Per sweep, every run ranked by its best primary metric (rank 1 = winner; ties share a rank;
-- runs without a value yet have rank NULL and come last).
CREATE VIEW sweep_leaderboard AS
  WITH board AS (
    SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.cell_index, r.label, r.status,
           r.primary_metric AS metric, b.best_value, b.best_epoch,
           (SELECT COALESCE(MAX(e.epoch) + 1, 0) FROM epochs e WHERE e.run_id = r.id)
             AS epochs_done,
           CASE WHEN b.best_value IS NULL THEN NULL
                ELSE RANK() OVER (
                  PARTITION BY r.sweep_id, b.best_value IS NULL
                  ORDER BY CASE WHEN b.higher_is_better THEN -b.best_value
                                ELSE b.best_value END) END AS rank
    FROM runs r
    JOIN sweeps s ON s.id = r.sweep_id
    LEFT JOIN best_epoch b ON b.run_id = r.id)
  SELECT sweep, rank, run_id, run, label, status, metric, best_value, best_epoch, epochs_done
  FROM board
  ORDER BY sweep, rank IS NULL, rank, cell_index;

-- One row per run: settings, progress, best and last value of the primary metric, speed.
-- Ordered by sweep, then best first, so the winner of each sweep is its first row.
CREATE VIEW run_summary AS
  WITH per_run AS (
    SELECT run_id, COALESCE(MAX(epoch) + 1, 0) AS epochs_done, MAX(epoch) AS last_epoch,
           AVG(train_fps_mean) AS mean_fps, SUM(epoch_seconds) AS total_seconds
    FROM epochs GROUP BY run_id)
  SELECT l.sweep, l.rank, r.id AS run_id, r.name AS run, r.status, r.label,
         r.model, r.dataset, r.optimizer, r.lr, r.batch_size, r.epochs, r.lr_dec_epoch, r.seed,
         r.primary_metric AS metric, COALESCE(p.epochs_done, 0) AS epochs_done,
         l.best_value, l.best_epoch,
         (SELECT v.value FROM epoch_values v
          WHERE v.run_id = r.id AND v.epoch = p.last_epoch AND v.name = r.primary_metric)
           AS last_value,
         p.mean_fps, p.total_seconds, r.started_at, r.finished_at, r.message
  FROM sweep_leaderboard l
  JOIN runs r ON r.id = l.run_id
  LEFT JOIN per_run p ON p.run_id = r.id
  ORDER BY l.sweep, l.rank IS NULL, l.rank, r.cell_index;

-- Run x epoch, wide: the values a training curve needs.
CREATE VIEW epoch_metrics AS
  SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.label, e.epoch, e.global_step,
         e.lr, e.train_loss,
         MAX(CASE WHEN m.name = 'acc1' THEN m.value END) AS acc1,
         MAX(CASE WHEN m.name = 'acc5' THEN m.value END) AS acc5,
         MAX(CASE WHEN m.name = 'val_loss' THEN m.value END) AS val_loss,
         MAX(CASE WHEN m.name = 'mrpe' THEN m.value END) AS mrpe,
         MAX(CASE WHEN m.name = 'ap_root_25' THEN m.value END) AS ap_root_25,
         MAX(CASE WHEN m.name = 'loss_scale' THEN m.value END) AS loss_scale,
         e.train_fps_mean, e.epoch_seconds, e.skipped_samples
  FROM epochs e
  JOIN runs r ON r.id = e.run_id
  JOIN sweeps s ON s.id = r.sweep_id
  LEFT JOIN metrics m ON m.run_id = e.run_id AND m.epoch = e.epoch
  GROUP BY e.run_id, e.epoch
  ORDER BY s.name, r.cell_index, e.epoch;

-- Checkpoint files the database references, kept or deleted by retention.
CREATE VIEW checkpoints AS
  SELECT s.name AS sweep, r.id AS run_id, r.name AS run, e.epoch, e.checkpoint_path AS path,
         e.checkpoint_bytes AS bytes, e.checkpoint_sha256 AS sha256,
         e.checkpoint_deleted_at AS deleted_at, e.recorded_at
  FROM epochs e
  JOIN runs r ON r.id = e.run_id
  JOIN sweeps s ON s.id = r.sweep_id
  WHERE e.checkpoint_path IS NOT NULL
  ORDER BY s.name, r.cell_index, e.epoch;

-- migration: 3

-- Mixed precision (docs/AMP.md): the precision settings of a run as readable columns, so sweeps
-- group by them directly. loss_scale has no declared type: it holds 'dynamic' (text) or the
-- static scale (a real, e.g. 128.0). backend: 'none' (O0), 'native' or 'emulate'.
ALTER TABLE runs ADD COLUMN opt_level TEXT;
ALTER TABLE runs ADD COLUMN dtype TEXT;
ALTER TABLE runs ADD COLUMN loss_scale;
ALTER TABLE runs ADD COLUMN backend TEXT;

-- The loss-scale history: one row when a run starts from scratch ('init') and one each time
-- the scale changes ('overflow': halved and the step skipped; 'growth': doubled after the
-- growth interval). Written with the epoch the step belongs to, in the same transaction.
CREATE TABLE loss_scale_events (
  run_id      INTEGER NOT NULL,
  epoch       INTEGER NOT NULL,
  global_step INTEGER NOT NULL,  -- optimizer steps done when the new scale took effect
  scale       REAL NOT NULL,     -- the new scale
  reason      TEXT NOT NULL CHECK (reason IN ('init', 'overflow', 'growth')),
  PRIMARY KEY (run_id, global_step),
  FOREIGN KEY (run_id, epoch) REFERENCES epochs(run_id, epoch) ON DELETE CASCADE
);

INSERT INTO metric_info (name, higher_is_better, description) VALUES
  ('loss_scale', 1, 'loss scale at the end of the epoch'),
  ('loss_scale_min', 1, 'smallest loss scale used in the epoch'),
  ('loss_scale_max', 1, 'largest loss scale used in the epoch'),
  ('overflow_steps', 0, 'steps whose gradients held inf/NaN (dynamic loss scale only)'),
  ('skipped_steps', 0, 'optimizer steps skipped because of an overflow');

-- The scale trajectory of every run, in step order.
CREATE VIEW loss_scale_trajectory AS
  SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.label, r.opt_level, r.dtype,
         r.loss_scale AS loss_scale_setting, ev.epoch, ev.global_step, ev.scale, ev.reason
  FROM loss_scale_events ev
  JOIN runs r ON r.id = ev.run_id
  JOIN sweeps s ON s.id = r.sweep_id
  ORDER BY s.name, r.cell_index, ev.global_step;

-- migration: 4

-- Forks (docs/DATABASE.md "Forks"): a run that starts from another run's checkpoint of one epoch
-- with changed settings (`amptune fork`, or `forks:` in a sweep). NULL for runs trained from
-- scratch.
ALTER TABLE runs ADD COLUMN parent_run_id INTEGER REFERENCES runs(id);
ALTER TABLE runs ADD COLUMN parent_epoch INTEGER CHECK (parent_epoch IS NULL OR parent_epoch >= 0);
-- The overrides as a JSON object {"amp.loss_scale": "dynamic"}, and readable:
-- "amp.loss_scale: 128 -> dynamic; optim.lr: 0.1 -> 0.01".
ALTER TABLE runs ADD COLUMN fork_overrides TEXT CHECK (fork_overrides IS NULL OR json_valid(fork_overrides));
ALTER TABLE runs ADD COLUMN fork_changes TEXT;
-- 1: the fork took only the weights (optimizer, loss scaler and schedule position started fresh).
ALTER TABLE runs ADD COLUMN reset_optimizer INTEGER CHECK (reset_optimizer IS NULL OR reset_optimizer IN (0, 1));
CREATE INDEX runs_by_parent ON runs(parent_run_id, parent_epoch);

-- The lineage curve of every run: its ancestors' epochs up to the epoch each fork started from,
-- then its own, so a fork and its parent plot as one line. source_run_id says whose epoch a row
-- is; value is the run's primary metric.
CREATE VIEW lineage AS
  WITH RECURSIVE chain(run_id, ancestor_id, upto) AS (
    SELECT id, id, NULL FROM runs
    UNION ALL
    SELECT c.run_id, r.parent_run_id,
           CASE WHEN c.upto IS NULL THEN r.parent_epoch ELSE min(c.upto, r.parent_epoch) END
    FROM chain c JOIN runs r ON r.id = c.ancestor_id
    WHERE r.parent_run_id IS NOT NULL
  )
  SELECT r.id AS run_id, r.name AS run, e.epoch, e.run_id AS source_run_id,
         src.name AS source_run, e.lr, e.train_loss, r.primary_metric AS metric, m.value
  FROM chain c
  JOIN runs r ON r.id = c.run_id
  JOIN epochs e ON e.run_id = c.ancestor_id AND (c.upto IS NULL OR e.epoch <= c.upto)
  JOIN runs src ON src.id = e.run_id
  LEFT JOIN metrics m ON m.run_id = e.run_id AND m.epoch = e.epoch AND m.name = r.primary_metric
  ORDER BY r.id, e.epoch;

-- Every fork next to its parent: where it started, what it changed, and the primary metric of
-- the parent at that epoch, at the parent's end, and at the fork's end.
CREATE VIEW fork_vs_parent AS
  SELECT f.id AS fork_id, f.name AS fork, p.id AS parent_id, p.name AS parent, f.parent_epoch,
         f.fork_changes, f.reset_optimizer, f.status, f.primary_metric AS metric,
         (SELECT value FROM metrics WHERE run_id = p.id AND epoch = f.parent_epoch
            AND name = f.primary_metric) AS parent_at_fork,
         (SELECT m.value FROM metrics m WHERE m.run_id = p.id AND m.name = f.primary_metric
            ORDER BY m.epoch DESC LIMIT 1) AS parent_last,
         (SELECT m.value FROM metrics m WHERE m.run_id = f.id AND m.name = f.primary_metric
            ORDER BY m.epoch DESC LIMIT 1) AS fork_last
  FROM runs f JOIN runs p ON p.id = f.parent_run_id
  ORDER BY p.id, f.parent_epoch, f.id;

-- migration: 5

-- Comparison views (docs/DATABASE.md "Views"; `amptune compare` computes the same). Each value
-- is computed per run with correlated subqueries, so `WHERE sweep = '...'` keeps a query on one
-- sweep fast however large the database (docs/PERFORMANCE.md "Results database at scale").

-- A run's values of one metric in epoch order, covering (value included): the per-run lookups
-- of the views below read only this index (docs/PERFORMANCE.md has the before/after figures).
CREATE INDEX metrics_by_run_name ON metrics(run_id, name, epoch, value);

-- One row per run: its swept values (run_params as one JSON object), the precision settings,
-- and the best and last value of its primary metric (best in the direction metric_info gives,
-- earliest epoch on ties; last = the value at the newest epoch that has one), with mean
-- training throughput and the overflow / skipped steps summed over its epochs (NULL when never
-- recorded). The primary metric may be a metrics name or an epochs column (train_loss, lr,
-- train_fps_mean, epoch_seconds). Runs without epochs have NULL values. Ordered by sweep, cell.
CREATE VIEW run_results AS
  WITH base AS (
    SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.cell_index, r.label, r.status,
           r.opt_level, r.dtype, r.loss_scale, r.parent_run_id, r.parent_epoch,
           r.primary_metric AS metric,
           COALESCE((SELECT higher_is_better FROM metric_info WHERE name = r.primary_metric), 1)
             AS higher_is_better,
           r.primary_metric IN ('train_loss', 'lr', 'train_fps_mean', 'epoch_seconds') AS in_epochs
    FROM runs r JOIN sweeps s ON s.id = r.sweep_id),
  valued AS (
    SELECT b.*,
      CASE WHEN b.in_epochs THEN
        (SELECT CASE WHEN b.higher_is_better THEN MAX(CASE b.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END) ELSE MIN(CASE b.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END) END
         FROM epochs e WHERE e.run_id = b.run_id)
      ELSE
        (SELECT CASE WHEN b.higher_is_better THEN MAX(m.value) ELSE MIN(m.value) END
         FROM metrics m WHERE m.run_id = b.run_id AND m.name = b.metric)
      END AS best_value,
      CASE WHEN b.in_epochs THEN
        (SELECT MAX(e.epoch) FROM epochs e WHERE e.run_id = b.run_id AND CASE b.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END IS NOT NULL)
      ELSE
        (SELECT MAX(m.epoch) FROM metrics m
         WHERE m.run_id = b.run_id AND m.name = b.metric AND m.value IS NOT NULL)
      END AS last_epoch
    FROM base b)
  SELECT v.sweep, v.run_id, v.run, v.cell_index, v.label, v.status,
         (SELECT json_group_object(p.key, json(p.value_json)) FROM run_params p
          WHERE p.run_id = v.run_id) AS params,
         v.opt_level, v.dtype, v.loss_scale, v.parent_run_id, v.parent_epoch,
         v.metric, v.higher_is_better, v.best_value,
         CASE WHEN v.in_epochs THEN
           (SELECT MIN(e.epoch) FROM epochs e WHERE e.run_id = v.run_id AND CASE v.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END = v.best_value)
         ELSE
           (SELECT MIN(m.epoch) FROM metrics m
            WHERE m.run_id = v.run_id AND m.name = v.metric AND m.value = v.best_value)
         END AS best_epoch,
         CASE WHEN v.in_epochs THEN
           (SELECT CASE v.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END FROM epochs e WHERE e.run_id = v.run_id AND e.epoch = v.last_epoch)
         ELSE
           (SELECT m.value FROM metrics m
            WHERE m.run_id = v.run_id AND m.name = v.metric AND m.epoch = v.last_epoch)
         END AS last_value,
         v.last_epoch,
         (SELECT COUNT(*) FROM epochs e WHERE e.run_id = v.run_id) AS epochs_recorded,
         (SELECT AVG(e.train_fps_mean) FROM epochs e WHERE e.run_id = v.run_id) AS mean_fps,
         (SELECT SUM(m.value) FROM metrics m
          WHERE m.run_id = v.run_id AND m.name = 'overflow_steps') AS overflow_steps,
         (SELECT SUM(m.value) FROM metrics m
          WHERE m.run_id = v.run_id AND m.name = 'skipped_steps') AS skipped_steps
  FROM valued v
  ORDER BY v.sweep, v.cell_index;

-- Run x epoch: one row per run, its primary metric per epoch as a JSON object keyed by the
-- epoch number ({"0": 61.2, "1": 70.4}; an epoch whose value is NULL is left out), so the whole
-- matrix of a sweep is one row per run. Read epoch 5 with json_extract(by_epoch, '$."5"') or
-- expand with json_each(by_epoch). A fork holds its own epochs (the lineage view adds its
-- parent's).
CREATE VIEW epoch_matrix AS
  WITH base AS (
    SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.cell_index, r.label, r.status,
           r.primary_metric AS metric,
           r.primary_metric IN ('train_loss', 'lr', 'train_fps_mean', 'epoch_seconds') AS in_epochs
    FROM runs r JOIN sweeps s ON s.id = r.sweep_id)
  SELECT b.sweep, b.run_id, b.run, b.cell_index, b.label, b.status, b.metric,
         (SELECT COUNT(*) FROM epochs e WHERE e.run_id = b.run_id) AS epochs_recorded,
         COALESCE(CASE WHEN b.in_epochs THEN
           (SELECT json_group_object(x.epoch, x.value)
            FROM (SELECT e.epoch, CASE b.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END AS value FROM epochs e
                  WHERE e.run_id = b.run_id AND CASE b.metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
                      WHEN 'train_fps_mean' THEN e.train_fps_mean WHEN 'epoch_seconds' THEN e.epoch_seconds END IS NOT NULL ORDER BY e.epoch) x)
         ELSE
           (SELECT json_group_object(x.epoch, x.value)
            FROM (SELECT m.epoch, m.value FROM metrics m
                  WHERE m.run_id = b.run_id AND m.name = b.metric AND m.value IS NOT NULL
                  ORDER BY m.epoch) x)
         END, '{}') AS by_epoch
  FROM base b
  ORDER BY b.sweep, b.cell_index;

-- migration: 6

-- The process that holds a run (Store::claim_run / mark_running; docs/DATABASE.md "Claims"): its
-- pid space ("<boot id>/<pid namespace inode>", or $AMPTUNE_HOST_ID), pid and start time (clock
-- ticks after boot, /proc/PID/stat). A holder in the claimer's own pid space is presumed dead as
-- soon as that process is gone; any other holder when its heartbeat is older than --stale-after.
-- Only the holder writes the run's epochs, heartbeat and status.
ALTER TABLE runs ADD COLUMN claim_machine TEXT;
ALTER TABLE runs ADD COLUMN claim_pid INTEGER;
ALTER TABLE runs ADD COLUMN claim_pid_start INTEGER;

-- migration: 7

-- Data-parallel training (docs/DISTRIBUTED.md), recorded with each claim like threads and
-- device: the processes that train the run (1 for a single process) and the batch of one
-- optimizer step over all of them (data.batch_size, which is per process, x world_size). NULL
-- for runs claimed before this migration.
ALTER TABLE runs ADD COLUMN world_size INTEGER;
ALTER TABLE runs ADD COLUMN global_batch INTEGER;

-- migration: 8

-- `amptune diagnose` (docs/AMP.md "Diagnosing a precision setting"): where a run's precision
-- policy departs from a reference (fp32, O0) on the same weights and batches. One diagnoses row
-- per diagnosed checkpoint (epoch -1: the initial weights of a run without checkpoints); a new
-- diagnosis of the same checkpoint replaces the old one with its rows and advice.
CREATE TABLE diagnoses (
  run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  epoch       INTEGER NOT NULL CHECK (epoch >= -1),
  against     TEXT NOT NULL,           -- the reference opt level ('O0')
  batches     INTEGER NOT NULL CHECK (batches >= 1),
  cosine_min  REAL NOT NULL,           -- below this a module counts as departed
  loss_scale  REAL,                    -- the scale the gradients were computed with
  seconds     REAL,
  recorded_at TEXT NOT NULL,
  PRIMARY KEY (run_id, epoch)
);

-- One row per compared tensor and batch. kind 'forward': a module's output (execution order,
-- children before their parent; module = torchvision-style name, "" = the whole model);
-- 'gradient': a parameter's unscaled gradient (module = the parameter's name, in parameter
-- order); 'cast': a RootNet int32 cast point (casts.int32) against the value it truncates.
-- Errors compare the policy's value with the reference's: cosine similarity; max absolute and
-- max relative error (|x - r| / |r| over elements with r != 0) over finite elements; the share of
-- elements with relative error above 1e-3 and 5e-3. overflow_frac / underflow_frac: the share of
-- the low-precision tensor (activations; the SCALED gradients) that is inf/NaN where the
-- reference is finite, and that is zero where the reference is not, or subnormal (flushed) -
-- NULL under fp32.
CREATE TABLE diagnostics (
  run_id  INTEGER NOT NULL,
  epoch   INTEGER NOT NULL,
  kind    TEXT NOT NULL CHECK (kind IN ('forward', 'gradient', 'cast')),
  batch   INTEGER NOT NULL CHECK (batch >= 0),
  seq     INTEGER NOT NULL CHECK (seq >= 0),
  module  TEXT NOT NULL,
  dtype   TEXT NOT NULL,                 -- fp16 | bf16 | fp32 | int32
  numel   INTEGER NOT NULL CHECK (numel >= 0),
  cosine           REAL,
  max_abs_err      REAL,
  max_rel_err      REAL,
  frac_rel_err_1e3 REAL,
  frac_rel_err_5e3 REAL,
  overflow_frac    REAL,
  underflow_frac   REAL,
  PRIMARY KEY (run_id, epoch, kind, batch, seq),
  FOREIGN KEY (run_id, epoch) REFERENCES diagnoses(run_id, epoch) ON DELETE CASCADE
);

-- What to try, from the documented rules (docs/AMP.md "Advice rules"), in the order printed.
CREATE TABLE diagnosis_advice (
  run_id INTEGER NOT NULL,
  epoch  INTEGER NOT NULL,
  seq    INTEGER NOT NULL,
  rule   TEXT NOT NULL,     -- activation_overflow | gradient_underflow | gradient_overflow |
                            -- batchnorm_low_precision | first_departure | cast_point
  module TEXT NOT NULL,
  advice TEXT NOT NULL,
  PRIMARY KEY (run_id, epoch, seq),
  FOREIGN KEY (run_id, epoch) REFERENCES diagnoses(run_id, epoch) ON DELETE CASCADE
);

-- Per diagnosed run and epoch: the first module in execution order whose output departs (its
-- worst cosine over the batches is below the diagnosis's cosine_min, or NULL: values lost to
-- inf/NaN) or overflows.
CREATE VIEW first_divergence AS
  WITH worst AS (
    SELECT run_id, epoch, seq, module,
           CASE WHEN COUNT(cosine) < COUNT(*) THEN NULL ELSE MIN(cosine) END AS cosine,
           MAX(max_rel_err) AS max_rel_err,
           MAX(overflow_frac) AS overflow_frac
    FROM diagnostics WHERE kind = 'forward'
    GROUP BY run_id, epoch, seq, module),
  flagged AS (
    SELECT w.*, g.cosine_min, g.against,
           ROW_NUMBER() OVER (PARTITION BY w.run_id, w.epoch ORDER BY w.seq) AS n
    FROM worst w JOIN diagnoses g ON g.run_id = w.run_id AND g.epoch = w.epoch
    WHERE w.cosine < g.cosine_min OR w.cosine IS NULL OR w.overflow_frac > 0)
  SELECT s.name AS sweep, r.name AS run, f.run_id, f.epoch, f.against, f.module, f.seq,
         f.cosine, f.max_rel_err, f.overflow_frac,
         CASE WHEN f.overflow_frac > 0 THEN 'overflow' ELSE 'cosine' END AS reason
  FROM flagged f JOIN runs r ON r.id = f.run_id JOIN sweeps s ON s.id = r.sweep_id
  WHERE f.n = 1;

-- migration: 9

-- The evaluation of a run's initial weights (docs/DATABASE.md "Evaluation of the initial
-- weights"): the seeded init, model.weights / model.backbone_weights, or a fork's start,
-- evaluated under the run's precision before any training step. Written by an evaluation-only
-- run (schedule.epochs: 0; in the transaction of its one epoch row, epoch 0 with global_step 0)
-- and by a trained run with schedule.eval_initial: true before its first step (not on resume;
-- resuming keeps it).
CREATE TABLE initial_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT NOT NULL CHECK (name GLOB '[a-z]*' AND name NOT GLOB '*[^a-z0-9_]*'),
  value  REAL,
  PRIMARY KEY (run_id, name)
);

-- How far training moved each run from its starting point: per run and metric of its initial
-- evaluation, the initial value, the best (in metric_info's direction) and last value over its
-- trained epochs (global_step > 0; NULL for an evaluation-only run), the last trained epoch,
-- and change = last_value - initial_value.
CREATE VIEW vs_initial AS
  WITH base AS (
    SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.cell_index, r.label, r.status,
           i.name AS metric, COALESCE(mi.higher_is_better, 1) AS higher_is_better,
           i.value AS initial_value,
           (SELECT MAX(m.epoch) FROM metrics m JOIN epochs e
              ON e.run_id = m.run_id AND e.epoch = m.epoch AND e.global_step > 0
            WHERE m.run_id = r.id AND m.name = i.name AND m.value IS NOT NULL) AS last_epoch
    FROM initial_metrics i
    JOIN runs r ON r.id = i.run_id
    JOIN sweeps s ON s.id = r.sweep_id
    LEFT JOIN metric_info mi ON mi.name = i.name),
  valued AS (
    SELECT b.*,
           (SELECT CASE WHEN b.higher_is_better THEN MAX(m.value) ELSE MIN(m.value) END
            FROM metrics m JOIN epochs e
              ON e.run_id = m.run_id AND e.epoch = m.epoch AND e.global_step > 0
            WHERE m.run_id = b.run_id AND m.name = b.metric) AS best_value,
           (SELECT m.value FROM metrics m
            WHERE m.run_id = b.run_id AND m.name = b.metric AND m.epoch = b.last_epoch)
             AS last_value
    FROM base b)
  SELECT sweep, run_id, run, label, status, metric, higher_is_better, initial_value, best_value,
         last_value, last_epoch, last_value - initial_value AS change
  FROM valued
  ORDER BY sweep, cell_index, run_id, metric;

-- migration: 10

-- Where an epoch's time went (docs/PERFORMANCE.md "Time breakdown"), in seconds; NULL for
-- epochs recorded before this migration. Inside epoch_seconds: the training steps split into
-- data_wait (waiting for the loader), forward (model, loss and reading the loss), backward (loss
-- scaling, the backward pass, unscale and overflow check) and optimizer (the step, masters,
-- scaler update), and eval (the whole evaluation pass). After epoch_seconds: checkpoint (writing
-- the checkpoint file) and db (this epoch's record transaction and retention, set right after
-- them). startup: what the run spent before its first training step in this process (the
-- process's age for a process's first run, the time since the run began for later runs; NULL on
-- later epochs).
-- profile_trace: the Chrome-trace JSON of profile.steps written in this epoch (NULL if none).
ALTER TABLE epochs ADD COLUMN data_wait_seconds REAL;
ALTER TABLE epochs ADD COLUMN forward_seconds REAL;
ALTER TABLE epochs ADD COLUMN backward_seconds REAL;
ALTER TABLE epochs ADD COLUMN optimizer_seconds REAL;
ALTER TABLE epochs ADD COLUMN eval_seconds REAL;
ALTER TABLE epochs ADD COLUMN checkpoint_seconds REAL;
ALTER TABLE epochs ADD COLUMN db_seconds REAL;
ALTER TABLE epochs ADD COLUMN startup_seconds REAL;
ALTER TABLE epochs ADD COLUMN profile_trace TEXT;

-- Why the amp backend on the run row was chosen (amp.backend auto on a CPU: from the CPU's
-- bf16 instructions; or "set by amp.backend"). NULL for runs planned before this migration.
ALTER TABLE runs ADD COLUMN backend_reason TEXT;

-- The breakdown per epoch with the rest of the epoch's wall time (the runner's own work:
-- progress, heartbeats, LR schedule, loss bookkeeping) and the shares of the whole.
CREATE VIEW epoch_times AS
  SELECT s.name AS sweep, r.name AS run, e.run_id, e.epoch,
         e.epoch_seconds + COALESCE(e.checkpoint_seconds, 0) + COALESCE(e.db_seconds, 0)
           AS wall_seconds,
         e.data_wait_seconds, e.forward_seconds, e.backward_seconds, e.optimizer_seconds,
         e.eval_seconds, e.checkpoint_seconds, e.db_seconds,
         e.epoch_seconds - e.data_wait_seconds - e.forward_seconds - e.backward_seconds
           - e.optimizer_seconds - e.eval_seconds AS other_seconds,
         (e.forward_seconds + e.backward_seconds + e.optimizer_seconds)
           / NULLIF(e.epoch_seconds + COALESCE(e.checkpoint_seconds, 0)
                    + COALESCE(e.db_seconds, 0), 0) AS compute_share,
         e.startup_seconds, e.profile_trace
  FROM epochs e JOIN runs r ON r.id = e.run_id JOIN sweeps s ON s.id = r.sweep_id
  WHERE e.forward_seconds IS NOT NULL;

-- migration: 11
-- The malloc the training process ran on (tcmalloc, jemalloc or glibc): it moves CPU images/s
-- by up to 4x (docs/PERFORMANCE.md "Allocator"). NULL for runs started before this migration.
ALTER TABLE runs ADD COLUMN allocator TEXT;

-- migration: 12
-- A run's identity (runs.config_hash) no longer covers where its files go (checkpoint.*), how
-- often things are logged, the thread and loader counts, or the paths of its data and weights;
-- the data enter it through a fingerprint of what they hold (docs/CONFIG.md "Identity"), so the
-- same sweep on another machine with its data elsewhere is the same set of runs. When this
-- migration is applied the code re-hashes every run from its stored config (ids, names and
-- lineage kept; a fork from its parent's new identity) and logs how many changed.
-- legacy_config_hash: the identity before (checkpoints written before this migration carry it);
-- NULL when it did not change. data_fingerprint: the fingerprint of the data the run reads (NULL
-- for runs recorded before: the next `amptune run` of the run's cell fills it in).
ALTER TABLE runs ADD COLUMN data_fingerprint TEXT;
ALTER TABLE runs ADD COLUMN legacy_config_hash TEXT;

-- migration: 13
-- lineage again, with two changes: the walk up the fork chain stops after 1000 ancestors, so a
-- database whose parent links form a cycle (edited by hand; merge refuses such inputs) cannot
-- make a query run forever; and value is read from the epoch row when the run's primary metric
-- is one of its columns (train_loss, lr, train_fps_mean, epoch_seconds), not only from metrics;
-- fork_vs_parent reads such a metric the same way (from epoch_values).
DROP VIEW IF EXISTS lineage;
CREATE VIEW lineage AS
  WITH RECURSIVE chain(run_id, ancestor_id, upto, depth) AS (
    SELECT id, id, NULL, 0 FROM runs
    UNION ALL
    SELECT c.run_id, r.parent_run_id,
           CASE WHEN c.upto IS NULL THEN r.parent_epoch ELSE min(c.upto, r.parent_epoch) END,
           c.depth + 1
    FROM chain c JOIN runs r ON r.id = c.ancestor_id
    WHERE r.parent_run_id IS NOT NULL AND c.depth < 1000
  )
  SELECT r.id AS run_id, r.name AS run, e.epoch, e.run_id AS source_run_id,
         src.name AS source_run, e.lr, e.train_loss, r.primary_metric AS metric,
         CASE r.primary_metric WHEN 'train_loss' THEN e.train_loss WHEN 'lr' THEN e.lr
              WHEN 'train_fps_mean' THEN e.train_fps_mean
              WHEN 'epoch_seconds' THEN e.epoch_seconds ELSE m.value END AS value
  FROM chain c
  JOIN runs r ON r.id = c.run_id
  JOIN epochs e ON e.run_id = c.ancestor_id AND (c.upto IS NULL OR e.epoch <= c.upto)
  JOIN runs src ON src.id = e.run_id
  LEFT JOIN metrics m ON m.run_id = e.run_id AND m.epoch = e.epoch AND m.name = r.primary_metric
  ORDER BY r.id, e.epoch;

DROP VIEW IF EXISTS fork_vs_parent;
CREATE VIEW fork_vs_parent AS
  SELECT f.id AS fork_id, f.name AS fork, p.id AS parent_id, p.name AS parent, f.parent_epoch,
         f.fork_changes, f.reset_optimizer, f.status, f.primary_metric AS metric,
         (SELECT value FROM epoch_values WHERE run_id = p.id AND epoch = f.parent_epoch
            AND name = f.primary_metric) AS parent_at_fork,
         (SELECT v.value FROM epoch_values v WHERE v.run_id = p.id AND v.name = f.primary_metric
            ORDER BY v.epoch DESC LIMIT 1) AS parent_last,
         (SELECT v.value FROM epoch_values v WHERE v.run_id = f.id AND v.name = f.primary_metric
            ORDER BY v.epoch DESC LIMIT 1) AS fork_last
  FROM runs f JOIN runs p ON p.id = f.parent_run_id
  ORDER BY p.id, f.parent_epoch, f.id;

-- migration: 14
-- The database's identity: a random id made when this migration runs. A checkpoint folder is
-- claimed by one database (a file .amptune-database in it names this id), so two databases
-- given the same checkpoint.dir cannot overwrite or delete each other's checkpoints.
CREATE TABLE database_identity (
  id TEXT NOT NULL CHECK (length(id) = 32)
);
INSERT INTO database_identity (id) VALUES (lower(hex(randomblob(16))));

-- migration: 15
-- Pruning (docs/PRUNING.md): a sweep's prune: rule stops losing cells early. Such a run has status
-- 'pruned' (it keeps its checkpoints and continues when the rule, a changed rule or --no-prune
-- lets it). SQLite cannot alter a CHECK constraint, so when this migration is applied the code
-- widens the one on runs.status to take 'pruned' by SQLite's documented procedure for schema
-- changes that leave every stored row valid (writable_schema, schema_version + 1,
-- integrity_check), in this migration's transaction.
-- prune_decisions: every decision to stop a run, or to continue a pruned one, with its evidence:
-- the rule, the rung (asha), the run's value, the threshold it had to reach and the runs it was
-- compared with (compared_json: [{"run_id": 3, "value": 0.41}, ...], best first).
CREATE TABLE prune_decisions (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  epoch         INTEGER NOT NULL CHECK (epoch >= 0),
  action        TEXT NOT NULL CHECK (action IN ('stop', 'continue')),
  rule          TEXT NOT NULL CHECK (rule IN ('asha', 'median', 'none')),
  metric        TEXT NOT NULL,
  rung          INTEGER CHECK (rung IS NULL OR rung >= 0),
  value         REAL,
  threshold     REAL,
  compared_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(compared_json)),
  reason        TEXT NOT NULL DEFAULT '',
  decided_at    TEXT NOT NULL
);
CREATE INDEX prune_decisions_by_run ON prune_decisions(run_id, id);

-- The runs a prune: rule stopped, with where and why (their last decision to stop).
CREATE VIEW pruned_runs AS
  SELECT s.name AS sweep, r.id AS run_id, r.name AS run, r.label, d.epoch AS stopped_after_epoch,
         d.rule, d.rung, d.metric, d.value, d.threshold, d.reason, d.decided_at
  FROM runs r JOIN sweeps s ON s.id = r.sweep_id
  JOIN prune_decisions d ON d.id = (SELECT max(id) FROM prune_decisions
                                    WHERE run_id = r.id AND action = 'stop')
  WHERE r.status = 'pruned'
  ORDER BY s.name, r.cell_index;

-- migration: 16
-- Tuning (amptune tune, docs/TUNE.md): a search for the lowest-precision setting within a
-- tolerance of a reference. One tune_searches row per sweep and tune: block (block_json, its
-- canonical JSON: a changed block is a new search that reuses the runs already trained); its
-- rounds (a start run, the epoch its candidates fork from, the diagnosis the moves came from)
-- and their candidates (one move each: the keys it changes, why, the advice row it came from,
-- its run, how far successive halving let it train and how it ended). status 'searching' until
-- the search answers (answer_run_id, answer_yaml: the changed keys, ready for base:) or ends
-- without a solution ('exhausted': budget spent or no move left; note says which).
CREATE TABLE tune_searches (
  id               INTEGER PRIMARY KEY,
  sweep_id         INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
  block_json       TEXT NOT NULL CHECK (json_valid(block_json)),
  metric           TEXT NOT NULL,
  higher_is_better INTEGER NOT NULL CHECK (higher_is_better IN (0, 1)),
  reference_run_id INTEGER NOT NULL REFERENCES runs(id),
  start_run_id     INTEGER NOT NULL REFERENCES runs(id),
  status           TEXT NOT NULL DEFAULT 'searching'
                   CHECK (status IN ('searching', 'answered', 'exhausted')),
  answer_run_id    INTEGER REFERENCES runs(id),
  answer_yaml      TEXT NOT NULL DEFAULT '',
  answer_value     REAL,
  reference_value  REAL,
  epochs_spent     INTEGER,   -- epochs the search's runs trained (the reference and start too)
  grid_epochs      INTEGER,   -- what the full grid of the moves it tried would have trained
  note             TEXT NOT NULL DEFAULT '',
  created_at       TEXT NOT NULL,
  finished_at      TEXT,
  UNIQUE (sweep_id, block_json)
);

CREATE TABLE tune_rounds (
  search_id       INTEGER NOT NULL REFERENCES tune_searches(id) ON DELETE CASCADE,
  round           INTEGER NOT NULL CHECK (round >= 1),
  kind            TEXT NOT NULL CHECK (kind IN ('search', 'bisect')),
  start_run_id    INTEGER NOT NULL REFERENCES runs(id),
  fork_epoch      INTEGER NOT NULL CHECK (fork_epoch >= -1),  -- -1: fresh runs
  diagnosis_epoch INTEGER CHECK (diagnosis_epoch IS NULL OR diagnosis_epoch >= -1),
  note            TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (search_id, round)
);

CREATE TABLE tune_candidates (
  search_id       INTEGER NOT NULL,
  round           INTEGER NOT NULL,
  seq             INTEGER NOT NULL CHECK (seq >= 0),
  move            TEXT NOT NULL,  -- loss_scale | casts | keep_batchnorm_fp32 | fp32_modules |
                                  -- opt_level | lr_dec_epoch
  change_json     TEXT NOT NULL CHECK (json_valid(change_json)),  -- {"amp.loss_scale": "dynamic"}
  reason          TEXT NOT NULL,
  advice_rule     TEXT,           -- the diagnosis_advice row the move came from (NULL: the order)
  advice_module   TEXT,
  run_id          INTEGER NOT NULL REFERENCES runs(id),
  parent_run_id   INTEGER REFERENCES runs(id),  -- the run it continues; NULL: a fresh run
  fork_epoch      INTEGER NOT NULL CHECK (fork_epoch >= -1),
  rung            INTEGER,        -- the last rung it reached (0-based); NULL before the first
  value           REAL,           -- its metric at the last decision about it
  reference_value REAL,           -- the reference's at that epoch
  outcome         TEXT NOT NULL DEFAULT 'pending'
                  CHECK (outcome IN ('pending', 'within', 'outside', 'pruned', 'diverged',
                                     'failed')),
  PRIMARY KEY (search_id, round, seq),
  FOREIGN KEY (search_id, round) REFERENCES tune_rounds(search_id, round) ON DELETE CASCADE
);

-- The decision path of every search: round by round, each candidate's move, why, and how it
-- ended; is_answer marks the answer's run.
CREATE VIEW tune_path AS
  SELECT s.name AS sweep, t.id AS search_id, c.round, k.kind, st.name AS round_start,
         k.fork_epoch, c.seq, c.move, c.change_json, c.reason, c.advice_rule, c.advice_module,
         r.name AS run, c.rung, c.value, c.reference_value, c.outcome,
         coalesce(t.answer_run_id = c.run_id, 0) AS is_answer
  FROM tune_candidates c
  JOIN tune_rounds k ON k.search_id = c.search_id AND k.round = c.round
  JOIN tune_searches t ON t.id = c.search_id
  JOIN sweeps s ON s.id = t.sweep_id
  JOIN runs r ON r.id = c.run_id
  JOIN runs st ON st.id = k.start_run_id
  ORDER BY s.name, t.id, c.round, c.seq;

-- migration: 17
-- diagnostics.input_nonfinite_frac (forward rows): the share of the module's input that was
-- inf/NaN under the run's policy. A module whose output overflows from finite input is where an
-- overflow starts; one whose input was already inf/NaN only carries an earlier overflow on
-- (docs/AMP.md "Advice rules": one activation_overflow row per such start). NULL for gradient
-- and cast rows, and for rows recorded before this migration.
ALTER TABLE diagnostics ADD COLUMN input_nonfinite_frac REAL;

-- migration: 18
-- Tuning II (docs/TUNE.md): rounds of more kinds. 'union' tries the moves of a round that each
-- got further, together; 'confirm' trains the answer from scratch when it is a fork
-- (tune.confirm); 'reference' (round 0) trains the reference with other seeds to measure the
-- seed noise (tune.reference_repeats). SQLite cannot alter a CHECK constraint, so when this
-- migration is applied the code widens tune_rounds' checks on round (>= 0) and kind, as
-- migration 15 did for runs.status (writable_schema, schema_version + 1, integrity_check), in
-- this migration's transaction. Candidates of the new kinds have move 'union', 'confirm',
-- 'seed' or 'undo' (a bisection probe that undoes a union's key), beside the move names of 16.
-- The view tune_path lists them like the others, now with each round's note (why the round was
-- made: where its start left the band and how many advice rows its diagnosis gave, which moves a
-- union combines, which items a bisection keeps). And the direction of the per-epoch metric
-- nonfinite_streak (docs/AMP.md "Divergence"; tune reads an epoch that ends inside a streak as a
-- divergence).
INSERT OR IGNORE INTO metric_info (name, higher_is_better, description) VALUES
  ('nonfinite_streak', 0, 'inf/NaN training losses in a row at the end of the epoch, counting ' ||
   'earlier epochs and the run it continues');
DROP VIEW tune_path;
CREATE VIEW tune_path AS
  SELECT s.name AS sweep, t.id AS search_id, c.round, k.kind, st.name AS round_start,
         k.fork_epoch, c.seq, c.move, c.change_json, c.reason, c.advice_rule, c.advice_module,
         r.name AS run, c.rung, c.value, c.reference_value, c.outcome,
         coalesce(t.answer_run_id = c.run_id, 0) AS is_answer, k.note AS round_note
  FROM tune_candidates c
  JOIN tune_rounds k ON k.search_id = c.search_id AND k.round = c.round
  JOIN tune_searches t ON t.id = c.search_id
  JOIN sweeps s ON s.id = t.sweep_id
  JOIN runs r ON r.id = c.run_id
  JOIN runs st ON st.id = k.start_run_id
  ORDER BY s.name, t.id, c.round, c.seq;

-- migration: 19
-- A run's distance to the hardware limit, MFU (docs/PERFORMANCE.md "MFU"), written when the run
-- starts training (by the process that records it). train_flops_per_sample: the FLOPs of
-- training on one sample, the forward pass's multiply-accumulates of its convolutions,
-- transposed convolutions and linear layers x 2 (a multiply and an add) x 3 (forward + backward,
-- the convention of the PaLM and Megatron papers); the config's, the same at every start.
-- peak_flops: the FLOP/s of the devices that train the run (one device's peak x world_size) in
-- peak_precision ('fp32', 'fp16' or 'bf16': what the run's amp policy computes in), and
-- peak_source, how that figure was found (the CPU's cores x vector lanes x FMA units x 2 x clock,
-- the CUDA table's row, or --peak-flops / AMPTUNE_PEAK_FLOPS); each start writes them again (a
-- resume on another machine measures against that machine). NULL for runs started before this
-- migration, and the peak NULL when it is not known (a GPU not in the table).
ALTER TABLE runs ADD COLUMN train_flops_per_sample REAL
  CHECK (train_flops_per_sample IS NULL OR train_flops_per_sample > 0);
ALTER TABLE runs ADD COLUMN peak_flops REAL CHECK (peak_flops IS NULL OR peak_flops > 0);
ALTER TABLE runs ADD COLUMN peak_precision TEXT
  CHECK (peak_precision IS NULL OR peak_precision IN ('fp32', 'fp16', 'bf16'));
ALTER TABLE runs ADD COLUMN peak_source TEXT;

-- Per trained epoch: the job's train img/s (summed over the ranks of a data-parallel run), the
-- FLOP/s it achieved (img/s x train_flops_per_sample) and the model FLOPs utilisation (mfu, a
-- share of peak_flops: 0.05 is 5%). Epochs of runs whose work or peak is not known are left out.
CREATE VIEW epoch_mfu AS
  SELECT s.name AS sweep, r.name AS run, e.run_id, e.epoch, e.train_fps_mean AS train_img_s,
         r.train_flops_per_sample,
         e.train_fps_mean * r.train_flops_per_sample AS achieved_flops,
         r.peak_flops, e.train_fps_mean * r.train_flops_per_sample / r.peak_flops AS mfu,
         r.peak_precision, r.peak_source
  FROM epochs e JOIN runs r ON r.id = e.run_id JOIN sweeps s ON s.id = r.sweep_id
  WHERE e.train_fps_mean > 0 AND r.train_flops_per_sample > 0 AND r.peak_flops > 0;

-- migration: 20
-- The BLAS library the training process's fp32 matmuls ran on (blas: the library serving
-- sgemm_, found at run time, e.g. "OpenBLAS 0.3.21 ..., OpenMP (...)" or "reference BLAS (netlib,
-- unoptimised: ...)"): Debian's LibTorch hands every matmul to the system's libblas.so.3, and the
-- reference one is ~30x slower than OpenBLAS (docs/PERFORMANCE.md "BLAS"). Written with the
-- other provenance at each start. And uncounted_ops: the ops of the run's forward pass that
-- compute products in fused kernels train_flops_per_sample cannot see into (aten names, comma
-- separated), so that figure and the MFU are lower bounds; NULL when every product was counted.
-- Both NULL for runs started before this migration.
ALTER TABLE runs ADD COLUMN blas TEXT;
ALTER TABLE runs ADD COLUMN uncounted_ops TEXT;

-- migration: 21
-- The Slurm jobs of `amptune tune --slurm` (docs/TUNE.md "On a cluster"): one row per array task
-- that trains run_id up to epoch (or to its end) in a database of its own (task_db, the run's
-- rows copied in), written when the job is submitted, so that a search process started again
-- after it was killed finds the jobs it was waiting for: it waits for those still queued or
-- running, merges the task databases of those that ended, and resubmits a task whose run did not
-- get there once (attempt 2; the key bounds the retries). state: the last job state seen
-- (Slurm's word: PENDING, RUNNING, COMPLETED, FAILED, 'CANCELLED by 1000', ...); ended_at: when
-- its task database was merged back (NULL: in flight). log_path: the task's output.
CREATE TABLE tune_jobs (
  search_id    INTEGER NOT NULL REFERENCES tune_searches(id) ON DELETE CASCADE,
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  epoch        INTEGER NOT NULL CHECK (epoch >= 0),
  attempt      INTEGER NOT NULL CHECK (attempt >= 1),
  job_id       TEXT NOT NULL,
  task         INTEGER NOT NULL CHECK (task >= 0),
  task_db      TEXT NOT NULL,
  log_path     TEXT NOT NULL,
  state        TEXT NOT NULL DEFAULT 'SUBMITTED',
  submitted_at TEXT NOT NULL,
  ended_at     TEXT,
  PRIMARY KEY (search_id, run_id, epoch, attempt)
);

-- migration: 22
-- FP8 in the diagnosis (docs/AMP.md "Diagnosing FP8"): for a run with amp.fp8.enabled, one row
-- per quantisation of a GEMM operand in a diagnosed batch's pass (seq: their order in the pass),
-- module = the FP8 slot's key (the module's name, '#k' appended for its k-th GEMM in one call),
-- role input | weight | grad_output, format e4m3 | e5m2. saturated_frac: the share of the values
-- whose |x * scale| is beyond the format's max (they saturate); flushed_frac: the share of the
-- nonzero values that quantise to zero; sqnr_db: 10 log10(sum x^2 / sum (x - q / scale)^2) of
-- the fake-quantised tensor against its fp32 value (NULL: no error at all); amax: the tensor's
-- largest finite |x|; scale: the scale it was quantised with; history_min / history_max /
-- history_len: the slot's amax history when it was quantised (the checkpoint's, advanced by the
-- diagnosed batches before this one; len 0 and NULLs: empty, as before the first step or under
-- current scaling's first use).
CREATE TABLE fp8_diagnostics (
  run_id         INTEGER NOT NULL,
  epoch          INTEGER NOT NULL,
  batch          INTEGER NOT NULL CHECK (batch >= 0),
  seq            INTEGER NOT NULL CHECK (seq >= 0),
  module         TEXT NOT NULL,
  role           TEXT NOT NULL CHECK (role IN ('input', 'weight', 'grad_output')),
  format         TEXT NOT NULL CHECK (format IN ('e4m3', 'e5m2')),
  numel          INTEGER NOT NULL CHECK (numel >= 0),
  saturated_frac REAL,
  flushed_frac   REAL,
  sqnr_db        REAL,
  amax           REAL,
  scale          REAL,
  history_min    REAL,
  history_max    REAL,
  history_len    INTEGER NOT NULL CHECK (history_len >= 0),
  PRIMARY KEY (run_id, epoch, batch, seq),
  FOREIGN KEY (run_id, epoch) REFERENCES diagnoses(run_id, epoch) ON DELETE CASCADE
);

-- Per diagnosed run, epoch, FP8 slot and role: the worst over the batches (largest saturated
-- and flushed shares, lowest SQNR), the amax history's range and its ratio (max / min: a jump
-- or a stale spike shows as a large one), the largest amax seen and the smallest scale used.
CREATE VIEW fp8_slots AS
  SELECT s.name AS sweep, r.name AS run, f.run_id, f.epoch, f.module, f.role, f.format,
         MAX(f.saturated_frac) AS saturated_frac, MAX(f.flushed_frac) AS flushed_frac,
         MIN(f.sqnr_db) AS sqnr_db, MAX(f.amax) AS amax, MIN(f.scale) AS scale,
         MIN(f.history_min) AS history_min, MAX(f.history_max) AS history_max,
         CASE WHEN MIN(f.history_min) > 0 THEN MAX(f.history_max) / MIN(f.history_min) END
           AS history_ratio,
         MIN(f.seq) AS first_seq
  FROM fp8_diagnostics f JOIN runs r ON r.id = f.run_id JOIN sweeps s ON s.id = r.sweep_id
  GROUP BY f.run_id, f.epoch, f.module, f.role, f.format;
