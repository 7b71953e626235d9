//! Optimisation details burn leaves to the user: clipping by the global
//! gradient norm (searchless_chess: `optax.clip_by_global_norm(1.0)` before
//! Adam). burn's own `GradientClippingConfig::Norm` clips each tensor
//! separately, which is a different rule.

use burn::{
    module::{AutodiffModule, ModuleVisitor, Param},
    optim::GradientsParams,
    prelude::ToElement,
    tensor::{Tensor, backend::AutodiffBackend},
};

struct SumSquares<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    total: Option<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SumSquares<'_, B> {
    fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
        if let Some(grad) = self.grads.get::<B::InnerBackend, K>(param.id) {
            let s = grad.square().sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + s,
                None => s,
            });
        }
    }
}

struct Scale<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    scale: Tensor<B::InnerBackend, 1>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
    fn visit_float<const K: usize>(&mut self, param: &Param<Tensor<B, K>>) {
        if let Some(grad) = self.grads.remove::<B::InnerBackend, K>(param.id) {
            let scale = self.scale.clone().reshape([1usize; K]);
            self.grads.register(param.id, grad * scale);
        }
    }
}

/// Clips by the global L2 norm of the gradients: when it exceeds `max_norm`
/// every gradient is scaled by `max_norm / norm` (optax's rule). Returns the
/// norm before clipping as a one-element tensor, left on the device so that
/// a step needs no host synchronisation; read it only when logging.
pub(crate) fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    max_norm: f64,
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut sum = SumSquares::<B> { grads, total: None };
    model.visit(&mut sum);
    let norm = sum.total?.sqrt();
    // norm < max: 1 (exactly, so unclipped gradients are untouched); else
    // max / norm. A zero norm gives inf, clamped to 1.
    let scale = norm.clone().recip().mul_scalar(max_norm).clamp_max(1.0);
    model.visit(&mut Scale::<B> { grads, scale });
    Some(norm)
}

/// A one-element tensor's value.
pub(crate) fn scalar<B: burn::tensor::backend::Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::{
        backend::{Autodiff, Flex},
        module::Module,
        nn::{Linear, LinearConfig},
        tensor::backend::Backend,
    };

    type B = Autodiff<Flex>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        a: Linear<B>,
        b: Linear<B>,
    }

    fn norm_of(model: &Net<B>, grads: &mut GradientsParams) -> f64 {
        scalar(clip_global_norm(model, grads, f64::MAX).unwrap())
    }

    #[test]
    fn clipping_scales_to_the_global_norm() {
        let device = Default::default();
        let model = Net::<B> {
            a: LinearConfig::new(4, 3).init(&device),
            b: LinearConfig::new(3, 2).init(&device),
        };
        let x = Tensor::<B, 2>::ones([5, 4], &device).mul_scalar(10.0);
        let loss = model.b.forward(model.a.forward(x)).square().sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        let before = scalar(clip_global_norm(&model, &mut grads, 1.0).unwrap());
        assert!(before > 1.0, "{before}");
        let after = norm_of(&model, &mut grads);
        assert!((after - 1.0).abs() < 1e-4, "{after}");
        // Below the threshold nothing changes.
        let again = scalar(clip_global_norm(&model, &mut grads, 2.0).unwrap());
        assert!((again - 1.0).abs() < 1e-4);
        assert!((norm_of(&model, &mut grads) - 1.0).abs() < 1e-4);
    }
}
