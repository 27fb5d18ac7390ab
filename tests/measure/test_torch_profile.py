"""Where torch's profiler puts a forward op (torch_profile.category), in-process on names as the profiler reports
them: its context first (the optimizer, a module range), then an Inductor kernel's fused name, then the op's own."""
import pytest

from experiments.measure.backends.torch_profile import category


@pytest.mark.parametrize("name,context,op,eager,expected", [
    ("aten::mul_", ["Optimizer.step#Adam.step"], "training", True, "optimizer"),
    ("aten::mean", ["nn.Module: LeNet", "nn.Module: GlobalMeanPool2d"], "inference", True, "pool"),
    ("cpp_fused_relu_3", [], "inference", False, "elementwise"),
    ("graph_0_cpp_fused_native_batch_norm_1", [], "training", False, "norm"),
    ("aten::sub", [], "training", True, "loss"),  # eager, outside the model's call in a training step
    ("aten::addmm", ["nn.Module: MLP"], "inference", True, "matmul"),
    ("aten::conv2d", ["nn.Module: LeNet"], "training", True, "conv"),
])
def test_a_forward_op_takes_its_contexts_category_else_its_names(name, context, op, eager, expected):
    assert category(name, context, op, eager) == expected
