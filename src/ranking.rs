//! Ranking metrics shared by annotation benchmarks and evaluation.

/// Kendall's tau-b rank correlation of two equally long sequences, with the
/// tie correction of Kendall (1945), as `scipy.stats.kendalltau` computes it
/// (the paper's Table 1 "Kendall's tau" between predicted and Stockfish
/// action values of a board):
///
/// tau_b = (concordant - discordant) / sqrt((n0 - ties_x) * (n0 - ties_y)),
/// n0 = n (n - 1) / 2, ties counted over pairs.
///
/// `None` when it is undefined: fewer than two items, different lengths, or
/// a sequence that is constant. O(n^2), fine for one board's moves (<= 218).
///
/// ```
/// use chessbench::ranking::kendall_tau_b;
/// assert_eq!(kendall_tau_b(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
/// assert_eq!(kendall_tau_b(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
/// ```
pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len();
    if n < 2 || y.len() != n {
        return None;
    }
    let (mut concordant, mut discordant, mut ties_x, mut ties_y) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let dx = x[i].partial_cmp(&x[j])?;
            let dy = y[i].partial_cmp(&y[j])?;
            use std::cmp::Ordering::Equal;
            match (dx, dy) {
                (Equal, Equal) => {
                    ties_x += 1;
                    ties_y += 1;
                }
                (Equal, _) => ties_x += 1,
                (_, Equal) => ties_y += 1,
                (a, b) if a == b => concordant += 1,
                _ => discordant += 1,
            }
        }
    }
    let n0 = (n * (n - 1) / 2) as i64;
    let denom = ((n0 - ties_x) as f64 * (n0 - ties_y) as f64).sqrt();
    if denom == 0.0 {
        return None;
    }
    Some((concordant - discordant) as f64 / denom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_golden_vectors() {
        let text = crate::testing::golden("kendall_tau.jsonl");
        let mut n = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let f = |k: &str| -> Vec<f64> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            };
            let got = kendall_tau_b(&f("x"), &f("y")).unwrap();
            let want = v["tau_b"].as_f64().unwrap();
            assert!((got - want).abs() < 1e-12, "{line}: {got}");
            n += 1;
        }
        assert_eq!(n, 30);
    }

    #[test]
    fn undefined_cases() {
        assert_eq!(kendall_tau_b(&[1.0], &[1.0]), None);
        assert_eq!(kendall_tau_b(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(kendall_tau_b(&[1.0, 2.0], &[1.0]), None);
    }
}
