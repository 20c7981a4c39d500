"""Specs for the elementwise family (elementwise.py: arithmetic and its in-place forms, min/max,
fmax/fmin, clip, where, comparisons, logic, bitwise, predicates, rounding, square, cast; unary.py:
float math and activations, leaky_relu and elu)."""

import math

import numpy as np

import oarlock.nn.functional as F

from op_specs.base import ALL, ALL_REAL, FLOATS, INTS, Case, In, OpSpec, library_op

F32_TOL = (2e-5, 2e-6)  # integer inputs to float math compute in float32
BITS = ("bool",) + INTS
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, 1.5, -2.0]  # float-only values for the predicates

erf = np.vectorize(math.erf, otypes=[float])


def float_result(dt, *args, **kwargs):
    """The output dtype of ops that compute integers in the default float dtype."""
    return dt if dt in FLOATS else "float32"


FLOAT_RESULT = dict(out_dtype=float_result, rtol={"int32": F32_TOL, "int64": F32_TOL})

def binary_cases(x=In, y=In):
    """Broadcasting in every form, 0-d, 0-size, and Python numbers on either side; x and y make the
    tensor inputs from a shape (e.g. a divisor kept away from zero)."""
    return [
        Case([x((3, 4)), y((3, 4))], name="same"),
        Case([x((2, 3, 4)), y((4,))], name="broadcast"),
        Case([x((3, 1)), y((1, 4))], name="outer"),
        Case([x(()), y((2, 3))], name="0d"),
        Case([x((0, 3)), y((3,))], name="empty"),
        Case([x((3, 4)), 3], name="scalar"),
        Case([2, y((3, 4))], name="rscalar"),
    ]


BROADCAST_CASES = binary_cases()


def divisor(shape):
    return In(shape, requires_nonzero=True)


def positive_divisor(shape):
    return In(shape, domain=(0.5, 2.0), int_range=(1, 5))


def negative_divisor(shape):
    return In(shape, domain=(-2.0, -0.5), int_range=(-5, 0))


def unary_cases(**domain):
    """2-d, 0-d and 0-size inputs, drawn from `domain` (In's domain/int_range)."""
    return [Case([In(shape, **domain)], name=name) for shape, name in (((3, 4), "2d"), ((), "0d"), ((0, 3), "empty"))]


UNARY_CASES = unary_cases()


def _scaled_ref(op):
    """x op alpha * y: add and subtract with torch's alpha."""
    return lambda x, y, alpha=1: op(x, np.multiply(alpha, y))


ALPHA_CASES = [
    Case([In((3, 4)), In((4,))], {"alpha": 3}, name="alpha_int"),
    Case([In((3, 4)), In((3, 4))], {"alpha": -0.5}, name="alpha_float", dtypes=FLOATS),
    Case([In((3, 4)), 2], {"alpha": 2}, name="alpha_scalar"),
]


def _divide_ref(x, y, rounding_mode=None):
    quotient = np.true_divide(x, y)
    if rounding_mode == "trunc":
        return np.trunc(quotient)
    return np.floor_divide(x, y) if rounding_mode == "floor" else quotient


def _divide_dtype(dt, *args, rounding_mode=None, **kwargs):
    """Rounded division keeps integer dtypes; true division computes them in float32."""
    return dt if rounding_mode else float_result(dt)


ROUNDED_DIVISION = [
    Case([In((3, 4)), divisor((3, 4))], {"rounding_mode": mode}, name=mode)
    for mode in ("trunc", "floor")
] + [
    Case([In((2, 3), int_range=(-9, 10)), negative_divisor((3,))], {"rounding_mode": mode}, name=f"{mode}_negative",
         grad=False)
    for mode in ("trunc", "floor")
] + [Case([In((3, 4)), 3], {"rounding_mode": "trunc"}, name="trunc_scalar", grad=False)]


def _in_place(name):
    """Call the Tensor method `name` on a clone of x (x.clone().add_(y, ...)): the op writes into the clone
    and returns it, and the gradient check differentiates through the in-place write, as model code does."""
    def call(x, y, **kwargs):
        target = x.clone()
        out = getattr(target, name)(y, **kwargs)
        assert out is target, f"{name} must return the tensor it wrote"
        return out
    return call


IN_PLACE_CASES = [
    Case([In((3, 4)), In((3, 4))], name="same"),
    Case([In((2, 3, 4)), In((4,))], name="broadcast_y"),
    Case([In(()), In(())], name="0d"),
    Case([In((0, 3)), In((3,))], name="empty"),
    Case([In((3, 4)), 2], name="scalar"),
    Case([In((3, 4)), In((4,), dtype="float64")], name="wider_y", dtypes=("float32", "bfloat16")),
]

# ties: equal values in both operands (random floats would never be equal)
TIES = Case([In((3, 4), values=np.arange(12).reshape(3, 4) % 3), In((4,), values=[0, 1, 2, 1])], name="ties",
            grad=False)

ARITHMETIC = [
    OpSpec("add", BROADCAST_CASES + ALPHA_CASES, ref=_scaled_ref(np.add), dtypes=ALL_REAL),
    OpSpec("subtract", BROADCAST_CASES + ALPHA_CASES, ref=_scaled_ref(np.subtract), dtypes=ALL_REAL),
    OpSpec("multiply", BROADCAST_CASES, ref=np.multiply, dtypes=ALL_REAL),
    OpSpec("divide", binary_cases(y=divisor) + ROUNDED_DIVISION, ref=_divide_ref, dtypes=ALL_REAL,
           out_dtype=_divide_dtype, rtol=FLOAT_RESULT["rtol"]),
    OpSpec("floor_divide", binary_cases(y=divisor), ref=np.floor_divide, dtypes=ALL_REAL, grad=False),
    OpSpec("remainder", binary_cases(y=positive_divisor) + [
        Case([In((3, 4)), negative_divisor((3, 4))], name="negative_divisor"),
    ], ref=np.remainder, dtypes=ALL_REAL),
    OpSpec("pow", [
        Case([In((3, 4), domain=(0.5, 2.0), int_range=(0, 4)), In((3, 4), int_range=(0, 4))], name="same"),
        Case([In((2, 3), domain=(0.5, 2.0), int_range=(0, 4)), In((3,), int_range=(0, 4))], name="broadcast"),
        Case([In(()), 3], name="square_0d"),
        Case([In((3, 4)), 2], name="scalar_exponent"),
        Case([2, In((3, 4), int_range=(0, 4))], name="scalar_base"),
        Case([In((0, 3), domain=(0.5, 2.0)), In((3,), int_range=(0, 4))], name="empty"),
    ], ref=np.power, dtypes=ALL_REAL),
    OpSpec("maximum", BROADCAST_CASES + [TIES], ref=np.maximum, dtypes=ALL_REAL),
    OpSpec("minimum", BROADCAST_CASES + [TIES], ref=np.minimum, dtypes=ALL_REAL),
] + [
    OpSpec(name, BROADCAST_CASES + [TIES, Case([In((4,), values=[1.0, np.nan, 2.0, np.nan]),
                                                In((4,), values=[np.nan, 1.0, 3.0, np.nan])],
                                               name="nan", dtypes=FLOATS, grad=False)], ref=ref, dtypes=ALL_REAL)
    for name, ref in (("fmax", np.fmax), ("fmin", np.fmin))
]

IN_PLACE = [
    OpSpec("add_", IN_PLACE_CASES + ALPHA_CASES, ref=_scaled_ref(np.add), dtypes=ALL_REAL,
           call=_in_place("add_"), out_dtype=lambda dt, *args, **kwargs: dt),
    OpSpec("subtract_", IN_PLACE_CASES + ALPHA_CASES, ref=_scaled_ref(np.subtract), dtypes=ALL_REAL,
           call=_in_place("sub_"), out_dtype=lambda dt, *args, **kwargs: dt),
    OpSpec("multiply_", IN_PLACE_CASES, ref=np.multiply, dtypes=ALL_REAL, call=_in_place("mul_"),
           out_dtype=lambda dt, *args, **kwargs: dt),
    OpSpec("divide_", [Case([In((3, 4)), divisor((3, 4))], name="same"),
                       Case([In((2, 3)), divisor((3,))], name="broadcast_y"),
                       Case([In((3, 4)), 4], name="scalar")] + [
        Case(c.args, c.kwargs, name=c.name, dtypes=ALL_REAL) for c in ROUNDED_DIVISION
    ], ref=_divide_ref, call=_in_place("div_"), out_dtype=lambda dt, *args, **kwargs: dt),
]

UNARY_REAL = [
    OpSpec("neg", UNARY_CASES, ref=np.negative, dtypes=ALL_REAL),
    OpSpec("abs", UNARY_CASES, ref=np.abs, dtypes=ALL_REAL),
    OpSpec("sign", UNARY_CASES, ref=np.sign, dtypes=ALL_REAL, grad=False),
    OpSpec("relu", UNARY_CASES, ref=lambda x: np.maximum(x, 0), dtypes=ALL_REAL),
    OpSpec("square", UNARY_CASES, ref=np.square, dtypes=ALL_REAL),
] + [
    # integers keep their dtype; the gradient is zero
    OpSpec(name, UNARY_CASES + [Case([In((2, 3), domain=(-4.0, 4.0))], name="wide")], ref=ref, dtypes=ALL_REAL,
           out_dtype=lambda dt, *args: dt)
    for name, ref in (("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc))
] + [
    OpSpec("round", UNARY_CASES + [Case([In((2, 3), domain=(-4.0, 4.0))], name="wide"),
                                   Case([In((2, 3), domain=(-4.0, 4.0))], {"decimals": 1}, name="decimals"),
                                   Case([In((4,), values=[0.5, 1.5, 2.5, -0.5])], name="half_to_even", grad=False)],
           ref=lambda x, decimals=0: np.round(x, decimals), dtypes=ALL_REAL, out_dtype=lambda dt, *args, **kw: dt),
    OpSpec("reciprocal", [Case([In((3, 4), requires_nonzero=True)], name="2d"),
                          Case([In((), requires_nonzero=True)], name="0d"), Case([In((0, 3))], name="empty")],
           ref=lambda x: 1.0 / x, dtypes=ALL_REAL, **FLOAT_RESULT),
] + [
    OpSpec("clip", [
        Case([In((3, 4))], {"min": -1, "max": 1}, name="both"),
        Case([In((3, 4))], {"min": -0.5}, name="min_only"),
        Case([In((3, 4))], {"max": 0.5}, name="max_only"),
        Case([In(())], {"min": 0, "max": 1}, name="0d"),
        Case([In((0, 3))], {"min": 0, "max": 1}, name="empty"),
        Case([In((3, 4))], name="no_bounds"),
    ], ref=lambda x, min=None, max=None: np.clip(x, min, max), dtypes=ALL_REAL,
        out_dtype=lambda dt, x, min=None, max=None: "float32" if dt in INTS and float in {type(min), type(max)}
        else dt),
]


def _gelu_tanh(x, approximate=None):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


FLOAT_MATH = [
    OpSpec("exp", UNARY_CASES, ref=np.exp, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("log", unary_cases(domain=(0.1, 3.0), int_range=(1, 6)), ref=np.log, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("log1p", unary_cases(domain=(-0.5, 2.0), int_range=(0, 6)), ref=np.log1p, dtypes=ALL_REAL,
           **FLOAT_RESULT),
    OpSpec("sqrt", unary_cases(domain=(0.1, 3.0), int_range=(0, 6)), ref=np.sqrt, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("rsqrt", unary_cases(domain=(0.1, 3.0), int_range=(1, 6)), ref=lambda x: 1 / np.sqrt(x),
           dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("sin", UNARY_CASES, ref=np.sin, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("cos", UNARY_CASES, ref=np.cos, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("tanh", UNARY_CASES, ref=np.tanh, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("erf", UNARY_CASES + [Case([In((5, 6), domain=(-6.0, 6.0))], name="wide")], ref=erf, dtypes=ALL_REAL,
           **FLOAT_RESULT),
    OpSpec("sigmoid", UNARY_CASES + [Case([In((3, 4), domain=(-40.0, 40.0))], name="wide")],
           ref=lambda x: 1 / (1 + np.exp(-x)), dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("silu", UNARY_CASES, ref=lambda x: x / (1 + np.exp(-x)), dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("gelu", UNARY_CASES + [
        Case([In((5, 6), domain=(-6.0, 6.0))], name="wide"),
        Case([In((3, 4))], {"approximate": True}, ref=_gelu_tanh, name="tanh"),
        Case([In((3, 4))], {"approximate": "tanh"}, ref=_gelu_tanh, name="tanh_str", grad=False),
        Case([In((3, 4))], {"approximate": "none"}, name="none_str", grad=False),
    ], ref=lambda x, approximate=False: 0.5 * x * (1 + erf(x / math.sqrt(2))), dtypes=ALL_REAL, **FLOAT_RESULT),
]

# parametrised activations: floats only, like Paddle
ACTIVATIONS = [
    OpSpec("leaky_relu", UNARY_CASES + [Case([In((3, 4))], {"negative_slope": 0.2}, name="slope"),
                                        Case([In((6,), values=[-1.0, 0.0, 2.0, -0.5, 3.0, 0.0])], name="zeros",
                                             grad=False)],
           ref=lambda x, negative_slope=0.01: np.where(x >= 0, x, x * negative_slope), call=F.leaky_relu),
    OpSpec("elu", UNARY_CASES + [Case([In((3, 4))], {"alpha": 0.5}, name="alpha"),
                                 Case([In((4,), domain=(-40.0, 40.0))], name="wide")],
           ref=lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))), call=F.elu),
]

COMPARISONS = [
    OpSpec(name, BROADCAST_CASES + [TIES], ref=ref, dtypes=ALL, grad=False)
    for name, ref in (("equal", np.equal), ("not_equal", np.not_equal), ("less_than", np.less),
                      ("less_equal", np.less_equal), ("greater_than", np.greater),
                      ("greater_equal", np.greater_equal),
                      ("logical_and", np.logical_and), ("logical_or", np.logical_or),
                      ("logical_xor", np.logical_xor))
] + [
    OpSpec(name, BROADCAST_CASES, ref=ref, dtypes=BITS, grad=False)
    for name, ref in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                      ("bitwise_xor", np.bitwise_xor))
]

PREDICATES = [
    OpSpec("logical_not", UNARY_CASES, ref=np.logical_not, dtypes=ALL, grad=False),
    OpSpec("bitwise_not", UNARY_CASES, ref=np.bitwise_not, dtypes=BITS, grad=False),
] + [
    OpSpec(name, UNARY_CASES + [Case([In((6,), values=SPECIAL)], name="special", dtypes=FLOATS)], ref=ref,
           dtypes=ALL_REAL, grad=False)
    for name, ref in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite))
]

CONDITION = In((3, 4), dtype="bool")
SELECTION = [
    OpSpec("where", [
        Case([CONDITION, In((3, 4)), In((3, 4))], name="same"),
        Case([In((3, 1), dtype="bool"), In((1, 4)), In((4,))], name="broadcast"),
        Case([CONDITION, In((3, 4)), 0.5], name="scalar_y"),
        Case([CONDITION, 2, In(())], name="scalar_x_0d"),
        Case([In((0, 3), dtype="bool"), In((3,)), In((0, 3))], name="empty"),
    ], ref=np.where, dtypes=ALL),
    OpSpec("cast", [Case([In((3, 4)), "float64"], name="to64"), Case([In((2,)), "float32"], name="to32", grad=False)],
           ref=lambda x, dtype: x.astype(dtype), dtypes=ALL, out_dtype=lambda dt, x, dtype: dtype),
]

SPECS = ARITHMETIC + IN_PLACE + UNARY_REAL + FLOAT_MATH + ACTIVATIONS + COMPARISONS + PREDICATES + SELECTION


def _silu_grad_ref(x, g):
    s = 1 / (1 + np.exp(-x))
    return g * s * (1 + x * (1 - s))


SPECS.append(OpSpec("silu_grad", [
    Case([In((3, 4)), In((3, 4))], name="same"),
    Case([In(()), In(())], name="0d"),
    Case([In((0, 2)), In((0, 2))], name="empty"),
], ref=_silu_grad_ref, grad=False, call=library_op("silu_grad")))


SPECS.append(OpSpec("relu_grad", [
    Case([In((3, 4)), In((3, 4))], name="same"),
    Case([In(()), In(())], name="0d"),
    Case([In((0, 2)), In((0, 2))], name="empty"),
], ref=lambda out, g: np.where(out > 0, g, 0.0), grad=False, call=library_op("relu_grad")))


def _gelu_grad_ref(x, g, approximate=False):
    if approximate:
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = np.tanh(k * (x + c * x ** 3))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return g * (0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


SPECS.append(OpSpec("gelu_grad", [
    Case([In((3, 4)), In((3, 4))], name="exact"),
    Case([In((3, 4)), In((3, 4))], {"approximate": True}, name="tanh"),
    Case([In((3, 4)), In((3, 4))], {"approximate": "tanh"}, name="tanh_str"),
    Case([In(()), In(())], name="0d"),
    Case([In((0, 2)), In((0, 2))], name="empty"),
], ref=_gelu_grad_ref, grad=False, call=library_op("gelu_grad")))


# activation_extras.py: Paddle's piecewise activations (floats only); inputs away from the kinks for the
# finite differences, with one case on the kinks for the values
def _hardswish_ref(x):
    return x * np.clip(x + 3, 0, 6) / 6


PIECEWISE = [
    OpSpec("relu6", unary_cases(domain=(-3.0, 9.0)) + [
        Case([In((6,), values=[-1.0, 0.0, 3.0, 6.0, 7.0, 5.5])], name="kinks", grad=False)],
        ref=lambda x: np.clip(x, 0, 6), call=F.relu6),
    OpSpec("hardswish", unary_cases(domain=(-5.0, 5.0)) + [
        Case([In((5,), values=[-4.0, -3.0, 0.0, 3.0, 4.0])], name="kinks", grad=False)],
        ref=_hardswish_ref, call=F.hardswish),
    OpSpec("hardsigmoid", unary_cases(domain=(-5.0, 5.0)) + [
        Case([In((3, 4), domain=(-6.0, 6.0))], {"slope": 0.2, "offset": 0.4}, name="slope")],
        ref=lambda x, slope=0.1666667, offset=0.5: np.clip(x * slope + offset, 0, 1), call=F.hardsigmoid),
    OpSpec("swish", UNARY_CASES + [Case([In((4,), domain=(-30.0, 30.0))], name="wide")],
           ref=lambda x: x / (1 + np.exp(-x)), call=F.swish),
]
SPECS += PIECEWISE
