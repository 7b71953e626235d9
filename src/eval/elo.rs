//! Elo ratings from game results: the maximum-likelihood Bradley-Terry fit
//! on the Elo scale (a draw counts half a win for each side, as in Ordo
//! and the paper's BayesElo-style tables), anchored to a named player.
//!
//! P(i beats j) = 1 / (1 + 10^((r_j - r_i) / 400)).
//!
//! A prior of `prior_draws` virtual draws between every pair that met keeps
//! the fit finite when a player wins or loses every game (BayesElo's
//! default prior is 2 virtual draws). 95% intervals come from the inverse
//! of the observed information (the log-likelihood's curvature) with the
//! anchor fixed, so they are intervals relative to the anchor.

use serde::Serialize;

/// One game's result from `white`'s point of view.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GameRecord {
    pub white: String,
    pub black: String,
    /// 1 win, 0.5 draw, 0 loss (for white).
    pub white_score: f64,
}

/// A fitted rating.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rating {
    pub player: String,
    pub elo: f64,
    /// Half-width of the 95% interval (0 for the anchor).
    pub ci95: f64,
    pub games: u64,
    /// Points scored (real games only).
    pub score: f64,
}

/// Why a fit is impossible.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EloError {
    #[error("the anchor {0:?} played no game")]
    UnknownAnchor(String),
    #[error("{0:?} is not connected to the anchor by games")]
    Disconnected(String),
}

const C: f64 = std::f64::consts::LN_10 / 400.0;

/// Fits ratings; the anchor gets `anchor_elo`. Sorted by rating, best first.
pub(crate) fn fit(
    games: &[GameRecord],
    anchor: &str,
    anchor_elo: f64,
    prior_draws: f64,
) -> Result<Vec<Rating>, EloError> {
    let mut names: Vec<String> = Vec::new();
    let idx = |names: &mut Vec<String>, n: &str| -> usize {
        names.iter().position(|x| x == n).unwrap_or_else(|| {
            names.push(n.to_owned());
            names.len() - 1
        })
    };
    // Pairwise (games, points of the first) with i < j.
    let mut pairs: std::collections::BTreeMap<(usize, usize), (f64, f64)> = Default::default();
    let mut played = Vec::new();
    let mut scored = Vec::new();
    for g in games {
        let (w, b) = (idx(&mut names, &g.white), idx(&mut names, &g.black));
        played.resize(names.len(), 0u64);
        scored.resize(names.len(), 0.0f64);
        played[w] += 1;
        played[b] += 1;
        scored[w] += g.white_score;
        scored[b] += 1.0 - g.white_score;
        let (key, s) = if w < b {
            ((w, b), g.white_score)
        } else {
            ((b, w), 1.0 - g.white_score)
        };
        let e = pairs.entry(key).or_default();
        e.0 += 1.0;
        e.1 += s;
    }
    let a = names
        .iter()
        .position(|n| n == anchor)
        .ok_or_else(|| EloError::UnknownAnchor(anchor.to_owned()))?;
    for v in pairs.values_mut() {
        v.0 += prior_draws;
        v.1 += prior_draws / 2.0;
    }
    // Connectivity to the anchor.
    let n = names.len();
    let mut seen = vec![false; n];
    seen[a] = true;
    let mut stack = vec![a];
    while let Some(i) = stack.pop() {
        for &(x, y) in pairs.keys() {
            for (p, q) in [(x, y), (y, x)] {
                if p == i && !seen[q] {
                    seen[q] = true;
                    stack.push(q);
                }
            }
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(EloError::Disconnected(names[i].clone()));
    }
    // Newton's method on the free ratings (natural-log scale x = C * r).
    let free: Vec<usize> = (0..n).filter(|&i| i != a).collect();
    let pos_of = |i: usize| free.iter().position(|&f| f == i);
    let mut x = vec![0.0f64; n];
    let m = free.len();
    let mut hessian = vec![0.0; m * m];
    for _ in 0..100 {
        let mut grad = vec![0.0; m];
        hessian.iter_mut().for_each(|h| *h = 0.0);
        for (&(i, j), &(g, s)) in &pairs {
            let p = 1.0 / (1.0 + (x[j] - x[i]).exp());
            let d = s - g * p;
            let w = g * p * (1.0 - p);
            if let Some(pi) = pos_of(i) {
                grad[pi] += d;
                hessian[pi * m + pi] += w;
            }
            if let Some(pj) = pos_of(j) {
                grad[pj] -= d;
                hessian[pj * m + pj] += w;
            }
            if let (Some(pi), Some(pj)) = (pos_of(i), pos_of(j)) {
                hessian[pi * m + pj] -= w;
                hessian[pj * m + pi] -= w;
            }
        }
        let Some(step) = solve(&hessian, &grad, m) else {
            break;
        };
        let mut biggest = 0.0f64;
        for (k, &i) in free.iter().enumerate() {
            let s = step[k].clamp(-2.0, 2.0);
            x[i] += s;
            biggest = biggest.max(s.abs());
        }
        if biggest < 1e-10 {
            break;
        }
    }
    let inverse = invert(&hessian, m);
    let mut out: Vec<Rating> = (0..n)
        .map(|i| Rating {
            player: names[i].clone(),
            elo: anchor_elo + x[i] / C,
            ci95: match (pos_of(i), &inverse) {
                (Some(p), Some(inv)) => 1.96 * inv[p * m + p].max(0.0).sqrt() / C,
                (None, _) => 0.0,
                (Some(_), None) => f64::INFINITY,
            },
            games: played[i],
            score: scored[i],
        })
        .collect();
    out.sort_by(|p, q| q.elo.total_cmp(&p.elo));
    Ok(out)
}

/// Solves `h * s = g` (h positive definite, m x m) by Gaussian elimination.
fn solve(h: &[f64], g: &[f64], m: usize) -> Option<Vec<f64>> {
    let mut a: Vec<f64> = h.to_vec();
    let mut b = g.to_vec();
    for c in 0..m {
        let p = (c..m).max_by(|&i, &j| a[i * m + c].abs().total_cmp(&a[j * m + c].abs()))?;
        if a[p * m + c].abs() < 1e-300 {
            return None;
        }
        for k in 0..m {
            a.swap(c * m + k, p * m + k);
        }
        b.swap(c, p);
        for r in 0..m {
            if r != c {
                let f = a[r * m + c] / a[c * m + c];
                for k in c..m {
                    a[r * m + k] -= f * a[c * m + k];
                }
                b[r] -= f * b[c];
            }
        }
    }
    Some((0..m).map(|i| b[i] / a[i * m + i]).collect())
}

fn invert(h: &[f64], m: usize) -> Option<Vec<f64>> {
    let mut out = vec![0.0; m * m];
    for c in 0..m {
        let mut e = vec![0.0; m];
        e[c] = 1.0;
        let col = solve(h, &e, m)?;
        for r in 0..m {
            out[r * m + c] = col[r];
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn games(a: &str, b: &str, wins: usize, draws: usize, losses: usize) -> Vec<GameRecord> {
        let mut out = Vec::new();
        for (n, s) in [(wins, 1.0), (draws, 0.5), (losses, 0.0)] {
            for k in 0..n {
                // Alternate colours.
                if k % 2 == 0 {
                    out.push(GameRecord {
                        white: a.into(),
                        black: b.into(),
                        white_score: s,
                    });
                } else {
                    out.push(GameRecord {
                        white: b.into(),
                        black: a.into(),
                        white_score: 1.0 - s,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn three_to_one_is_400_log10_3() {
        let g = games("a", "b", 30, 0, 10);
        let r = fit(&g, "b", 1000.0, 0.0).unwrap();
        assert_eq!(r[0].player, "a");
        assert!(
            (r[0].elo - (1000.0 + 400.0 * 3f64.log10())).abs() < 1e-6,
            "{}",
            r[0].elo
        );
        assert_eq!(r[1].elo, 1000.0);
        assert_eq!(r[1].ci95, 0.0);
        // Binomial standard error of the score, through the logistic slope.
        let p: f64 = 0.75;
        let se = (1.0 / (40.0 * p * (1.0 - p))).sqrt() / C;
        assert!((r[0].ci95 - 1.96 * se).abs() < 1e-6);
        assert_eq!(r[0].games, 40);
        assert_eq!(r[0].score, 30.0);
    }

    #[test]
    fn draws_are_half_points_and_the_prior_keeps_a_sweep_finite() {
        let g = games("a", "b", 0, 20, 0);
        let r = fit(&g, "a", 0.0, 0.0).unwrap();
        assert!(r.iter().all(|x| x.elo.abs() < 1e-9));
        let sweep = games("a", "b", 10, 0, 0);
        let r = fit(&sweep, "b", 0.0, 2.0).unwrap();
        // 11 of 12 points with the two virtual draws.
        assert!(
            (r[0].elo - 400.0 * 11f64.log10()).abs() < 1e-6,
            "{}",
            r[0].elo
        );
    }

    #[test]
    fn a_chain_is_transitive() {
        let mut g = games("a", "b", 30, 0, 10);
        g.extend(games("b", "c", 30, 0, 10));
        let r = fit(&g, "c", 0.0, 0.0).unwrap();
        let elo = |n: &str| r.iter().find(|x| x.player == n).unwrap().elo;
        assert!((elo("b") - 190.848).abs() < 0.01);
        assert!((elo("a") - 2.0 * 190.848).abs() < 0.02);
    }

    #[test]
    fn unknown_anchor_and_disconnected_players_are_errors() {
        let mut g = games("a", "b", 1, 0, 1);
        assert!(matches!(
            fit(&g, "z", 0.0, 2.0),
            Err(EloError::UnknownAnchor(_))
        ));
        g.extend(games("c", "d", 1, 0, 1));
        assert!(matches!(
            fit(&g, "a", 0.0, 2.0),
            Err(EloError::Disconnected(_))
        ));
    }
}
