# Session 6 (2026-12-05), the one H200 call of issue 19: every backward verified against float64 and timed
# interleaved against torch autograd (bench/backward_gpu.py), then the autodiff GPU tests (torch eager, inductor,
# opcheck of the step ops, CUDA graphs; jax.jit(grad) compiled), then a short training run of the example.
set -u
START=$(date +%s)
O=$OUT
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $O/clocks.txt 2>&1
timeout 260 python3 bench/backward_gpu.py --out $O --iters 50 > $O/bench.log 2>&1
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider tests/autodiff > $O/gputests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $O/gputests.log | cut -c1-200 | tail -5
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/families/matmul/test_saved_output.py tests/families/attention_backward > $O/gputests2.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $O/gputests2.log | cut -c1-200 | tail -5
# the target plumbing (schedule.target) touched the driver: sm_90a launches unchanged, an sm_100a package refused
timeout 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runtime/test_gpu.py tests/families/matmul/test_sm100.py > $O/gputests3.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $O/gputests3.log | cut -c1-200 | tail -5
LEFT=$(( 530 - ($(date +%s) - START) ))
if [ $LEFT -gt 60 ]; then
  (timeout $((LEFT - 10)) bash -c "python3 -m schedgen build examples/train/qkv.yaml examples/train/proj.yaml examples/train/up.yaml examples/train/down.yaml examples/train/attn.yaml -o build/train > $O/train.log 2>&1 && python3 examples/train_mlp_attention.py --steps 120 --json $O/train.json >> $O/train.log 2>&1"); tail -4 $O/train.log | cut -c1-200
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> $O/clocks.txt 2>&1
tail -16 $O/bench.log | cut -c1-330
