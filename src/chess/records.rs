//! ChessBench's three record sets, and the token sequence a predictor reads
//! for one record (Ruoss et al. 2024, §2.1-2.2; searchless_chess
//! `constants.py`, `tokenizer.py`, `training.py`).
//!
//! The same three names label the `.bag` files of the published data
//! (`state_value_data.bag`, ...), the predictor a training run learns (its
//! `policy`) and what `bag export --set` writes. Sequences are the 77 FEN
//! tokens, then
//! - action value: the action index and the value bucket of its win% (79),
//! - state value: the bucket of the board's win% (78),
//! - behavioural cloning: the best action's index (78).
//!
//! All tokens share one vocabulary of 1968 (= the number of actions, which
//! exceeds the 31 FEN characters and K <= 1968 buckets). A model sees the
//! sequence shifted right and predicts its last token.

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use super::tokens::SEQUENCE_LENGTH;

/// A ChessBench record set, and the predictor (policy) trained on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum RecordSet {
    /// V(s): one record per board, (fen, win_prob); target = value bucket.
    StateValue,
    /// pi(s): one record per board with a legal move, (fen, best move);
    /// target = best action.
    BehavioralCloning,
    /// Q(s, a): one record per legal move, (fen, move, win_prob); target =
    /// value bucket.
    ActionValue,
}

impl RecordSet {
    /// The three sets, in ChessBench's order.
    pub(crate) const ALL: [RecordSet; 3] = [
        RecordSet::StateValue,
        RecordSet::BehavioralCloning,
        RecordSet::ActionValue,
    ];

    /// The name ChessBench uses (`state_value`, the stem of
    /// `state_value_data.bag`), also this enum's spelling in pipeline files
    /// and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            RecordSet::StateValue => "state_value",
            RecordSet::BehavioralCloning => "behavioral_cloning",
            RecordSet::ActionValue => "action_value",
        }
    }

    /// Tokens per sequence.
    pub fn sequence_length(self) -> usize {
        match self {
            RecordSet::ActionValue => SEQUENCE_LENGTH + 2,
            RecordSet::StateValue | RecordSet::BehavioralCloning => SEQUENCE_LENGTH + 1,
        }
    }
}

impl std::fmt::Display for RecordSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Appends the sequence of one record to `out`.
///
/// `target` is the value bucket (action value, state value) or the action
/// index (behavioural cloning); `action` is only used for action values.
pub fn push_sequence(
    set: RecordSet,
    board: &[u8; SEQUENCE_LENGTH],
    action: u16,
    target: u16,
    out: &mut Vec<i32>,
) {
    out.extend(board.iter().map(|&t| i32::from(t)));
    if set == RecordSet::ActionValue {
        out.push(i32::from(action));
    }
    out.push(i32::from(target));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::{NUM_ACTIONS, tokens::tokenize};

    #[test]
    fn sequences_follow_searchless_chess() {
        let fen = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";
        let board = tokenize(fen).unwrap();
        let mut out = Vec::new();
        push_sequence(RecordSet::ActionValue, &board, 1967, 31, &mut out);
        assert_eq!(out.len(), 79);
        assert_eq!(&out[77..], &[1967, 31]);
        assert!(out[..77].iter().zip(board).all(|(&a, b)| a == i32::from(b)));
        out.clear();
        push_sequence(RecordSet::BehavioralCloning, &board, 0, 5, &mut out);
        assert_eq!(out.len(), RecordSet::BehavioralCloning.sequence_length());
        assert_eq!(out[77], 5);
        assert!(out.iter().all(|&t| (t as usize) < NUM_ACTIONS));
    }

    #[test]
    fn one_spelling_everywhere() {
        use clap::ValueEnum;
        for set in RecordSet::ALL {
            let serde_name = serde_json::to_value(set).unwrap();
            let clap_name = set.to_possible_value().unwrap();
            assert_eq!(serde_name, set.name());
            assert_eq!(clap_name.get_name(), set.name());
        }
    }
}
