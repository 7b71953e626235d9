# chessbench: GPL-3.0-or-later. Helpers for running google-deepmind/searchless_chess
# (Apache-2.0, not vendored) from a checkout, shared by bench/searchless_train.py
# and tests/python/searchless_forward.py.
"""Imports searchless_chess from a checkout under current JAX.

Their code at 90ae0e6 uses two things current JAX lacks:
`jax.sharding.PositionalSharding` (replaced by one device's sharding, which is
what it amounts to on one CPU; the sharding constraint becomes a no-op) and
`jnp.clip(a_min=...)` (mapped to `min=`).
"""

import sys
import tempfile
from pathlib import Path


def load(checkout: str) -> Path:
    """Makes `searchless_chess.src.*` importable from `checkout` and patches
    JAX; returns the temporary directory holding the package link."""
    code = Path(checkout).resolve()
    if not (code / "src" / "transformer.py").is_file():
        sys.exit(f"{code}: not a searchless_chess checkout (no src/transformer.py)")
    root = Path(tempfile.mkdtemp(prefix="searchless-"))
    (root / "searchless_chess").symlink_to(code)
    sys.path.insert(0, str(root))

    import jax
    import jax.numpy as jnp

    class OneDevice:
        """PositionalSharding's uses in training.py, on one device."""

        def __init__(self, devices):
            self._sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

        def reshape(self, *shape):
            return self

        def replicate(self):
            return self._sharding

    if not hasattr(jax.sharding, "PositionalSharding"):
        jax.sharding.PositionalSharding = OneDevice
        constrain = jax.lax.with_sharding_constraint
        jax.lax.with_sharding_constraint = lambda x, s: (
            x if isinstance(s, OneDevice) else constrain(x, s)
        )
    clip = jnp.clip

    def clip_with_a_min(x, a_min=None, a_max=None, **kw):
        if a_min is not None:
            kw["min"] = a_min
        if a_max is not None:
            kw["max"] = a_max
        return clip(x, **kw)

    jnp.clip = clip_with_a_min
    return root


def transformer_config(
    *,
    layers: int,
    d_model: int,
    heads: int,
    outputs: int,
    seed: int,
    vocab_size: int | None = None,
    max_sequence_length: int | None = None,
):
    """Their train.py's predictor config (learned positions, no causal mask,
    final LayerNorm) at the given shape. The vocabulary (1968 actions) and
    the sequence length (79) come from their tokenizer and utils, which need
    python-chess, unless given."""
    from searchless_chess.src import transformer

    if vocab_size is None or max_sequence_length is None:
        from searchless_chess.src import tokenizer, utils

        vocab_size = vocab_size or utils.NUM_ACTIONS
        max_sequence_length = max_sequence_length or tokenizer.SEQUENCE_LENGTH + 2
    return transformer.TransformerConfig(
        vocab_size=vocab_size,
        output_size=outputs,
        pos_encodings=transformer.PositionalEncodings.LEARNED,
        max_sequence_length=max_sequence_length,
        num_heads=heads,
        num_layers=layers,
        embedding_dim=d_model,
        apply_post_ln=True,
        apply_qk_layernorm=False,
        use_causal_mask=False,
        seed=seed,
    )


def predictor(*, policy: str, layers: int, d_model: int, heads: int, buckets: int, seed: int):
    """Their predictor for `policy` at the given shape (1968 outputs for
    behavioural cloning, `buckets` otherwise); returns (predictor, config)."""
    from searchless_chess.src import transformer, utils

    outputs = utils.NUM_ACTIONS if policy == "behavioral_cloning" else buckets
    config = transformer_config(
        layers=layers, d_model=d_model, heads=heads, outputs=outputs, seed=seed
    )
    return transformer.build_transformer_predictor(config), config
