"""The benchmark's example models written directly in JAX (jax.jit of the whole training
step: forward, backward, optimizer), as the baseline lazy_runtime is compared with.
Same architectures, sizes and optimizers as examples/train_*.py (dropout off)."""

import jax
import jax.numpy as jnp
import numpy as np


def _init(key, shape, fan_in):
    bound = 1 / np.sqrt(fan_in)
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


def _linear(key, n_in, n_out, bias=True):
    k1, k2 = jax.random.split(key)
    p = {"w": _init(k1, (n_out, n_in), n_in)}
    if bias:
        p["b"] = _init(k2, (n_out,), n_in)
    return p


def _apply_linear(p, x):
    y = x @ p["w"].T
    return y + p["b"] if "b" in p else y


def cross_entropy(logits, y):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))


def adam(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
    """Adam (weight_decay > 0: AdamW, decoupled), as torch.optim implements them."""
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"m": zeros, "v": zeros, "t": jnp.zeros((), jnp.float32)}

    def update(params, grads, state):
        t = state["t"] + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t

        def step(p, m, v):
            p = p * (1 - lr * weight_decay)
            return p - lr / bc1 * m / (jnp.sqrt(v) / jnp.sqrt(bc2) + eps)
        return jax.tree_util.tree_map(step, params, m, v), {"m": m, "v": v, "t": t}
    return init, update


def make_step(loss_fn, opt, has_state=False):
    init, update = opt

    @jax.jit
    def step(params, opt_state, model_state, x, y):
        if has_state:
            (loss, model_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params, model_state, x, y)
        else:
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params, opt_state = update(params, grads, opt_state)
        return params, opt_state, model_state, loss
    return init, step


# ---- MLP --------------------------------------------------------------------------------

def mlp(d_in=32, hidden=64, classes=10, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 3)
    params = {"fc1": _linear(k[0], d_in, hidden), "fc2": _linear(k[1], hidden, hidden),
              "out": _linear(k[2], hidden, classes)}

    def loss_fn(p, x, y):
        h = jax.nn.relu(_apply_linear(p["fc1"], x))
        h = jax.nn.relu(_apply_linear(p["fc2"], h))
        return cross_entropy(_apply_linear(p["out"], h), y)
    init, step = make_step(loss_fn, adam(3e-3, weight_decay=1e-2))
    return params, init(params), None, step


# ---- CNN --------------------------------------------------------------------------------

def _conv(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + b[None, :, None, None]


def _bn(x, p, s):
    mean = x.mean((0, 2, 3))
    var = x.var((0, 2, 3))
    n = x.size // x.shape[1]
    y = (x - mean[None, :, None, None]) * jax.lax.rsqrt(var + 1e-5)[None, :, None, None]
    y = y * p["g"][None, :, None, None] + p["b"][None, :, None, None]
    new = {"rm": 0.9 * s["rm"] + 0.1 * mean, "rv": 0.9 * s["rv"] + 0.1 * var * n / (n - 1)}
    return y, new


def _maxpool(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def cnn(channels=(8, 16), classes=4, seed=0):
    c1, c2 = channels
    k = jax.random.split(jax.random.PRNGKey(seed), 6)
    params = {"c1w": _init(k[0], (c1, 1, 3, 3), 9), "c1b": _init(k[1], (c1,), 9),
              "c2w": _init(k[2], (c2, c1, 3, 3), 9 * c1), "c2b": _init(k[3], (c2,), 9 * c1),
              "bn1": {"g": jnp.ones(c1), "b": jnp.zeros(c1)},
              "bn2": {"g": jnp.ones(c2), "b": jnp.zeros(c2)}, "fc": _linear(k[4], c2, classes)}
    state = {"bn1": {"rm": jnp.zeros(c1), "rv": jnp.ones(c1)},
             "bn2": {"rm": jnp.zeros(c2), "rv": jnp.ones(c2)}}

    def loss_fn(p, s, x, y):
        h, s1 = _bn(_conv(x, p["c1w"], p["c1b"]), p["bn1"], s["bn1"])
        h = _maxpool(jax.nn.relu(h))
        h, s2 = _bn(_conv(h, p["c2w"], p["c2b"]), p["bn2"], s["bn2"])
        h = _maxpool(jax.nn.relu(h)).mean((2, 3))
        return cross_entropy(_apply_linear(p["fc"], h), y), {"bn1": s1, "bn2": s2}
    init, step = make_step(loss_fn, adam(1e-2), has_state=True)
    return params, init(params), state, step


# ---- LSTM -------------------------------------------------------------------------------

def lstm(vocab=32, emb=16, hidden=32, layers=2, seed=0, unroll=False):
    """``unroll``: the time loop in Python (as torch's LSTM records it) instead of
    ``lax.scan``."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 2 + 4 * layers)
    params = {"emb": jax.random.normal(keys[0], (vocab, emb)), "head": _linear(keys[1], hidden,
                                                                               vocab), "layers": []}
    for i in range(layers):
        n_in = emb if i == 0 else hidden
        k = keys[2 + 4 * i: 6 + 4 * i]
        params["layers"].append({
            "wi": _init(k[0], (4 * hidden, n_in), hidden), "wh": _init(k[1], (4 * hidden, hidden),
                                                                       hidden),
            "bi": _init(k[2], (4 * hidden,), hidden), "bh": _init(k[3], (4 * hidden,), hidden)})

    def run_layer(p, xs):  # xs: [T, B, n_in]
        B = xs.shape[1]

        def cell(carry, x):
            h, c = carry
            g = x @ p["wi"].T + h @ p["wh"].T + p["bi"] + p["bh"]
            i, f, gg, o = jnp.split(g, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        zeros = jnp.zeros((B, hidden))
        if not unroll:
            return jax.lax.scan(cell, (zeros, zeros), xs)[1]
        carry, hs = (zeros, zeros), []
        for x in xs:
            carry, h = cell(carry, x)
            hs.append(h)
        return jnp.stack(hs)

    def loss_fn(p, x, y):
        h = jnp.swapaxes(p["emb"][x], 0, 1)
        for lp in p["layers"]:
            h = run_layer(lp, h)
        logits = _apply_linear(p["head"], jnp.swapaxes(h, 0, 1))
        return cross_entropy(logits, y)
    init, step = make_step(loss_fn, adam(1e-2))
    return params, init(params), None, step


# ---- GPT --------------------------------------------------------------------------------

def _ln(p, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["g"] + p["b"]


def gpt(vocab=64, block=16, d_model=32, heads=4, layers=2, seed=0):
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 4 + 4 * layers))
    ln = {"g": jnp.ones(d_model), "b": jnp.zeros(d_model)}
    params = {"tok": 0.02 * jax.random.normal(next(keys), (vocab, d_model)),
              "pos": 0.02 * jax.random.normal(next(keys), (block, d_model)), "ln_f": ln,
              "blocks": [{"ln1": ln, "ln2": ln, "qkv": _linear(next(keys), d_model, 3 * d_model),
                          "proj": _linear(next(keys), d_model, d_model),
                          "fc": _linear(next(keys), d_model, 4 * d_model),
                          "fc2": _linear(next(keys), 4 * d_model, d_model)}
                         for _ in range(layers)]}
    mask = jnp.tril(jnp.ones((block, block), bool))

    def attn(p, x):
        B, T, C = x.shape
        q, k, v = jnp.split(_apply_linear(p["qkv"], x), 3, axis=-1)
        q, k, v = (t.reshape(B, T, heads, C // heads).transpose(0, 2, 1, 3) for t in (q, k, v))
        att = (q @ k.transpose(0, 1, 3, 2)) / np.sqrt(C // heads)
        att = jnp.where(mask[:T, :T], att, -jnp.inf)
        y = (jax.nn.softmax(att, -1) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        return _apply_linear(p["proj"], y)

    def loss_fn(p, x, y):
        T = x.shape[1]
        h = p["tok"][x] + p["pos"][:T]
        for b in p["blocks"]:
            h = h + attn(b, _ln(b["ln1"], h))
            h = h + _apply_linear(b["fc2"], jax.nn.gelu(_apply_linear(b["fc"], _ln(b["ln2"], h)),
                                                        approximate=False))
        logits = _ln(p["ln_f"], h) @ p["tok"].T
        return cross_entropy(logits, y)
    init, step = make_step(loss_fn, adam(3e-3, weight_decay=0.01))
    return params, init(params), None, step


MODELS = {"mlp": mlp, "cnn": cnn, "lstm": lstm, "gpt": gpt}


def training_step(row: str, read=True, **kwargs):
    """``step(x, y) -> float``: benchmark row ``row``'s model trained one step by jax.jit on
    CPU tensors ``x, y`` (given to it as host arrays, as the whole step's replay gets
    them), the loss read back (``read=False``: the loss's device array, not waited for);
    the state lives in the closure."""
    state = list(MODELS[row.split("-")[0]](**kwargs))

    def step(x, y):
        params, opt_state, model_state, jitted = state
        params, opt_state, model_state, loss = jitted(params, opt_state, model_state,
                                                      x.numpy(), y.numpy())
        state[:3] = params, opt_state, model_state
        return float(loss) if read else loss
    return step
