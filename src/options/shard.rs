//! Which slice of a job a process does (`--shard I/N`), from the command
//! line or a cluster scheduler's environment.

use serde::{Deserialize, Serialize};
use std::str::FromStr;
use thiserror::Error;

/// A `--shard` or a cluster environment that does not name a shard.
#[derive(Debug, Error)]
#[error("invalid {option}: {message}")]
pub struct ShardError {
    pub option: &'static str,
    pub message: String,
}

fn invalid(option: &'static str, message: impl Into<String>) -> ShardError {
    ShardError {
        option,
        message: message.into(),
    }
}

/// Which slice of a job this process does (`--shard I/N`): annotate's
/// chunks of boards, ablate's variants. A cluster scheduler's array gives
/// it through the environment ([`Shard::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` (0 <= I < N).
    pub(crate) fn parse(text: &str) -> Result<Shard, ShardError> {
        let bad = || {
            invalid(
                "--shard",
                format!("expected I/N with 0 <= I < N, got {text:?}"),
            )
        };
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The shard from a cluster scheduler's environment: a Slurm job array
    /// (`SLURM_ARRAY_TASK_ID` - `SLURM_ARRAY_TASK_MIN` of
    /// `SLURM_ARRAY_TASK_COUNT`) or a Kubernetes Indexed Job
    /// (`JOB_COMPLETION_INDEX` of `CHESSBENCH_SHARD_COUNT`, which the Job
    /// sets to its `completions`).
    pub(crate) fn from_env(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<(Shard, &'static str)>, ShardError> {
        let num = |name: &'static str| -> Result<Option<u32>, ShardError> {
            match get(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| invalid(name, format!("expected a number, got {v:?}"))),
            }
        };
        if let (Some(id), Some(count)) =
            (num("SLURM_ARRAY_TASK_ID")?, num("SLURM_ARRAY_TASK_COUNT")?)
        {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let index = id
                .checked_sub(min)
                .ok_or_else(|| invalid("SLURM_ARRAY_TASK_ID", "below SLURM_ARRAY_TASK_MIN"))?;
            if count == 0 || index >= count {
                return Err(invalid(
                    "SLURM_ARRAY_TASK_ID",
                    format!(
                        "task {id} (min {min}) is outside an array of {count}; use a contiguous --array=0-{}",
                        count.saturating_sub(1)
                    ),
                ));
            }
            return Ok(Some((Shard { index, count }, "Slurm job array")));
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = num("CHESSBENCH_SHARD_COUNT")?.ok_or_else(|| {
                invalid(
                    "CHESSBENCH_SHARD_COUNT",
                    "JOB_COMPLETION_INDEX is set (Kubernetes Indexed Job) but the shard count is not; set it to the Job's completions",
                )
            })?;
            if count == 0 || index >= count {
                return Err(invalid(
                    "JOB_COMPLETION_INDEX",
                    format!("{index} is outside {count} shards"),
                ));
            }
            return Ok(Some((Shard { index, count }, "Kubernetes Indexed Job")));
        }
        Ok(None)
    }
}

impl Shard {
    /// Whether item `i` of a job belongs to this shard: items are dealt
    /// round-robin, `i mod N == I`.
    pub fn owns(self, i: usize) -> bool {
        i % self.count as usize == self.index as usize
    }
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(text: &str) -> Result<Shard, ShardError> {
        Shard::parse(text)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shard_parsing() {
        assert_eq!(Shard::parse("2/4").unwrap(), Shard { index: 2, count: 4 });
        for bad in ["4/4", "1", "a/b", "0/0", "-1/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let s = Shard { index: 1, count: 3 };
        let owned: Vec<usize> = (0..7).filter(|&i| s.owns(i)).collect();
        assert_eq!(owned, [1, 4]);
    }

    #[test]
    fn shard_from_cluster_environment() {
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(
            Shard::from_env(env(&slurm)).unwrap(),
            Some((Shard { index: 1, count: 4 }, "Slurm job array"))
        );
        let k8s = [
            ("JOB_COMPLETION_INDEX", "3"),
            ("CHESSBENCH_SHARD_COUNT", "8"),
        ];
        assert_eq!(
            Shard::from_env(env(&k8s)).unwrap(),
            Some((Shard { index: 3, count: 8 }, "Kubernetes Indexed Job"))
        );
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "3")])).is_err());
        assert!(
            Shard::from_env(env(&[
                ("SLURM_ARRAY_TASK_ID", "9"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ]))
            .is_err()
        );
        assert_eq!(Shard::from_env(env(&[])).unwrap(), None);
    }
}
