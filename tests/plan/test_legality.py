"""The shared legality rules (schedgen/plan/legality.py) on their own numbers; the matmul, collective, attention
and map planners use them (the planners' own tests check the located messages)."""
from __future__ import annotations

from schedgen.plan import legality as lg
from schedgen.plan.common import Problems, SmemMap
from schedgen.plan.hardware import H200


def test_unique_names_reports_the_second_use():
    problems = Problems()
    seen = lg.check_unique_names((("sizes", ["M", "N"]), ("inputs", ["a", "M"]), ("outputs", ["a"])), problems)
    assert [(p.path, p.message) for p in problems] == [
        (("op", "inputs", "M"), "name 'M' is already used in op.sizes"),
        (("op", "outputs", "a"), "name 'a' is already used in op.inputs")]
    assert seen == {"M": "inputs", "N": "sizes", "a": "outputs"}


def test_sizes_int32():
    problems = Problems()
    lg.check_sizes_int32({"M": 2**31 - 1, "N": 2**31}, problems)
    assert [(p.path, p.message) for p in problems] == [
        (("op", "sizes", "N"), "size 2147483648 does not fit the kernel's 32-bit coordinates")]


def test_no_cluster():
    problems = Problems()
    lg.check_no_cluster([1], "nothing shared", problems)
    lg.check_no_cluster([1, 1, 1], "nothing shared", problems)
    assert not problems
    lg.check_no_cluster([1, 2], "nothing shared", problems)
    assert [(p.path, p.message) for p in problems] == [(("schedule", "cluster"), "nothing shared; use cluster: [1]")]


def test_setmaxnreg_rules():
    assert lg.setmaxnreg_problem(232) is None and lg.setmaxnreg_problem(24) is None and lg.setmaxnreg_problem(256) is None
    assert lg.setmaxnreg_problem(236) == "setmaxnreg takes a multiple of 8 registers, got 236"
    assert lg.setmaxnreg_problem(236, suggest=True) == "setmaxnreg takes a multiple of 8 registers, got 236; use 232 or 240"
    assert lg.setmaxnreg_problem(16) == "setmaxnreg takes 24 to 256 registers, got 16"
    assert lg.setmaxnreg_problem(264) == "setmaxnreg takes 24 to 256 registers, got 264"
    assert lg.setmaxnreg_problem(236, suggest=True, instruction="plgpu.set_max_registers") == (
        "plgpu.set_max_registers takes a multiple of 8 registers, got 236; use 232 or 240")
    problems = Problems()
    lg.check_setmaxnreg({"memory_registers": 40, "compute_registers": 228}, problems)
    assert [p.path for p in problems] == [("schedule", "pipeline", "compute_registers")]


def test_register_budget_is_the_blocks_not_the_sms():
    # 384 threads launched with __launch_bounds__(384, 1) hold 168 a thread: 64512, not the SM's 65536
    assert lg.register_budget_problem(24, 2, 240, H200) is None                     # 64512
    assert lg.register_budget_problem(32, 2, 240, H200) == (
        "register budgets 32 + 2 x 240 need 65536 registers; a block of 384 threads holds 64512 (at most 232 per "
        "consumer with 32 for the producer)")
    assert lg.register_budget_problem(56, 1, 256, H200) is None                     # 256 threads: 256 a thread
    assert lg.max_consumer_regs(64512, 40, 2) == 232


def test_smem_fit_and_what_fits():
    smem = SmemMap()
    smem.alloc("a", 32768, 4)
    smem.alloc("b", 32768, 4)
    problems = Problems()
    assert lg.check_smem_fit(smem, H200, ("x",), problems, "fix it") == 262144 + 1024
    (p,) = problems
    assert p.path == ("x",) and p.message == ("SMEM needed is 263168 B (a 131072 B, b 131072 B), over the NVIDIA H200's "
                                              "232448 B per block; fix it")
    assert lg.stages_that_fit(H200, 0, 65536) == 3                                  # (232448 - 1024) // 65536
    problems = Problems()
    small = SmemMap()
    small.alloc("a", 1024)
    assert lg.check_smem_fit(small, H200, ("x",), problems, "") == 2048 and not problems


def test_tma_rules():
    assert lg.tma_inner_bytes_problem(8, 2) is None
    assert lg.tma_inner_bytes_problem(12, 2) == ("the minor block dimension is 12 x 2 B = 24 B; TMA needs a multiple "
                                                 "of 16 B (use a multiple of 8 elements)")
    assert lg.tma_stride_problem("rows", 2048, 2) is None
    assert lg.tma_stride_problem("rows of 'x' along dimension 0", 2002, 2) == (
        "rows of 'x' along dimension 0 are 2002 B apart; TMA needs a multiple of 16 B (pad the minor dimension to a "
        "multiple of 8 elements)")
    assert lg.tma_stride_problem("rows", 12, 4).endswith("a multiple of 4 elements)")
    assert lg.tma_box_fits(256, H200) and not lg.tma_box_fits(257, H200)
    problems = Problems()
    lg.check_tma_box_extent(512, H200, ("p",), problems)
    lg.check_tma_box_extent(300, H200, ("q",), problems, "rows")
    assert [(p.path, p.message) for p in problems] == [
        (("p",), "TMA boxes are at most 256 elements per dimension, got 512"), (("q",), "rows")]


def test_swizzle_choice():
    assert lg.widest_swizzle(128, H200) == 128 and lg.widest_swizzle(96, H200) == 32 and lg.widest_swizzle(48, H200) == 0
    assert lg.legal_swizzles(64, H200) == "32, 64"
    assert lg.swizzle_problem(0, 48, H200) is None and lg.swizzle_problem(64, 128, H200) is None
    assert lg.swizzle_problem(128, 48, H200) == ("swizzle 128 needs the minor block dimension's bytes (48 B) to be a "
                                                 "multiple of 128; legal here: none (use 0)")
    problems = Problems()
    assert lg.choose_swizzle("auto", 64, H200, ("s",), problems) == 64
    assert lg.choose_swizzle(None, 256, H200, ("s",), problems) == 128
    assert lg.choose_swizzle(128, 64, H200, ("s",), problems, what="w", none="none") == 128
    assert [(p.path, p.message) for p in problems] == [
        (("s",), "swizzle 128 needs w (64 B) to be a multiple of 128; legal here: 32, 64")]
