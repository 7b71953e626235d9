//! The optimiser step of `chessbench train` in one pass over flat buffers:
//! clipping by the global gradient norm, Adam and the exponential moving
//! average of the parameters, as searchless_chess chains them
//! (`optax.clip_by_global_norm(max)`, then `optax.adam`; the EMA of the
//! updated parameters, which is what the paper evaluates).
//!
//! Every parameter of the model has a slot in one flat f32 buffer: the
//! parameters themselves (the master copy the model's tensors are views
//! of), Adam's two moments and the average. A step gathers the gradients
//! into one buffer and updates all parameters with a handful of element-wise
//! operations on it, instead of a chain of operations per parameter tensor:
//! on a GPU each operation is a kernel launch, and the 9M model has 94
//! parameter tensors (about 1,300 launches a step the per-tensor way).
//!
//! The arithmetic is burn's `Adam` operation for operation (burn's form of
//! optax's `m_hat / (sqrt(v_hat) + eps)`) and the clip and average are the
//! per-tensor code's, so on the CPU a run takes exactly the steps the
//! per-tensor optimiser took: the global norm is summed per tensor in the
//! model's order there ([`ModelBackend::FEW_KERNELS`] false), and over the
//! flat buffer in one reduction on a GPU.
//!
//! Checkpoints keep burn's optimiser record (Adam's moments per parameter
//! id, `optim.mpk`) and the average as a model (`ema.mpk`), so runs resume
//! across versions.

use burn::{
    module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param, ParamId},
    optim::{
        Adam, AdamState, AdaptiveMomentumState, GradientsParams, Optimizer,
        adaptor::OptimizerAdaptor,
        record::{AdaptorRecord, AdaptorRecordV1},
    },
    prelude::ToElement,
    tensor::{
        Shape, Tensor, TensorPrimitive,
        backend::{AutodiffBackend, Backend},
        ops::FloatTensor,
    },
};
use thiserror::Error;

use crate::model::{ModelBackend, Predictor};

/// Adam's hyper-parameters (optax's `scale_by_adam`; searchless_chess uses
/// b1 0.9, b2 0.999, eps 1e-8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AdamSettings {
    pub beta1: f32,
    pub beta2: f32,
    pub epsilon: f32,
}

impl AdamSettings {
    /// The recipe's values, as burn's `AdamConfig` holds them (f32).
    pub(crate) fn new(beta1: f64, beta2: f64, epsilon: f64) -> AdamSettings {
        AdamSettings {
            beta1: beta1 as f32,
            beta2: beta2 as f32,
            epsilon: epsilon as f32,
        }
    }
}

/// Burn's optimiser record for Adam: the moments of each parameter by id
/// (a map from [`ParamId`] to [`AdaptorRecord`]).
pub(crate) type AdamRecord<B> =
    <OptimizerAdaptor<Adam, Predictor<B>, B> as Optimizer<Predictor<B>, B>>::Record;

/// What can be wrong with a saved optimiser state or average.
#[derive(Debug, Error)]
pub enum OptimError {
    #[error(
        "the optimiser state has {found} of the model's {expected} parameters (is it another model's?)"
    )]
    MissingMoments { expected: usize, found: usize },
    #[error(
        "parameter {index}: Adam's moments have rank {found}, the parameter has rank {expected}"
    )]
    Rank {
        index: usize,
        expected: usize,
        found: usize,
    },
    #[error("parameter {index}: Adam's moments have {found} values, the parameter {expected}")]
    Size {
        index: usize,
        expected: usize,
        found: usize,
    },
    #[error(
        "Adam's step counts differ ({0} and {1}, between parameters or from the checkpoint's step): the state is not one run's"
    )]
    Steps(usize, usize),
    #[error(
        "the average has {found} parameter tensors where the model has {expected}, or their shapes differ"
    )]
    Average { expected: usize, found: usize },
}

/// The parts of a step, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Gradients gathered, their global norm, the clip.
    Clip,
    /// Adam's moments and the parameters.
    Adam,
    /// The parameters' average.
    Average,
}

/// One parameter of the flat buffers, in the model's order: its id and
/// shape (its place is after every earlier slot's elements).
#[derive(Debug, Clone)]
struct Slot {
    id: ParamId,
    dims: Vec<usize>,
}

/// How the global gradient norm is summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NormSum {
    /// `sum_p sum(g_p^2)`, tensor by tensor in the model's order: the
    /// per-tensor code's rounding, cheap on the CPU.
    PerTensor,
    /// One reduction over the flat gradient: two kernels on a GPU.
    Flat,
}

/// A flat buffer of every parameter's values, on the inner backend.
type Flat<B> = Tensor<<B as AutodiffBackend>::InnerBackend, 1>;

/// Clip, Adam and the parameters' average over flat buffers (module docs).
pub(crate) struct Optimiser<B: AutodiffBackend> {
    slots: Vec<Slot>,
    /// The parameters (f32 master copy): the model's tensors are views of it.
    params: Tensor<B::InnerBackend, 1>,
    /// Adam's first and second moments; none before the first step.
    moments: Option<(Flat<B>, Flat<B>)>,
    /// Adam steps taken (burn's `time`).
    steps: usize,
    /// The average and its decay, when kept.
    average: Option<(Tensor<B::InnerBackend, 1>, f64)>,
    adam: AdamSettings,
    norm: NormSum,
    /// The factor the loss was multiplied by before the backward pass
    /// (mixed f16: [`crate::model::F16_LOSS_SCALE`]); the gradients are
    /// divided by it, in f32, before anything else.
    loss_scale: f32,
}

/// Collects the parameters' layout and values in the model's order.
struct Layout<B: AutodiffBackend> {
    slots: Vec<Slot>,
    values: Vec<FloatTensor<B::InnerBackend>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Layout<B> {
    fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
        let value = param.val().inner();
        let dims = value.dims().to_vec();
        self.slots.push(Slot { id: param.id, dims });
        self.values.push(value.into_primitive().tensor());
    }
}

/// Takes the gradients out of `grads` in the model's order (zeros where a
/// parameter has none, as `jax.grad` gives), summing their squares tensor by
/// tensor when asked.
struct Gather<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    slots: &'a [Slot],
    next: usize,
    flat: Vec<FloatTensor<B::InnerBackend>>,
    sum_squares: Option<Tensor<B::InnerBackend, 1>>,
    per_tensor: bool,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Gather<'_, B> {
    fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
        let slot = &self.slots[self.next];
        self.next += 1;
        assert_eq!(
            slot.id, param.id,
            "the model passed to the optimiser is not the one it was made for"
        );
        let grad = match self.grads.remove::<B::InnerBackend, K>(param.id) {
            Some(grad) => grad,
            None => Tensor::zeros(dims::<K>(&slot.dims), &param.val().device()),
        };
        if self.per_tensor {
            let s = grad.clone().square().sum();
            self.sum_squares = Some(match self.sum_squares.take() {
                Some(t) => t + s,
                None => s,
            });
        }
        self.flat.push(grad.into_primitive().tensor());
    }
}

/// A flat buffer laid end to end from `parts` ([`ModelBackend::flatten`]).
fn flatten<B: ModelBackend>(parts: Vec<FloatTensor<B>>) -> Tensor<B, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(B::flatten(parts)))
}

/// Replaces every parameter by its slice of a flat buffer, keeping its id:
/// the slices are cut first, in the model's order
/// ([`ModelBackend::unflatten`]), and handed out as the model is mapped.
struct Rebind<B: Backend> {
    parts: std::vec::IntoIter<FloatTensor<B>>,
}

impl<B: ModelBackend> Rebind<B> {
    /// The slots' slices of `values`.
    fn new(values: &Tensor<B, 1>, slots: &[Slot]) -> Rebind<B> {
        let shapes: Vec<Shape> = slots.iter().map(|s| Shape::from(s.dims.clone())).collect();
        let parts = B::unflatten(values.clone().into_primitive().tensor(), &shapes);
        Rebind {
            parts: parts.into_iter(),
        }
    }
}

impl<B: Backend> Rebind<B> {
    fn value<const K: usize>(&mut self) -> Tensor<B, K> {
        let part = self
            .parts
            .next()
            .expect("the model passed to the optimiser is not the one it was made for");
        Tensor::from_primitive(TensorPrimitive::Float(part))
    }
}

/// Rebinds an autodiff model: the slices become trainable leaves.
struct RebindLeaves<B: AutodiffBackend>(Rebind<B::InnerBackend>);

impl<B: AutodiffBackend> ModuleMapper<B> for RebindLeaves<B> {
    fn map_float<const K: usize>(&mut self, param: Param<Tensor<B, K>>) -> Param<Tensor<B, K>> {
        let (id, _, mapper) = param.consume();
        let value = Tensor::from_inner(self.0.value::<K>()).require_grad();
        Param::from_mapped_value(id, value, mapper)
    }
}

impl<B: Backend> ModuleMapper<B> for Rebind<B> {
    fn map_float<const K: usize>(&mut self, param: Param<Tensor<B, K>>) -> Param<Tensor<B, K>> {
        let (id, _, mapper) = param.consume();
        Param::from_mapped_value(id, self.value::<K>(), mapper)
    }
}

fn dims<const K: usize>(dims: &[usize]) -> [usize; K] {
    std::array::from_fn(|i| dims[i])
}

impl<B> Optimiser<B>
where
    B: AutodiffBackend,
    B::InnerBackend: ModelBackend,
{
    /// An optimiser for `model`, before its first step. `average`: keep the
    /// parameters' moving average with this decay.
    pub(crate) fn new<M: AutodiffModule<B>>(
        model: &M,
        adam: AdamSettings,
        average: Option<f64>,
    ) -> Optimiser<B> {
        let mut layout = Layout::<B> {
            slots: Vec::new(),
            values: Vec::new(),
        };
        model.visit(&mut layout);
        let params = flatten(layout.values);
        Optimiser {
            slots: layout.slots,
            average: average.map(|decay| (params.clone(), decay)),
            params,
            moments: None,
            steps: 0,
            adam,
            norm: if <B::InnerBackend as ModelBackend>::FEW_KERNELS {
                NormSum::Flat
            } else {
                NormSum::PerTensor
            },
            loss_scale: 1.0,
        }
    }

    /// Sets the factor the next steps' gradients were scaled by (the loss's
    /// scale; 1 leaves them untouched, bit for bit).
    pub(crate) fn set_loss_scale(&mut self, scale: f32) {
        self.loss_scale = scale;
    }

    /// Adam steps taken.
    pub(crate) fn steps(&self) -> usize {
        self.steps
    }

    /// One step: the gradients clipped to the global norm `max_norm`, an
    /// Adam update with learning rate `learning_rate`, the average moved
    /// towards the new parameters. `model` must be the model this optimiser
    /// was made for (or the one its last step returned). Returns the
    /// updated model and the gradient norm before clipping, left on the
    /// device (read it only when logging: reading it waits for the step).
    pub(crate) fn step<M: AutodiffModule<B>>(
        &mut self,
        model: M,
        grads: GradientsParams,
        learning_rate: f64,
        max_norm: f64,
    ) -> (M, Tensor<B::InnerBackend, 1>) {
        self.step_marked(model, grads, learning_rate, max_norm, &mut |_| {})
    }

    /// [`Self::step`], calling `mark` after each of its phases (the step
    /// benchmark synchronises the device there to time them).
    pub(crate) fn step_marked<M: AutodiffModule<B>>(
        &mut self,
        model: M,
        mut grads: GradientsParams,
        learning_rate: f64,
        max_norm: f64,
        mark: &mut dyn FnMut(Phase),
    ) -> (M, Tensor<B::InnerBackend, 1>) {
        let mut gather = Gather::<B> {
            grads: &mut grads,
            slots: &self.slots,
            next: 0,
            flat: Vec::with_capacity(self.slots.len()),
            sum_squares: None,
            per_tensor: self.norm == NormSum::PerTensor,
        };
        model.visit(&mut gather);
        let (flat, per_tensor) = (gather.flat, gather.sum_squares);
        let mut grad = flatten(flat);
        let mut per_tensor = per_tensor;
        if self.loss_scale != 1.0 {
            grad = grad.div_scalar(self.loss_scale);
            per_tensor = per_tensor.map(|s| s.div_scalar(self.loss_scale * self.loss_scale));
        }
        let sum_squares = match per_tensor {
            Some(s) => s,
            None => <B::InnerBackend as ModelBackend>::sum_all(grad.clone().square()),
        };
        let norm = sum_squares.sqrt();
        // norm < max: exactly 1, so unclipped gradients are untouched; a
        // zero norm gives inf, clamped to 1.
        let scale = norm.clone().recip().mul_scalar(max_norm).clamp_max(1.0);
        let grad = grad * scale;
        mark(Phase::Clip);

        // burn's Adam (optim/adam.rs), operation for operation.
        let AdamSettings {
            beta1,
            beta2,
            epsilon,
        } = self.adam;
        let (m, v) = match self.moments.take() {
            Some((m, v)) => (
                m.mul_scalar(beta1)
                    .add(grad.clone().mul_scalar(1.0 - beta1)),
                v.mul_scalar(beta2)
                    .add(grad.square().mul_scalar(1.0 - beta2)),
            ),
            None => (
                grad.clone().mul_scalar(1.0 - beta1),
                grad.square().mul_scalar(1.0 - beta2),
            ),
        };
        self.steps += 1;
        let time = self.steps as i32;
        let bias_correction2_sqrt = (1.0 - beta2.powi(time)).sqrt();
        let combined_factor = bias_correction2_sqrt / (1.0 - beta1.powi(time));
        let update = m
            .clone()
            .mul_scalar(combined_factor)
            .div(v.clone().sqrt().add_scalar(epsilon * bias_correction2_sqrt));
        self.params = self.params.clone() - update.mul_scalar(learning_rate);
        self.moments = Some((m, v));
        let model = model.map(&mut RebindLeaves::<B>(Rebind::new(
            &self.params,
            &self.slots,
        )));
        mark(Phase::Adam);
        if let Some((average, decay)) = self.average.take() {
            let moved = average.mul_scalar(decay) + self.params.clone().mul_scalar(1.0 - decay);
            self.average = Some((moved, decay));
        }
        mark(Phase::Average);
        (model, norm)
    }

    /// The moving average as a model of `model`'s structure (its ids), or
    /// the parameters themselves when no average is kept.
    pub(crate) fn average<M: AutodiffModule<B>>(&self, model: &M) -> M::InnerModule {
        let values = self.average.as_ref().map_or(&self.params, |(a, _)| a);
        model.valid().map(&mut Rebind::new(values, &self.slots))
    }

    /// Adam's state in burn's record form (moments per parameter id), as
    /// `optim.mpk` has always held it. Empty before the first step.
    pub(crate) fn record<M: AutodiffModule<B>>(&self, model: &M) -> AdamRecord<B> {
        /// The first and second moments, slot by slot.
        type Moments<B> = (
            Rebind<<B as AutodiffBackend>::InnerBackend>,
            Rebind<<B as AutodiffBackend>::InnerBackend>,
        );
        struct Split<B: AutodiffBackend> {
            moments: Option<Moments<B>>,
            time: usize,
            record: AdamRecord<B>,
        }
        impl<B: AutodiffBackend> ModuleVisitor<B> for Split<B> {
            fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
                if let Some((m, v)) = &mut self.moments {
                    let state = AdamState::new(AdaptiveMomentumState::new(
                        self.time,
                        m.value::<K>(),
                        v.value::<K>(),
                    ));
                    self.record
                        .insert(param.id, AdaptorRecord::from_state::<K>(state));
                }
            }
        }
        let rebind = |values| Rebind::new(values, &self.slots);
        let mut split = Split::<B> {
            moments: self.moments.as_ref().map(|(m, v)| (rebind(m), rebind(v))),
            time: self.steps,
            record: Default::default(),
        };
        model.visit(&mut split);
        split.record
    }

    /// The optimiser of a resumed run: `model` and its Adam `record` (burn's
    /// form, [`Self::record`]), and the average saved as a model, when kept.
    pub(crate) fn resume<M: AutodiffModule<B>>(
        model: &M,
        adam: AdamSettings,
        mut record: AdamRecord<B>,
        average: Option<(&M::InnerModule, f64)>,
    ) -> Result<Optimiser<B>, OptimError> {
        let mut optimiser = Optimiser::new(model, adam, None);
        let expected = optimiser.slots.len();
        if !record.is_empty() {
            struct Join<'a, B: AutodiffBackend> {
                record: &'a mut AdamRecord<B>,
                index: usize,
                m: Vec<Tensor<B::InnerBackend, 1>>,
                v: Vec<Tensor<B::InnerBackend, 1>>,
                time: Option<usize>,
                error: Option<OptimError>,
            }
            impl<B: AutodiffBackend> ModuleVisitor<B> for Join<'_, B> {
                fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
                    let index = self.index;
                    self.index += 1;
                    if self.error.is_some() {
                        return;
                    }
                    let Some(AdaptorRecord::V1(state)) = self.record.remove(&param.id) else {
                        return;
                    };
                    let found = rank(&state);
                    if found != K {
                        self.error = Some(OptimError::Rank {
                            index,
                            expected: K,
                            found,
                        });
                        return;
                    }
                    let momentum = state.into_state::<K>().momentum;
                    let len: usize = param.val().dims().iter().product();
                    let got: usize = momentum.moment_1.dims().iter().product();
                    if got != len || momentum.moment_2.dims() != momentum.moment_1.dims() {
                        self.error = Some(OptimError::Size {
                            index,
                            expected: len,
                            found: got,
                        });
                        return;
                    }
                    match self.time {
                        Some(t) if t != momentum.time => {
                            self.error = Some(OptimError::Steps(t, momentum.time));
                            return;
                        }
                        _ => self.time = Some(momentum.time),
                    }
                    self.m.push(momentum.moment_1.reshape([len]));
                    self.v.push(momentum.moment_2.reshape([len]));
                }
            }
            let mut join = Join::<B> {
                record: &mut record,
                index: 0,
                m: Vec::with_capacity(expected),
                v: Vec::with_capacity(expected),
                time: None,
                error: None,
            };
            model.visit(&mut join);
            if let Some(e) = join.error {
                return Err(e);
            }
            if join.m.len() != expected {
                return Err(OptimError::MissingMoments {
                    expected,
                    found: join.m.len(),
                });
            }
            optimiser.steps = join.time.unwrap_or(0);
            optimiser.moments = Some((Tensor::cat(join.m, 0), Tensor::cat(join.v, 0)));
        }
        if let Some((saved, decay)) = average {
            struct Flatten<B: Backend> {
                values: Vec<Tensor<B, 1>>,
                dims: Vec<Vec<usize>>,
            }
            impl<B: Backend> ModuleVisitor<B> for Flatten<B> {
                fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
                    let value = param.val();
                    let dims = value.dims().to_vec();
                    let len: usize = dims.iter().product();
                    self.dims.push(dims);
                    self.values.push(value.reshape([len]));
                }
            }
            let mut flatten = Flatten::<B::InnerBackend> {
                values: Vec::new(),
                dims: Vec::new(),
            };
            saved.visit(&mut flatten);
            let same = flatten.dims.len() == expected
                && flatten
                    .dims
                    .iter()
                    .zip(&optimiser.slots)
                    .all(|(d, s)| *d == s.dims);
            if !same {
                return Err(OptimError::Average {
                    expected,
                    found: flatten.dims.len(),
                });
            }
            optimiser.average = Some((Tensor::cat(flatten.values, 0), decay));
        }
        Ok(optimiser)
    }
}

/// The rank of a saved Adam state.
fn rank<B: Backend>(state: &AdaptorRecordV1<Adam, B>) -> usize {
    match state {
        AdaptorRecordV1::Rank0(_) => 0,
        AdaptorRecordV1::Rank1(_) => 1,
        AdaptorRecordV1::Rank2(_) => 2,
        AdaptorRecordV1::Rank3(_) => 3,
        AdaptorRecordV1::Rank4(_) => 4,
        AdaptorRecordV1::Rank5(_) => 5,
        AdaptorRecordV1::Rank6(_) => 6,
        AdaptorRecordV1::Rank7(_) => 7,
        AdaptorRecordV1::Rank8(_) => 8,
    }
}

/// A one-element tensor's value.
pub(crate) fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::{
        backend::{Autodiff, Flex},
        module::Module,
        nn::{Linear, LinearConfig},
        optim::{AdamConfig, Optimizer},
    };

    type B = Autodiff<Flex>;
    type I = Flex;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        a: Linear<B>,
        b: Linear<B>,
    }

    fn net() -> Net<B> {
        let device = Default::default();
        let weights = |n: usize, m: usize, salt: usize| {
            let w: Vec<f32> = (0..n * m)
                .map(|i| (((i * 31 + salt) % 23) as f32 - 11.0) / 20.0)
                .collect();
            // Explicit values: burn's initialisers are lazy, so clones of a
            // fresh layer would each draw their own.
            let b: Vec<f32> = (0..m).map(|i| (i as f32 - 1.0) / 7.0).collect();
            let mut layer = LinearConfig::new(n, m).init::<B>(&device);
            layer.weight = Param::from_tensor(
                Tensor::<B, 1>::from_floats(w.as_slice(), &device).reshape([n, m]),
            );
            layer.bias = Some(Param::from_tensor(Tensor::from_floats(
                b.as_slice(),
                &device,
            )));
            layer
        };
        Net::<B> {
            a: weights(6, 5, 1),
            b: weights(5, 3, 2),
        }
    }

    fn loss(model: &Net<B>, step: usize) -> Tensor<B, 1> {
        // Large inputs (not from the backend's RNG, which tests running in
        // parallel share): gradient norms far above 1, so the clip acts.
        let x: Vec<f32> = (0..42)
            .map(|i| ((i * 7 + step * 13) % 17) as f32 - 8.0 + 0.25 * step as f32)
            .collect();
        let x = Tensor::<B, 1>::from_floats(x.as_slice(), &Default::default()).reshape([7, 6]);
        model.b.forward(model.a.forward(x)).square().sum()
    }

    fn values<Bk: Backend, const K: usize>(t: Tensor<Bk, K>) -> Vec<f32> {
        t.into_data().to_vec().unwrap()
    }

    fn params(model: &Net<I>) -> Vec<Vec<f32>> {
        vec![
            values(model.a.weight.val()),
            values(model.a.bias.as_ref().unwrap().val()),
            values(model.b.weight.val()),
            values(model.b.bias.as_ref().unwrap().val()),
        ]
    }

    /// The per-tensor step this optimiser replaces: global-norm clip tensor
    /// by tensor, burn's Adam, the average tensor by tensor.
    struct Reference {
        model: Net<B>,
        optim: burn::optim::adaptor::OptimizerAdaptor<Adam, Net<B>, B>,
        average: Net<I>,
        norms: Vec<f32>,
    }

    impl Reference {
        fn step(&mut self, step: usize, lr: f64, max_norm: f64, decay: f64) {
            let model = self.model.clone();
            let mut grads = GradientsParams::from_grads(loss(&model, step).backward(), &model);
            struct Sum<'a> {
                grads: &'a GradientsParams,
                total: Option<Tensor<I, 1>>,
            }
            impl ModuleVisitor<B> for Sum<'_> {
                fn visit_float<const K: usize>(&mut self, p: &Param<Tensor<B, K>>) {
                    let s = self.grads.get::<I, K>(p.id).unwrap().square().sum();
                    self.total = Some(match self.total.take() {
                        Some(t) => t + s,
                        None => s,
                    });
                }
            }
            struct Scale<'a> {
                grads: &'a mut GradientsParams,
                scale: Tensor<I, 1>,
            }
            impl ModuleVisitor<B> for Scale<'_> {
                fn visit_float<const K: usize>(&mut self, p: &Param<Tensor<B, K>>) {
                    let g = self.grads.remove::<I, K>(p.id).unwrap();
                    let scale = self.scale.clone().reshape([1usize; K]);
                    self.grads.register(p.id, g * scale);
                }
            }
            let mut sum = Sum {
                grads: &grads,
                total: None,
            };
            model.visit(&mut sum);
            let norm = sum.total.unwrap().sqrt();
            self.norms.push(values(norm.clone())[0]);
            let scale = norm.recip().mul_scalar(max_norm).clamp_max(1.0);
            model.visit(&mut Scale {
                grads: &mut grads,
                scale,
            });
            self.model = self.optim.step(lr, model, grads);
            struct Move<'a> {
                live: &'a Net<I>,
                index: usize,
                decay: f64,
            }
            impl ModuleMapper<I> for Move<'_> {
                fn map_float<const K: usize>(
                    &mut self,
                    p: Param<Tensor<I, K>>,
                ) -> Param<Tensor<I, K>> {
                    let live = params(self.live)[self.index].clone();
                    self.index += 1;
                    let decay = self.decay;
                    let device = p.val().device();
                    p.map(|avg| {
                        let dims = avg.dims();
                        let live =
                            Tensor::<I, 1>::from_floats(live.as_slice(), &device).reshape(dims);
                        avg.mul_scalar(decay) + live.mul_scalar(1.0 - decay)
                    })
                }
            }
            let live = self.model.valid();
            self.average = self.average.clone().map(&mut Move {
                live: &live,
                index: 0,
                decay,
            });
        }
    }

    /// Bit for bit the per-tensor clip, burn's Adam and the per-tensor
    /// average, over steps where the clip acts (norms far above 1).
    #[test]
    fn flat_steps_equal_the_per_tensor_steps_bit_for_bit() {
        let adam = AdamSettings::new(0.9, 0.999, 1e-8);
        let (lr, max_norm, decay) = (1e-2, 1.0, 0.9);
        let start = net();
        let mut reference = Reference {
            model: start.clone(),
            optim: AdamConfig::new()
                .with_beta_1(0.9)
                .with_beta_2(0.999)
                .with_epsilon(1e-8)
                .init(),
            average: start.valid(),
            norms: Vec::new(),
        };
        let mut model = start.clone();
        let mut optimiser = Optimiser::<B>::new(&model, adam, Some(decay));
        for step in 0..6 {
            reference.step(step, lr, max_norm, decay);
            let grads = GradientsParams::from_grads(loss(&model, step).backward(), &model);
            let (updated, norm) = optimiser.step(model, grads, lr, max_norm);
            model = updated;
            assert_eq!(values(norm)[0], reference.norms[step], "norm, step {step}");
            assert!(reference.norms[step] > 1.0, "the clip must act");
            assert_eq!(
                params(&model.valid()),
                params(&reference.model.valid()),
                "parameters after step {step}"
            );
            assert_eq!(
                params(&optimiser.average(&model)),
                params(&reference.average),
                "average after step {step}"
            );
        }
        // The record is burn's: the reference's moments, parameter by id.
        let ours = optimiser.record(&model);
        let theirs = reference.optim.to_record();
        assert_eq!(ours.len(), 4);
        for (id, record) in theirs {
            let (a, b) = (ours.get(&id).expect("same ids").clone(), record);
            let flat = |r: AdaptorRecord<Adam, B>| -> (usize, Vec<f32>, Vec<f32>) {
                let AdaptorRecord::V1(v1) = r;
                let n = rank(&v1);
                let (time, m, v) = match v1 {
                    AdaptorRecordV1::Rank1(s) => (
                        s.momentum.time,
                        values(s.momentum.moment_1),
                        values(s.momentum.moment_2),
                    ),
                    AdaptorRecordV1::Rank2(s) => (
                        s.momentum.time,
                        values(s.momentum.moment_1),
                        values(s.momentum.moment_2),
                    ),
                    _ => panic!("rank {n}"),
                };
                (time, m, v)
            };
            assert_eq!(flat(a), flat(b));
        }
    }

    /// A resumed optimiser continues exactly where the saved one was.
    #[test]
    fn resuming_from_the_record_and_average_continues_exactly() {
        let adam = AdamSettings::new(0.9, 0.999, 1e-8);
        let mut model = net();
        let mut a = Optimiser::<B>::new(&model, adam, Some(0.99));
        for step in 0..3 {
            let grads = GradientsParams::from_grads(loss(&model, step).backward(), &model);
            model = a.step(model, grads, 1e-2, 1.0).0;
        }
        let record = a.record(&model);
        let average = a.average(&model);
        let mut b = Optimiser::<B>::resume(&model, adam, record, Some((&average, 0.99))).unwrap();
        assert_eq!(b.steps(), 3);
        let mut twin = model.clone();
        for step in 3..5 {
            let grads = GradientsParams::from_grads(loss(&model, step).backward(), &model);
            model = a.step(model, grads, 1e-2, 1.0).0;
            let grads = GradientsParams::from_grads(loss(&twin, step).backward(), &twin);
            twin = b.step(twin, grads, 1e-2, 1.0).0;
        }
        assert_eq!(params(&model.valid()), params(&twin.valid()));
        assert_eq!(params(&a.average(&model)), params(&b.average(&twin)));
        // Before any step the record is empty, and resuming from it is a
        // fresh optimiser.
        let fresh = Optimiser::<B>::new(&model, adam, None);
        assert!(fresh.record(&model).is_empty());
        let again = Optimiser::<B>::resume(&model, adam, Default::default(), None).unwrap();
        assert_eq!(again.steps(), 0);
        // Another model's state is refused.
        let other = net().map(&mut NewIds);
        let err = Optimiser::<B>::resume(&other, adam, a.record(&model), None)
            .err()
            .expect("other ids");
        assert!(
            matches!(err, OptimError::MissingMoments { found: 0, .. }),
            "{err}"
        );
    }

    struct NewIds;
    impl ModuleMapper<B> for NewIds {
        fn map_float<const K: usize>(&mut self, p: Param<Tensor<B, K>>) -> Param<Tensor<B, K>> {
            Param::from_tensor(p.val())
        }
    }

    /// Clipping scales the whole gradient to the global norm, and leaves it
    /// alone below the threshold: one SGD-like check through Adam's first
    /// step, whose update is sign(g) * lr whatever the scale, so the norm
    /// itself is compared.
    #[test]
    fn the_returned_norm_is_the_global_norm_before_clipping() {
        let adam = AdamSettings::new(0.9, 0.999, 1e-8);
        let model = net();
        let grads = GradientsParams::from_grads(loss(&model, 0).backward(), &model);
        let mut expected = 0.0f64;
        for p in [
            grads.get::<I, 2>(model.a.weight.id).unwrap(),
            grads.get::<I, 2>(model.b.weight.id).unwrap(),
        ] {
            expected += values(p).iter().map(|&x| f64::from(x).powi(2)).sum::<f64>();
        }
        for p in [
            grads
                .get::<I, 1>(model.a.bias.as_ref().unwrap().id)
                .unwrap(),
            grads
                .get::<I, 1>(model.b.bias.as_ref().unwrap().id)
                .unwrap(),
        ] {
            expected += values(p).iter().map(|&x| f64::from(x).powi(2)).sum::<f64>();
        }
        let mut optimiser = Optimiser::<B>::new(&model, adam, None);
        let (_, norm) = optimiser.step(model, grads, 1e-3, 1.0);
        let norm = scalar(norm);
        assert!(
            (norm - expected.sqrt()).abs() < 1e-4 * norm,
            "{norm} vs {}",
            expected.sqrt()
        );
    }
}
