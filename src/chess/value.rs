//! Values: centipawns to win probability, uniform value buckets, HL-Gauss
//! label smoothing.
//!
//! Sources: Ruoss et al. (2024) §2.1–2.2 and `searchless_chess/src/utils.py`
//! (`centipawns_to_win_probability`, `get_uniform_buckets_edges_values`,
//! `compute_return_buckets_from_returns`); HL-Gauss from Farebrother et al.
//! (2024), "Stop Regressing", as used in the paper's Table 2 ablation.

use thiserror::Error;

/// Lichess's logistic fit: win% = 50 + 50 * (2 / (1 + exp(-k * cp)) - 1).
pub(crate) const LICHESS_CP_SCALE: f64 = 0.00368208;

/// Win probability in [0, 1] of the side to move for a score in centipawns.
///
/// Exactly the reference expression, so results match bit for bit:
/// `0.5 + 0.5 * (2 / (1 + exp(-0.00368208 * cp)) - 1)`.
///
/// ```
/// use chessbench::chess::value::centipawns_to_win_probability;
/// assert_eq!(centipawns_to_win_probability(0.0), 0.5);
/// assert!((centipawns_to_win_probability(34.0) - 0.531256867324871).abs() < 1e-12);
/// ```
pub fn centipawns_to_win_probability(cp: f64) -> f64 {
    0.5 + 0.5 * (2.0 / (1.0 + (-LICHESS_CP_SCALE * cp).exp()) - 1.0)
}

/// Win probability of the side to move for a UCI `score mate N`: the side that
/// mates (N > 0) wins with probability 1, the side being mated (N <= 0) with 0.
/// The paper maps mates to the extreme bins.
pub(crate) fn mate_to_win_probability(mate: i32) -> f64 {
    if mate > 0 { 1.0 } else { 0.0 }
}

/// Invalid bucket configuration.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BucketError {
    #[error("the number of value buckets must be at least 2, got {0}")]
    TooFew(usize),
}

/// K uniform bins over [0, 1] (the paper uses K = 128).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueBuckets {
    /// The K - 1 interior edges: `linspace(0, 1, K + 1)[1:-1]`.
    edges: Vec<f64>,
    /// The K bin centres.
    values: Vec<f64>,
}

/// `numpy.linspace(0, 1, k + 1)`, bit for bit: `i * (1 / k)`, last point 1.
fn unit_linspace(k: usize) -> Vec<f64> {
    let step = 1.0 / k as f64;
    let mut points: Vec<f64> = (0..=k).map(|i| i as f64 * step + 0.0).collect();
    points[k] = 1.0;
    points
}

impl ValueBuckets {
    /// Builds K uniform buckets.
    pub fn new(k: usize) -> Result<ValueBuckets, BucketError> {
        if k < 2 {
            return Err(BucketError::TooFew(k));
        }
        let full = unit_linspace(k);
        let edges = full[1..k].to_vec();
        let values = full.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
        Ok(ValueBuckets { edges, values })
    }

    /// Number of buckets K.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The bucket of a win probability: the number of interior edges strictly
    /// below it (`numpy.searchsorted(edges, x, side='left')`).
    pub(crate) fn bucket(&self, win_prob: f64) -> usize {
        self.edges.partition_point(|&e| e < win_prob)
    }

    /// Bin centres, the value a bucket stands for.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Interior edges.
    pub fn edges(&self) -> &[f64] {
        &self.edges
    }
}

/// HL-Gauss target distribution over K uniform bins of [0, 1] for a scalar
/// target `y`: the mass of N(y, sigma^2) in each bin, renormalised to the mass
/// inside [0, 1]. The paper's default width is `sigma = 0.75 / K`.
///
/// `target_i = (erf((e_{i+1} - y) / (sqrt 2 sigma)) - erf((e_i - y) / (sqrt 2 sigma))) / Z`
/// with `e = linspace(0, 1, K + 1)` and Z the same difference between e_K and e_0.
///
/// The reference form, checked against the golden vectors; the trainer
/// computes the same batched on the device (`train::loss`), tested against
/// this.
pub fn hl_gauss_target(k: usize, sigma: f64, y: f64) -> Result<Vec<f64>, BucketError> {
    if k < 2 {
        return Err(BucketError::TooFew(k));
    }
    let scale = std::f64::consts::SQRT_2 * sigma;
    let cdf: Vec<f64> = unit_linspace(k)
        .iter()
        .map(|&e| libm::erf((e - y) / scale))
        .collect();
    let z = cdf[k] - cdf[0];
    Ok(cdf.windows(2).map(|w| (w[1] - w[0]) / z).collect())
}

/// The paper's default HL-Gauss width for K bins.
pub fn default_hl_gauss_sigma(k: usize) -> f64 {
    0.75 / k as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Option<Vec<serde_json::Value>> {
        Some(
            crate::testing::golden(name)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        )
    }

    #[test]
    fn win_probability_examples() {
        assert_eq!(centipawns_to_win_probability(0.0), 0.5);
        assert!((centipawns_to_win_probability(-3000.0) - 1.594674305327448e-05).abs() < 1e-12);
        assert_eq!(mate_to_win_probability(3), 1.0);
        assert_eq!(mate_to_win_probability(-1), 0.0);
        assert_eq!(mate_to_win_probability(0), 0.0);
    }

    #[test]
    fn win_probability_golden() {
        let Some(rows) = golden("win_prob.jsonl") else {
            return;
        };
        for r in &rows {
            let cp = r["cp"].as_f64().unwrap();
            let want = r["win_prob"].as_f64().unwrap();
            let got = centipawns_to_win_probability(cp);
            assert!((got - want).abs() < 1e-12, "cp {cp}: {got} vs {want}");
        }
        assert!(rows.len() > 100);
    }

    #[test]
    fn buckets_examples() {
        let b = ValueBuckets::new(4).unwrap();
        assert_eq!(b.values(), &[0.125, 0.375, 0.625, 0.875]);
        assert_eq!(b.bucket(0.0), 0);
        assert_eq!(b.bucket(0.25), 0); // edge itself goes left
        assert_eq!(b.bucket(0.5), 1);
        assert_eq!(b.bucket(1.0), 3);
        assert_eq!(ValueBuckets::new(1), Err(BucketError::TooFew(1)));
    }

    #[test]
    fn buckets_golden() {
        let Some(rows) = golden("buckets.jsonl") else {
            return;
        };
        let (mut checked_buckets, mut checked_values) = (0, 0);
        for r in &rows {
            let k = r["K"].as_u64().unwrap() as usize;
            let b = ValueBuckets::new(k).unwrap();
            if let Some(values) = r.get("bucket_values") {
                let want: Vec<f64> = values
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                assert_eq!(b.values(), want.as_slice(), "K={k}");
                checked_values += 1;
            } else {
                let x = r["win_prob"].as_f64().unwrap();
                let want = r["bucket"].as_u64().unwrap() as usize;
                assert_eq!(b.bucket(x), want, "K={k} x={x}");
                checked_buckets += 1;
            }
        }
        assert!(checked_buckets > 100 && checked_values >= 6);
    }

    #[test]
    fn hl_gauss_sums_to_one_and_peaks_at_target() {
        let t = hl_gauss_target(32, default_hl_gauss_sigma(32), 0.5).unwrap();
        assert!((t.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let argmax = (0..32).max_by(|&a, &b| t[a].total_cmp(&t[b])).unwrap();
        assert!(argmax == 15 || argmax == 16);
    }

    #[test]
    fn hl_gauss_golden() {
        let Some(rows) = golden("hl_gauss.jsonl") else {
            return;
        };
        for r in &rows {
            let k = r["K"].as_u64().unwrap() as usize;
            let sigma = r["sigma"].as_f64().unwrap();
            assert_eq!(sigma, default_hl_gauss_sigma(k));
            let y = r["y"].as_f64().unwrap();
            let got = hl_gauss_target(k, sigma, y).unwrap();
            let want = r["target"].as_array().unwrap();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w.as_f64().unwrap()).abs() < 1e-6, "K={k} y={y}");
            }
        }
        assert_eq!(rows.len(), 12);
    }
}
