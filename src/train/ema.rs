//! Polyak / exponential moving average of the parameters (burn has none):
//! after every optimiser step, `ema = decay * ema + (1 - decay) * params`.
//! The paper evaluates the averaged parameters (decay 0.99 here, as the
//! issue sets it). The average lives on the inner (non-autodiff) backend, so
//! it costs one copy of the parameters and no graph.

use burn::{
    module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param},
    optim::GradientsParams,
    tensor::{
        Tensor,
        backend::{AutodiffBackend, Backend},
    },
};

/// Collects the live parameters by id (inner-backend tensors).
struct Collect(GradientsParams);

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect {
    fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
        self.0.register(param.id, param.val().inner());
    }
}

/// Moves each averaged parameter towards the live one with the same id.
struct Update {
    live: GradientsParams,
    decay: f64,
    missing: usize,
}

impl<B: Backend> ModuleMapper<B> for Update {
    fn map_float<const K: usize>(&mut self, param: Param<Tensor<B, K>>) -> Param<Tensor<B, K>> {
        let Some(live) = self.live.remove::<B, K>(param.id) else {
            self.missing += 1;
            return param;
        };
        let decay = self.decay;
        param.map(|avg| avg.mul_scalar(decay) + live.mul_scalar(1.0 - decay))
    }
}

/// Errors of the average.
#[derive(Debug, thiserror::Error)]
#[error("EMA and model disagree: {0} averaged parameters have no live counterpart")]
pub struct EmaMismatch(pub usize);

/// One EMA step. `ema` must come from `model.valid()` (or a checkpoint of
/// it), so its parameter ids are the model's.
pub(crate) fn update<B: AutodiffBackend, M: AutodiffModule<B>>(
    ema: M::InnerModule,
    model: &M,
    decay: f64,
) -> Result<M::InnerModule, EmaMismatch> {
    let mut collect = Collect(GradientsParams::new());
    model.visit(&mut collect);
    let mut update = Update {
        live: collect.0,
        decay,
        missing: 0,
    };
    let ema = ema.map(&mut update);
    match update.missing {
        0 => Ok(ema),
        n => Err(EmaMismatch(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::{
        backend::{Autodiff, Flex},
        module::Module,
        nn::{Linear, LinearConfig},
    };

    type B = Autodiff<Flex>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        layer: Linear<B>,
    }

    #[test]
    fn average_moves_by_one_minus_decay() {
        let device = Default::default();
        let model = Net::<B> {
            layer: LinearConfig::new(3, 2).init(&device),
        };
        let ema = model.valid();
        let before: Vec<f32> = ema.layer.weight.val().into_data().to_vec().unwrap();
        // Move the live model: +1 on every weight.
        let moved = model.clone().map(&mut AddOne);
        let ema = update::<B, _>(ema, &moved, 0.99).unwrap();
        let after: Vec<f32> = ema.layer.weight.val().into_data().to_vec().unwrap();
        for (a, b) in after.iter().zip(&before) {
            assert!((a - (b + 0.01)).abs() < 1e-6, "{a} vs {b}");
        }
        // A model with other parameter ids is refused.
        let other = Net::<B> {
            layer: LinearConfig::new(3, 2).init(&device),
        };
        assert!(update::<B, _>(ema, &other, 0.99).is_err());
    }

    struct AddOne;
    impl<B: Backend> ModuleMapper<B> for AddOne {
        fn map_float<const K: usize>(&mut self, p: Param<Tensor<B, K>>) -> Param<Tensor<B, K>> {
            p.map(|t| t.add_scalar(1.0))
        }
    }
}
