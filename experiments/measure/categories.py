"""Which category each profiled op falls in, one table per framework, as data. Worker side (no framework imported).

The vocabulary is `common.protocol.CATEGORIES`. `pool` is a category of its own: max pooling was 34-60% of
LeNet's op time in both frameworks (eager and compiled), far above any bound on `other`; it is spatial resampling
either way, so nearest upsampling (and its gradient, a sum over each block) is `pool` too. `attention` and
`recurrent` are categories of their own because torch runs each as one fused op that no table could split
(`aten::scaled_dot_product_attention`: the scores, the softmax and the weighted sum; `aten::lstm`: every step's
gates): on the jax side everything inside the same layer goes there too (the scaled dot product of
`jax_layers.attend`, the scan of flax's LSTM), so the two frameworks' numbers mean the same thing. The qkv and
output projections around the attention stay `matmul`. Norms (batch, layer, RMS, group) are `norm`; an embedding
lookup is a gather and its gradient a scatter-add of rows: `copy`, as in both frameworks' names for them.

Each table is read top down and the first pattern that matches a name wins (`first_match`). What the tables cannot
say alone (model or loss, an op's backward, a fused kernel's layer) the profilers decide from context:
experiments/measure/profile.py and the `<name>_profile.py` modules say how.
"""
from __future__ import annotations

import re

# `other` stays under this share of a step's op time for every seed model (tests/measure/test_profile.py), unless
# OTHER_ALLOWED names the (framework, model) with the reason.
OTHER_BOUND = 0.10
OTHER_ALLOWED: dict[tuple[str, str], str] = {}

# ---- torch: ATen ops (eager, and the extern calls of compiled code) by name
TORCH = [
    (r"scaled_dot_product|flash_attention|efficient_attention", "attention"),  # and their _backward
    (r"^aten::(lstm|rnn_|gru)|mkldnn_rnn|_thnn_fused_lstm", "recurrent"),
    (r"conv", "conv"),  # aten::conv2d, convolution, _convolution, mkldnn_convolution, convolution_backward
    (r"^aten::(addmm|mm|bmm|matmul|linear|baddbmm|_addmm_activation)$|mkldnn::_linear_pointwise|mkl_linear",
     "matmul"),
    (r"batch_norm|layer_norm|group_norm|rms_norm", "norm"),
    (r"pool|scatter_reduce|upsample", "pool"),  # max_pool2d(_with_indices)(_backward); Inductor's max-pool backward
    # scatter; upsample_nearest2d(_backward)
    (r"^aten::(mse_loss|ones_like|cross_entropy_loss|log_softmax|_log_softmax|_log_softmax_backward_data|nll_loss.*)$",
     "loss"),  # ones_like: the seed gradient of backward()
    (r"^aten::(relu_?|gelu|silu_?|threshold_backward|gelu_backward|silu_backward|clamp_min|add_?|mul_?|sub_?|rsub|"
     r"div_?|neg|tanh|sigmoid|pow|where|sum|mean|exp|sqrt|rsqrt|maximum|minimum)$", "elementwise"),
    (r"^aten::(copy_|to|_to_copy|contiguous|clone|flatten|view|reshape|_reshape_alias|t|transpose|permute|"
     r"as_strided|expand|detach_?|empty.*|zeros.*|ones|fill_|zero_|new_empty_strided|_unsafe_view|cat|"
     r"stack|slice|select|squeeze|unsqueeze|chunk|split|unbind|embedding|embedding_dense_backward|index_select|"
     r"index_add_?|narrow)$", "copy"),
]
# Module classes whose ops their names would misplace: a range is opened for each call (torch eager only).
TORCH_MODULES = {"GlobalMeanPool2d": "pool",  # aten::mean over the image: global average pooling
                 "MeanAll": "elementwise",  # matmul_chain's closing mean, a reduction as jax's `reduce`
                 "LSTMLayer": "recurrent"}  # nn.LSTM's flatten_parameters and state set-up besides aten::lstm
# Backward nodes take their forward op's category (same autograd sequence number); this table when none has it.
TORCH_BACKWARD = [
    (r"ScaledDotProduct|FlashAttention|EfficientAttention", "attention"), (r"Rnn|Lstm", "recurrent"),
    (r"^Convolution", "conv"), (r"^(Addmm|Mm|Bmm|T|Linear)Backward", "matmul"),
    (r"BatchNorm|LayerNorm|GroupNorm|RmsNorm", "norm"), (r"Pool|Upsample", "pool"),
    (r"^(Pow|Sub|MseLoss|NllLoss|LogSoftmax)Backward", "loss"),
    (r"^(Relu|Gelu|Silu|Add|Mul|Threshold|Sum|Mean|Div|Neg|Tanh|Sigmoid)Backward", "elementwise"),
    (r"^(View|Reshape|UnsafeView|Permute|Transpose|Clone|Copy|Expand|Select|Slice|Cat|Split|Embedding|Index)", "copy"),
]
# Inductor's kernels, by the fused ATen ops their names list (`cpp_fused_relu_threshold_backward_3`, or
# `triton_poi_fused_...` on a GPU), matched on the part after `fused_`. On a CPU the convolutions and matmuls are
# extern calls (ops of their own), so a kernel is never conv or matmul there, even when its name says
# convolution_backward: that part is the bias gradient's sum.
INDUCTOR = [
    (r"scaled_dot_product|flash_attention", "attention"),
    (r"max_pool|avg_pool|adaptive_|scatter|upsample", "pool"),
    (r"batch_norm|layer_norm|group_norm|rms_norm|native_batch", "norm"),
    (r"pow_sub|sub_sum|mse_loss|^expand_mul|log_softmax|nll_loss", "loss"),  # sum((yhat - y)**2), cross-entropy
    (r"_foreach|lerp|addcdiv|addcmul", "optimizer"),
    (r"relu|gelu|silu|threshold|add|mul|sigmoid|tanh|where|clamp|sum|mean|div|sub|exp|neg|sqrt", "elementwise"),
    (r"^(\d+|clone|copy|permute|transpose|view|cat|_to_copy|convolution|embedding|index)", "copy"),  # fused_0: a
    # layout change
]
# Never ops themselves: the profiler walks into their children, and the gaps between them are overhead.
TORCH_CONTAINERS = re.compile(
    r"^(nnbench\.|nn\.Module: |Torch-Compiled Region|CompiledFunction|## Call CompiledFxGraph|"
    r"autograd::engine::evaluate_function: CompiledFunctionBackward|Optimizer\.step|Optimizer\.zero_grad|"
    r"AOTDispatcher|Pregraph bytecode|TorchDynamo Cache Lookup|## Guard)")

# ---- jax: XLA HLO instructions by the opcodes they hold (a fusion: its fused computation's); first match wins
HLO = [
    ({"convolution"}, "conv"),
    ({"dot"}, "matmul"),
    ({"reduce-window", "select-and-scatter", "scatter"}, "pool"),
    ({"batch-norm-training", "batch-norm-inference", "batch-norm-grad", "rsqrt"}, "norm"),
    ({"reduce"}, "elementwise"),  # a plain reduction (bias gradients, means) unless the context says loss
    ({"add", "subtract", "multiply", "divide", "maximum", "minimum", "select", "compare", "exponential", "tanh",
      "sqrt", "power", "negate", "log", "logistic", "abs", "convert", "clamp", "and", "or", "not", "erf",
      "exponential-minus-one", "log-plus-one", "rem", "sign", "floor", "ceil", "round-nearest-even", "cbrt",
      "atan2", "xor", "is-finite"}, "elementwise"),
    ({"copy", "transpose", "concatenate", "bitcast", "reshape", "slice", "dynamic-slice", "dynamic-update-slice",
      "pad", "reverse", "gather", "copy-start", "copy-done", "bitcast-convert"}, "copy"),
    ({"iota", "broadcast", "constant", "rng", "rng-bit-generator"}, "fill"),  # producers: their consumer's category
]
# The innermost model layer in an instruction's source stack decides its elementwise and reduce work: bias adds
# and bias gradients belong to their Conv or Linear, as in torch, where they are inside the conv or addmm op.
JAX_LAYERS = [
    (r"^Conv(Transpose)?\.__call__$", "conv"), (r"^(Linear|Einsum)\.__call__$|^MatmulChain", "matmul"),
    (r"^(BatchNorm|LayerNorm|GroupNorm|RMSNorm)\.__call__$|_compute_stats|_normalize", "norm"),
    (r"^(max_pool|avg_pool|min_pool|pool|global_mean_pool)$", "pool"),
]
# Layers whose every instruction takes their category, whatever its opcode, where any frame of its source stack
# is theirs (the jax side of torch's fused attention and LSTM ops; an upsampling's gather and its gradient's
# sum; an embedding's gather and scatter-add).
JAX_WHOLE_LAYERS = [
    (r"^attend$", "attention"),
    (r"^(RNN|LSTMCell|OptimizedLSTMCell|GRUCell|SimpleCell)\.__call__$", "recurrent"),
    (r"^upsample$", "pool"),
    (r"^Embed\.(__call__|attend)$", "copy"),
]
# jax eager runs one small program per primitive or jitted helper (`jit_<name>`): its name is all there is to go by.
JAX_PRIMITIVES = [
    (r"^conv_general", "conv"), (r"^(dot_general|matmul)$", "matmul"),
    (r"reduce_window|select_and_(scatter|gather)", "pool"),
    (r"dot_product_attention", "attention"),
    (r"^tree_|adam|^_?update_moment|bias_correction", "optimizer"),  # optax's own jitted helpers
    (r"^_?(add|subtract|sub|multiply|mul|true_divide|divide|div|integer_pow|pow|power|square|sqrt|rsqrt|exp|log|tanh|"
     r"logistic|relu|gelu|max|min|maximum|minimum|neg|negative|abs|sign|select_n|where|gt|lt|ge|le|eq|ne|greater|"
     r"less|greater_equal|less_equal|equal|not_equal|reduce_sum|reduce_max|reduce_min|sum|mean|erf|clip|"
     r"add_any)$", "elementwise"),
    (r"^(rev|convert_element_type|reshape|transpose|broadcast_in_dim|concatenate|squeeze|expand_dims|slice|"
     r"dynamic_slice|dynamic_update_slice|pad|copy|copy_p|gather|iota|device_put)$", "copy"),
]


def first_match(table: list[tuple[str, str]], name: str, default: str = "other") -> str:
    for pattern, category in table:
        if re.search(pattern, name):
            return category
    return default
