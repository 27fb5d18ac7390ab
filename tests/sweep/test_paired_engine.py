"""What a paired comparison and a point's console line say beside the times: jax on a TPU against torch on the
host's CPU differs in device and in how its calls were timed, and says so."""
from __future__ import annotations

from dataclasses import replace

from experiments.common.protocol import Point, PointResult, Ready
from experiments.measure.reading import read
from experiments.sweep import console, paired_engine, preflight
from tests.helpers import ok_op

TPU = {"device_name": "TPU v5 lite", "precision_policy": "fp32/bf16x6", "sync_policy": "pipelined", "host": "h"}
CPU = {"device_name": "cpu", "precision_policy": "fp32/tf32-off", "sync_policy": "synced", "host": "h"}


def test_jax_on_a_tpu_against_torch_on_the_cpu_states_the_device_and_the_sync(make_cfg):
    jax, torch = (preflight.job(preflight.typed(make_cfg(f"framework={fw}", "model=lenet", "bench=quick")))
                  for fw in ("jax", "torch"))
    jax, torch = replace(jax, tags={"parity": "ok"}), replace(torch, tags={"parity": "ok"})
    said = paired_engine.differences(Ready(TPU, threads=13), jax, Ready(CPU, threads=13), torch)
    assert said == ("precision policy fp32/bf16x6 vs fp32/tf32-off", "sync pipelined vs synced",
                    "device TPU v5 lite vs cpu", "layout nhwc vs contiguous")


def test_a_pipelined_points_line_says_so_with_its_calls_per_sync():
    op = replace(ok_op(1.4e-4, 128), calls_per_block=161)
    line = console.point_line(read(Point(128, ("inference",)), [PointResult(128, "tpu:0", TPU, {"inference": op})]),
                              {}, None)
    assert line.startswith("inference 0.140 ms") and "pipelined: calls dispatched back to back, one sync per block " \
                                                      "(inference 161 calls)" in line
    synced = read(Point(128, ("inference",)), [PointResult(128, "cpu", CPU, {"inference": op})])
    assert "pipelined" not in console.point_line(synced, {}, None)
